package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/tetratelabs/wazero/api"

	"github.com/wasmjobs/wasmjobs/abi"
)

// serveLoop is a pooled instance's one long call of wasmjobs_serve, which pulls its jobs
// through next_job instead of being called once for each. wazero v1.12.0 starts a
// goroutine for every call made under close-on-context-done, and a call per job wants a
// deadline timer of its own: the loop pays for both once per instance. The job's
// goroutine (run) hands it a job and waits for its outcome, and is the loop's watchdog:
// at the job's deadline, or when the job's context ends, it cancels the loop's context,
// on which wazero closes the module and the guest ends at its next check, as a call per
// job would.
//
// Between jobs the guest waits inside next_job, and touches nothing of the host's: the
// job's goroutine owns the instance's callState from the outcome's arrival to the next
// hand-over, which the channels order. Once the loop's context has ended, next_job no
// longer waits, and a guest that ignores its 0 could run host functions on: the job's
// goroutine then waits for the call to end before it reads the job's state.
type serveLoop struct {
	ctx    context.Context
	cancel context.CancelFunc // ends the loop: wazero closes the instance's module
	// next hands the loop a job, held in the instance's callState.
	next chan struct{}
	// result carries the outcome of the job handed over last: exactly one per job.
	result chan serveResult
	// exited is closed when the call of wasmjobs_serve has returned; ready when it
	// first called next_job, and wazero has done with the context's values.
	exited, ready chan struct{}
	// err is how the call of wasmjobs_serve ended, set before exited is closed.
	err error

	// Only the loop's goroutine uses inJob (a job has been handed over and its result
	// not yet sent), stopped (next_job has returned 0) and dead, the state the host
	// functions answer from once it has: a guest that runs on past the 0 touches no job's.
	inJob   bool
	stopped bool
	dead    callState
	m       *Module

	// Only the job's goroutine uses armed and killed, and timer but for the Stop when the
	// instance closes.
	timer *time.Timer // the watchdog's: armed at or before the current job's deadline
	armed bool        // the timer runs, or has fired and its tick was not received
	// killed says the job's goroutine cancelled the loop: the instance is done.
	killed bool

	// jobCtx and deadline are the current job's, for the host functions (serveContext):
	// the job's goroutine sets them before the hand-over and clears jobCtx after the
	// result, and the loop's goroutine reads them in between.
	jobCtx   context.Context
	deadline time.Time

	// view is the current job's context for its outbound requests (requestContext),
	// made by the loop's goroutine at the job's first request; viewCancel ends it once
	// the job has ended, and viewStop forgets the loop's end, which ends it too.
	view       context.Context
	viewCancel context.CancelFunc
	viewStop   func() bool
}

// serveResult is how a served job ended: the outcome code the guest passed to next_job,
// or err, how the call of wasmjobs_serve ended while the job ran (nil when it returned).
type serveResult struct {
	code  int32
	ended bool // the call of wasmjobs_serve ended during the job
	err   error
}

// errServeReturned is the failure of a job during which wasmjobs_serve returned
// instead of passing its outcome to next_job.
var errServeReturned = &failure{CauseTrap, "wasmjobs_serve returned while it ran a job, without passing its outcome to next_job"}

// serveContext is the context of the call of wasmjobs_serve, as its host functions see
// it: it ends with the loop, and it carries the current job's deadline and values (its
// trace span), so that a request a host function makes is bound and traced as the job's.
type serveContext struct {
	callContext
	loop *serveLoop
}

// Deadline is the current job's; none between jobs.
func (c *serveContext) Deadline() (time.Time, bool) {
	if c.loop.jobCtx == nil {
		return time.Time{}, false
	}
	d := c.loop.deadline
	if jd, ok := c.loop.jobCtx.Deadline(); ok && jd.Before(d) {
		d = jd
	}
	return d, true
}

// Value finds the instance's callState, and otherwise looks in the current job's context.
func (c *serveContext) Value(key any) any {
	if key == (stateKey{}) {
		return c.st
	}
	if c.loop.jobCtx != nil {
		return c.loop.jobCtx.Value(key)
	}
	return c.callContext.Value(key)
}

