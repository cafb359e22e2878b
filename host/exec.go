package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/wasmjobs/wasmjobs/abi"
	"github.com/wasmjobs/wasmjobs/worker"
)

// Cause is why a run of a module failed, the detail of a worker.Failed outcome that
// only the host knows. The zero Cause is none: the handler returned an outcome code.
type Cause string

// The causes of a failed run.
const (
	CauseTrap        Cause = "trap"         // a trap, an out-of-memory abort, env.abort, a bad pointer
	CauseTimeout     Cause = "timeout"      // the wall-clock limit passed
	CauseInvalidCode Cause = "invalid_code" // wasmjobs_handle returned an unknown code
	CauseExit        Cause = "exit"         // proc_exit, with any code
	CauseNoWait      Cause = "no_wait"      // a WAIT on a host whose backend keeps no waiting jobs (Config.NoWait)
	CauseCancelled   Cause = "cancelled"    // an operator cancelled the job while it ran (worker.Worker.Cancel)
)

// Log is one log line of a job.
type Log struct {
	Level slog.Level
	Msg   string
}

// Execution is what happened when a module ran a job.
type Execution struct {
	// Outcome is how the run ended: the outcome code the handler returned (Ack, Retry,
	// Defer, DeadLetter, Wait), or worker.Failed.
	Outcome worker.Outcome
	// Cause says why a Failed run failed; empty for any other outcome.
	Cause Cause
	// Code is what wasmjobs_handle returned; nil when it returned nothing.
	Code *int32
	// Reason is the staged reason, or for a failure what went wrong.
	Reason string
	// Delay is the staged delay; nil when none was staged.
	Delay *time.Duration
	// Output is what the job wrote with output_write.
	Output []byte
	// Logs are the job's log lines, when Run was given no LogFunc.
	Logs []Log
	// Children are the child jobs the guest staged, the awaited ones marked.
	Children []worker.Child
	// Outage, when a request of the run met an outage (its destination's circuit
	// breaker was open, or the request's failure opened it), is when those breakers
	// let calls through again; nil otherwise. A Handler defers a failed job until
	// then (outageDefer).
	Outage *time.Time
	// RateLimited, when a request of the run failed as rate limited (a limit of
	// [http.limits] would have held it past its deadline), is when the limit would
	// have let it go; nil otherwise. A Handler defers a failed job until then
	// (rateLimitDefer).
	RateLimited *time.Time
	// DestinationFailed says a request of the run failed in a way the circuit
	// breakers count (a connection failure, the grant's timeout, a 5xx), whether or
	// not that opened one: a job already waiting out an outage stays in it
	// (outageDefer).
	DestinationFailed bool
	// Calls are the outbound HTTP requests the job made, in the order they started,
	// every one (a run makes at most its grant's max_requests); Result keeps the first
	// MaxResultCalls.
	Calls []worker.Call
	// Duration is how long the job took, instance included.
	Duration time.Duration
	// Module and Version name the module version that ran the job.
	Module, Version string
}

// Ending names how the run ended in one word: its Cause when it failed (trap, timeout,
// invalid_code, exit, cancelled, no_wait), else its Outcome (ack, retry, defer,
// dead_letter, wait). It is the
// result that wasmjobs invoke reports.
func (x *Execution) Ending() string {
	if x.Outcome == worker.Failed {
		return string(x.Cause)
	}
	return x.Outcome.String()
}

// fail ends the run as a failure with cause and reason.
func (x *Execution) fail(cause Cause, reason string) {
	x.Outcome, x.Cause, x.Reason = worker.Failed, cause, reason
}

// Result turns the execution into the worker's result. Staged children count only on
// ack and wait, and a staged reason only on retry, defer and dead-letter (ABI v1); a
// failure ignores the staged delay, and so does a wait.
func (x *Execution) Result() worker.Result {
	res := worker.Result{Reason: x.Reason, Output: x.Output, Handler: x.Module, Version: x.Version, Calls: x.Calls}
	if n := len(x.Calls); n > MaxResultCalls {
		res.Calls, res.CallsDropped = x.Calls[:MaxResultCalls], n-MaxResultCalls
	}
	res.Outcome = x.Outcome
	switch x.Outcome {
	case worker.Ack:
		res.Reason, res.Children = "", x.Children
	case worker.Wait:
		res.Reason, res.Children = "", x.Children
		return res
	case worker.Retry, worker.Defer, worker.DeadLetter:
	default:
		res.Outcome = worker.Failed
		return res
	}
	if x.Delay != nil && x.Outcome != worker.DeadLetter {
		res.Delay = *x.Delay
	}
	return res
}