// requestContext is the context a host function makes outbound requests under: ctx
// itself for a call per job; in a serve loop, one of the current job's own, ending at its
// deadline, when its context ends, or with the loop, and with its values; outside a job
// (before the loop's first), the loop's, without a job's. A request's context outlives
// the host function (the HTTP transport's goroutines read it), so it must not see the
// loop's next job.
func requestContext(ctx context.Context) context.Context {
	c, ok := ctx.(*serveContext)
	if !ok {
		return ctx
	}
	s := c.loop
	if s.stopped {
		return &callContext{Context: s.ctx, st: &s.dead}
	}
	if s.jobCtx == nil {
		return &c.callContext
	}
	if s.view == nil {
		var v context.Context
		v, s.viewCancel = context.WithDeadline(s.jobCtx, s.deadline)
		s.viewStop = context.AfterFunc(s.ctx, s.viewCancel)
		s.view = &callContext{Context: v, st: c.st}
	}
	return s.view
}

// startServe starts the instance's serve loop, in a goroutine the engine counts
// (Engine.Close ends and waits for the loops still running), and waits, under the
// manifest's timeout and ctx, until it asks for its first job: a loop that cannot is an
// error, and has ended.
func (inst *instance) startServe(ctx context.Context, m *Module, fn api.Function, timeout time.Duration) error {
	e := m.e
	lctx, cancel := context.WithCancel(e.serveCtx)
	s := &serveLoop{
		ctx:    lctx,
		cancel: cancel,
		next:   make(chan struct{}),
		result: make(chan serveResult),
		exited: make(chan struct{}),
		ready:  make(chan struct{}),
		m:      m,
		timer:  time.NewTimer(time.Hour),
	}
	s.timer.Stop()
	ready := s.ready // nextJob clears the field
	inst.serve = s
	inst.ctx = lctx // sleep ends with the loop
	cctx := &serveContext{callContext: callContext{Context: lctx, st: &inst.st}, loop: s}
	inst.stdout.loop, inst.stderr.loop = s, s
	e.serves.Add(1)
	e.loops.Add(1)
	go func() {
		defer e.serves.Done()
		defer close(s.exited)
		defer e.loops.Add(-1) // counted out before exited: a stop that returned has no loop left
		_, err := fn.Call(cctx)
		s.err = err
		if s.inJob {
			s.result <- serveResult{ended: true, err: err}
		}
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-ready:
		// As a call's, the requests and the partial lines it left before its first job
		// end there: the guest waits in next_job.
		inst.st.http.close()
		inst.stdout.flush()
		inst.stderr.flush()
		return nil
	case <-s.exited:
	case <-t.C:
		s.stop()
		return fmt.Errorf("%s did not ask for a job (%s) within the timeout of %v", abi.ExportServe, abi.FuncNextJob, timeout)
	case <-ctx.Done():
		s.stop()
		return fmt.Errorf("%s did not ask for a job (%s) before the job's context ended: %w", abi.ExportServe, abi.FuncNextJob, context.Cause(ctx))
	}
	s.stop()
	if s.err != nil {
		return fmt.Errorf("%s failed before it asked for a job: %s", abi.ExportServe, classify(ctx, s.err, timeout).reason)
	}
	return fmt.Errorf("%s returned before it asked for a job (%s)", abi.ExportServe, abi.FuncNextJob)
}

// nextJob is next_job(outcome) -> i32: it passes the outcome of the job handed over
// last to that job's goroutine, then waits for the next job (1) or the loop's end (0).
// Outside wasmjobs_serve it returns 0 at once.
func nextJob(ctx context.Context, _ api.Module, stack []uint64) {
	c, ok := ctx.(*serveContext)
	if !ok {
		stack[0] = 0
		return
	}
	s := c.loop
	if s.ready != nil {
		close(s.ready)
		s.ready = nil
	}
	if s.stopped {
		stack[0] = 0
		return
	}
	if s.inJob {
		s.inJob = false
		s.result <- serveResult{code: int32(stack[0])}
	}
	select {
	case <-s.next:
		s.inJob = true
		stack[0] = 1
	case <-s.ctx.Done():
		if !s.stopped {
			s.stopped = true
			s.dead.reset(nil, s.m, func(slog.Level, string) {})
		}
		stack[0] = 0
	}
}

// errServeEnded is the failure of a job handed to a loop that had ended while its
// instance idled: only the host ends one then (an engine's Close).
var errServeEnded = &failure{CauseTimeout, "cancelled: the host is shutting down"}

// serveJob runs the job in the instance's callState on its serve loop, under the
// manifest's timeout, from now (as a call's: not counting the instance's making), and
// ctx, and classifies how it ended as call does.
func (inst *instance) serveJob(ctx context.Context, timeout time.Duration) (int32, *failure) {
	s := inst.serve
	deadline := time.Now().Add(timeout)
	s.jobCtx, s.deadline = ctx, deadline
	if !s.armed {
		// Armed once, it stays armed across jobs, each later than the last: when it
		// fires during a job whose deadline is still ahead, it is armed again for it.
		s.timer.Reset(time.Until(deadline))
		s.armed = true
	}
	var r serveResult
	var why *failure // set when this goroutine ended the loop
	select {
	case s.next <- struct{}{}:
	case <-s.exited:
		s.jobCtx = nil
		s.killed = true
		return 0, errServeEnded
	}
	done := ctx.Done() // nil once it has ended the loop: a closed channel is ready for ever
wait:
	for {
		select {
		case r = <-s.result:
			break wait
		case <-done:
			done = nil
			if why == nil { // a timeout that came first stays the failure
				why = ended(ctx, timeout)
			}
			s.kill()
		case <-s.timer.C:
			s.armed = false
			if left := time.Until(deadline); left > 0 {
				s.timer.Reset(left)
				s.armed = true
				continue
			}
			why = timedOut(timeout)
			s.kill()
		}
	}
	if !r.ended && why == nil {
		// As a call that returns after its context ended fails (wazero would have closed
		// it at its next check), an outcome that came after the job's context ended or
		// its deadline passed is not the job's: a request the cancel aborted, say.
		switch {
		case ctx.Err() != nil:
			why = ended(ctx, timeout)
		case !time.Now().Before(deadline):
			why = timedOut(timeout)
		case s.ctx.Err() != nil:
			why = errServeEnded // the engine closed as the job ended
		}
	}
	if why != nil && !r.ended {
		// The loop's context has ended, or is about to: the guest may still run, past
		// next_job's 0, until wazero's next check; the job's state is read once it has
		// stopped.
		s.kill()
		<-s.exited
	}
	s.jobCtx = nil
	inst.st.http.close() // requests the guest left open end with its job
	if s.viewCancel != nil {
		s.viewStop()
		s.viewCancel()
		s.view, s.viewCancel, s.viewStop = nil, nil, nil
	}
	inst.stdout.flush()
	inst.stderr.flush()
	if why == nil && !r.ended {
		return r.code, nil
	}
	switch {
	case why != nil:
		return 0, why
	case r.err == nil:
		return 0, errServeReturned
	}
	return 0, classify(ctx, r.err, timeout)
}

// ended is the failure of a job whose context ended: a timeout when its deadline passed
// (worker.Deadline's), as a call's would be, else cancelled.
func ended(ctx context.Context, timeout time.Duration) *failure {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return timedOut(timeout)
	}
	return cancelled(ctx)
}

// kill ends the loop from the job's goroutine.
func (s *serveLoop) kill() {
	if !s.killed {
		s.killed = true
		s.cancel()
	}
}

// stop ends the loop and waits for its call to return: the guest, waiting in next_job
// between jobs, is told to return (0), and wazero closes the module should it not.
// Once the loop has ended, next_job returns 0 whenever it is called: the guest never
// waits again, and a guest that keeps running ends at wazero's next check.
func (s *serveLoop) stop() {
	s.cancel()
	<-s.exited
	s.timer.Stop()
}

// serveExport reports whether the module's exports include wasmjobs_serve of the right
// type, and an error when they include it with another, or without the import it needs.
func serveExport(fns map[string]api.FunctionDefinition, imports []api.FunctionDefinition) (bool, error) {
	def, ok := fns[abi.ExportServe]
	if !ok {
		return false, nil
	}
	if len(def.ParamTypes()) != 0 || len(def.ResultTypes()) != 0 {
		return false, fmt.Errorf("export %q has type %s, want %s", abi.ExportServe,
			signature(def.ParamTypes(), def.ResultTypes()), signature(nil, nil))
	}
	for _, imp := range imports {
		if mod, name, _ := imp.Import(); mod == abi.ImportModule && name == abi.FuncNextJob {
			return true, nil
		}
	}
	return false, fmt.Errorf("exports %q without importing %s.%s, through which it takes its jobs", abi.ExportServe, abi.ImportModule, abi.FuncNextJob)
}