// Run executes job on the module: on a warm instance, or a fresh one under Fresh
// isolation. Logs go to sink, or into the execution's Logs when sink is nil. A job whose
// payload passes the module's limit is dead-lettered without running.
func (m *Module) Run(ctx context.Context, job *worker.Job, sink LogFunc) Execution {
	if err := m.begin(); err != nil {
		x := Execution{Module: m.name, Version: m.version}
		x.fail(CauseTrap, err.Error())
		return x
	}
	return m.run(ctx, job, sink, RoleCurrent)
}

// run executes a job counted in by begin, on the module in role (RoleCurrent or
// RoleCanary). With tracing on, the run is a span under ctx's.
func (m *Module) run(ctx context.Context, job *worker.Job, sink LogFunc, role string) Execution {
	m.e.enter()
	defer m.e.leave()
	start := time.Now()
	x := Execution{Module: m.name, Version: m.version}
	var span trace.Span // nil when tracing is off: no span object on its path
	if m.e.tracer != nil {
		ctx, span = m.startRun(ctx, role)
	}
	if n, max := len(job.Envelope.Payload), m.manifest.Limits.MaxPayload; n > max {
		m.release(nil, false)
		x.Outcome, x.Reason = worker.DeadLetter, fmt.Sprintf("payload of %d bytes passes the module's limit of %d bytes", n, max)
		endRun(span, &x, nil)
		return x
	}
	// A JS job's one deadline covers a new VM's setup and the run.
	deadline := start.Add(m.manifest.Limits.Timeout)
	inst, err := m.instanceFor(ctx, deadline)
	if err != nil {
		x.fail(CauseTrap, err.Error())
		x.Duration = time.Since(start)
		switch {
		case errors.Is(err, errJSSetupTimeout):
			// The job's timeout passed while its new JS VM started: the same failure,
			// with the same reason, as a timeout in the run.
			x.fail(CauseTimeout, fmt.Sprintf("timeout after %v", m.manifest.Limits.Timeout))
		case errors.Is(ctx.Err(), context.Canceled):
			// Cancelled while its instance was made: the same failure as in the run.
			f := cancelled(ctx)
			x.fail(f.cause, f.reason)
		}
		endRun(span, &x, nil)
		return x
	}
	inst.st.reset(job, m, sink) // a nil sink keeps the lines for x.Logs
	if span != nil {
		inst.st.traceRun(span, m.e.eventLimit)
	}
	inst.jobs++
	var code int32
	var fail *failure
	switch {
	case inst.js != nil:
		code, fail = inst.js.runJob(ctx, deadline, m.manifest.Limits.Timeout)
	case inst.serve != nil:
		code, fail = inst.serveJob(ctx, m.manifest.Limits.Timeout)
	default:
		code, fail = inst.call(ctx, inst.handle, m.manifest.Limits.Timeout)
	}
	st := &inst.st
	st.finish()
	x.Logs = st.logs
	x.Calls = m.calls(st.http.end())
	x.Output, x.Children, x.Outage, x.RateLimited, x.DestinationFailed = st.output, st.children, st.http.outage, st.http.limited, st.http.failed
	if st.delayMs >= 0 {
		d := time.Duration(st.delayMs) * time.Millisecond
		x.Delay = &d
	}
	healthy := false
	switch {
	case fail != nil:
		x.fail(fail.cause, fail.reason)
		if fail.reason == "trap: stack overflow" {
			m.e.reclaim()
		}
	case code < abi.OutcomeAck || code > abi.OutcomeWait:
		x.Code = &code
		x.fail(CauseInvalidCode, fmt.Sprintf("invalid outcome code %d", code))
	case code == abi.OutcomeWait && m.e.noWait != "":
		// A JS handler, or a module that returns 4 without importing enqueue_awaited: a
		// module that imports it was refused at load.
		x.Code = &code
		x.fail(CauseNoWait, "wait: "+m.e.noWait)
	default:
		x.Code = &code
		x.Outcome = [...]worker.Outcome{worker.Ack, worker.Retry, worker.Defer, worker.DeadLetter, worker.Wait}[code]
		x.Reason = st.reason
		healthy = inst.alive() && (inst.js == nil || inst.js.healthy(context.Background()))
	}
	endRun(span, &x, st)
	st.reset(nil, m, m.initSink) // drop the job's references while the instance idles
	m.release(inst, healthy)
	x.Duration = time.Since(start)
	return x
}
