package worker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/internal/backoff"
)

// PriorityHeader is the reserved header in which a deferred job keeps the priority it
// had before the worker raised it to the queue's top level; the worker restores it when
// the job is retried. Headers beginning with "wasmjobs-" are reserved.
const PriorityHeader = "wasmjobs-priority"

// OutageHeader is the reserved header in which a job deferred to wait out an outage
// (Result.Outage) keeps when the outage began, in Unix milliseconds: set at the first
// outage defer, kept across those that follow, dropped by any other settle (and by a
// replay from the dead letters).
const OutageHeader = backend.OutageHeader

// process runs one delivery through decode, extract, execute and acknowledge, then
// releases its capacity.
func (w *Worker) process(qs *queueState, d backend.Delivery) {
	defer w.release(qs)
	env, err := d.Envelope()
	if err != nil {
		// decode: a message that cannot be decoded is dead-lettered with the reason. It
		// starts like any job, so that every observer sees started before settled.
		// Traced, it has a process span like any job, an error saying why.
		spec := qs.policy.Load().spec
		job := &Job{Envelope: env, Attempt: max(env.Attempt, 1)}
		if w.tracer != nil {
			w.startProcess(w.handlerCtx, spec, job)
		}
		w.obs.Observe(Event{Kind: EventStarted, Job: job})
		p := plan{settle: DeadLetter, reason: err.Error()}
		endProcess(job, Result{Outcome: Failed, Reason: p.reason}, p, w.settle(spec, d, job, Result{}, 0, p))
		return
	}
	// extract
	pol := qs.policy.Load()
	spec := pol.spec
	job := &Job{Envelope: env, Attempt: max(env.Attempt, 1), MaxAttempts: env.MaxAttempts, Round: env.Round}
	if job.MaxAttempts <= 0 {
		job.MaxAttempts = spec.MaxAttempts
	}
	base := w.handlerCtx
	if w.tracer != nil {
		base = w.startProcess(base, spec, job)
	}
	w.obs.Observe(Event{Kind: EventStarted, Job: job})
	if err := readAwaited(base, d, job); err != nil {
		// A resumed run without its children's results would decide blind: it fails,
		// the retry way, and reads them again on its next delivery.
		res := Result{Outcome: Failed, Reason: err.Error()}
		p := w.plan(spec, job, res)
		endProcess(job, res, p, w.settle(spec, d, job, Result{}, 0, p))
		return
	}
	// execute, under a context of the job's own that Cancel can end
	ctx, cancel := context.WithCancelCause(base)
	unwatch := watchLost(d, cancel)
	r := w.runs.start(env.ID, cancel)
	start := time.Now()
	res := pol.handler.Handle(ctx, job)
	took := time.Since(start)
	unwatch()
	cancelled := w.runs.returned(r)
	cancel(nil)
	// acknowledge: a job cancelled while it ran settles as cancelled, whatever its
	// result.
	var p plan
	if cancelled {
		p = plan{settle: Cancelled, reason: ErrCancelled.Error()}
	} else {
		p = w.plan(spec, job, res)
	}
	r.decide(p.settle)
	err = w.settle(spec, d, job, res, took, p)
	endProcess(job, res, p, err)
	w.runs.end(r, err)
}

// watchLost ends the handler's context with ErrLost when d is a
// backend.LeasedDelivery whose claim is lost while the handler runs; the returned
// function stops watching. Its settle is then refused, and the job is the backend's
// to deliver again.
func watchLost(d backend.Delivery, cancel context.CancelCauseFunc) (unwatch func()) {
	ld, ok := d.(backend.LeasedDelivery)
	if !ok {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		select {
		case <-ld.Lost():
			cancel(ErrLost)
		case <-done:
		}
	}()
	return func() { close(done) }
}

// readAwaited gives a resumed job (Round > 0) the results of its last wait.
func readAwaited(ctx context.Context, d backend.Delivery, job *Job) error {
	if job.Round == 0 {
		return nil
	}
	ad, ok := d.(backend.AwaitedDelivery)
	if !ok {
		return fmt.Errorf("job %s is at round %d, but the backend's delivery gives no awaited results (backend.AwaitedDelivery)", job.Envelope.ID, job.Round)
	}
	res, err := ad.Awaited(ctx)
	if err != nil {
		return fmt.Errorf("reading the results of round %d's awaited children: %w", job.Round, err)
	}
	if len(res) == 0 {
		// A wait always awaits at least one child, so none means the results are lost;
		// a handler run without them would take itself for a first run and fan out again.
		return fmt.Errorf("job %s is at round %d, but the backend gave no results of its awaited children (a wait awaits at least one)", job.Envelope.ID, job.Round)
	}
	job.Awaited = res
	return nil
}

// release frees the job's slots and wakes the dispatcher.
func (w *Worker) release(qs *queueState) {
	left := qs.running.Add(-1)
	<-w.slots
	if left == 0 {
		w.mu.Lock()
		if qs.removed {
			qs.drainOnce.Do(func() { close(qs.drained) })
		}
		w.mu.Unlock()
	}
	if limit := qs.policy.Load().limit; limit > 0 && left < limit {
		w.signal()
	}
	w.jobs.Done()
}

// plan is a decided settle.
type plan struct {
	settle   Outcome
	reason   string
	delay    time.Duration
	next     backend.Envelope
	children []Child
	// wait is what a Wait waits for, and pubs its children as published.
	wait backend.Await
	pubs []backend.Publication
}

// Decide returns how a worker settles a job given its handler's result, and the reason
// it records, without doing anything: ack, retry (dead-letter once the attempts are used
// up), defer (dead-letter past maxDefers consecutive defers, an outage's defers not
// counted; a defer without a delay is a failure), dead-letter or wait (a wait without an
// awaited child is a failure; one past MaxRounds is dead-lettered). maxDefers <= 0 means DefaultMaxDefers; a job's MaxAttempts
// <= 0 means DefaultMaxAttempts.
func Decide(job *Job, res Result, maxDefers int) (Outcome, string) {
	maxDefers = positiveOr(maxDefers, DefaultMaxDefers)
	failure := func(reason string) (Outcome, string) {
		if maxAttempts := positiveOr(job.MaxAttempts, DefaultMaxAttempts); job.Attempt >= maxAttempts {
			return DeadLetter, fmt.Sprintf("max attempts (%d) exceeded: %s", maxAttempts, reason)
		}
		return Retry, reason
	}
	switch res.Outcome {
	case Ack:
		return Ack, ""
	case Retry:
		return failure(orDefault(res.Reason, "retry requested"))
	case Defer:
		if res.Delay <= 0 {
			return failure("defer without delay")
		}
		reason := orDefault(res.Reason, "deferred")
		if !res.Outage && job.Envelope.Defers+1 > maxDefers {
			return DeadLetter, fmt.Sprintf("max defers (%d) exceeded: %s", maxDefers, reason)
		}
		return Defer, reason
	case DeadLetter:
		return DeadLetter, orDefault(res.Reason, "dead-lettered by the handler")
	case Failed:
		return failure(orDefault(res.Reason, "failed"))
	case Wait:
		if job.Round >= MaxRounds {
			return DeadLetter, fmt.Sprintf("max rounds (%d) exceeded: the job waited for children %d times", MaxRounds, job.Round)
		}
		for _, c := range res.Children {
			if c.Await {
				return Wait, ""
			}
		}
		return failure("wait without an awaited child")
	}
	return failure(fmt.Sprintf("invalid outcome %d", int(res.Outcome)))
}

// plan decides how to settle a job given its handler's result, and what to publish.
func (w *Worker) plan(spec Queue, job *Job, res Result) plan {
	settle, reason := Decide(job, res, spec.MaxDefers)
	switch settle {
	case Ack:
		return plan{settle: Ack, children: res.Children}
	case DeadLetter:
		return plan{settle: DeadLetter, reason: reason}
	case Wait:
		pubs := w.childPublications(job, res.Children)
		var ids []string
		for i, c := range res.Children {
			if c.Await {
				ids = append(ids, pubs[i].Envelope.ID)
			}
		}
		return plan{settle: Wait, children: res.Children, pubs: pubs, wait: backend.Await{IDs: ids, Timeout: res.WaitTimeout}}
	case Defer:
		env := job.Envelope
		next := env.Clone()
		next.Attempt, next.MaxAttempts, next.Defers, next.Reason = job.Attempt, job.MaxAttempts, env.Defers+1, reason
		if res.Outage {
			// An outage's wait is not the job's doing: its defers are not counted, and
			// its start is kept from the first of them.
			next.Defers = env.Defers
			if _, ok := job.OutageSince(); !ok {
				if next.Headers == nil {
					next.Headers = make(map[string]string, 1)
				}
				next.Headers[OutageHeader] = strconv.FormatInt(time.Now().UnixMilli(), 10)
			}
		} else {
			delete(next.Headers, OutageHeader)
		}
		if spec.PriorityLevels > 0 {
			if _, ok := next.Headers[PriorityHeader]; !ok {
				if next.Headers == nil {
					next.Headers = make(map[string]string, 1)
				}
				next.Headers[PriorityHeader] = strconv.Itoa(int(next.Priority))
			}
			next.Priority = uint8(spec.PriorityLevels)
		}
		// A staged delay (a Retry-After of two days, say) never parks a job past the
		// queue's longest wait; the same rule holds for a retry's below.
		return plan{settle: Defer, reason: reason, delay: min(res.Delay, spec.Backoff.Cap), next: next}
	}
	delay := w.backoff(spec.Backoff, job.Attempt)
	if res.Outcome == Retry && res.Delay > 0 {
		// A staged delay applies to a retry, never to a failure, and is capped at the
		// queue's longest wait as a defer's is.
		delay = min(res.Delay, spec.Backoff.Cap)
	}
	next := job.Envelope.Clone()
	next.Attempt, next.MaxAttempts, next.Defers, next.Reason = job.Attempt+1, job.MaxAttempts, 0, reason
	delete(next.Headers, OutageHeader)
	restorePriority(&next)
	return plan{settle: Retry, reason: reason, delay: delay, next: next}
}

// restorePriority gives a job that was deferred back its own priority.
func restorePriority(env *backend.Envelope) {
	p, ok := env.Headers[PriorityHeader]
	if !ok {
		return
	}
	if n, err := strconv.ParseUint(p, 10, 8); err == nil {
		env.Priority = uint8(n)
	}
	delete(env.Headers, PriorityHeader)
}

// backoff returns the wait before the attempt after attempt: full jitter under an
// exponential ceiling.
func (w *Worker) backoff(b Backoff, attempt int) time.Duration {
	return backoff.Policy{Base: b.Base, Cap: b.Cap, Jitter: w.cfg.Jitter}.Delay(attempt)
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// settle carries out p on the delivery, reports it and returns the settle's error.
// After the drain timeout it settles nothing: the delivery stays unacknowledged for the
// backend to deliver again.
func (w *Worker) settle(spec Queue, d backend.Delivery, job *Job, res Result, took time.Duration, p plan) error {
	w.mu.Lock()
	if w.abandoned {
		w.mu.Unlock()
		endSends(job, p.settle, errAbandoned)
		w.obs.Observe(Event{Kind: EventAbandoned, Job: job, Result: res, Settle: p.settle, Reason: p.reason, Duration: took})
		return errAbandoned
	}
	w.settling.Add()
	w.mu.Unlock()
	defer w.settling.Done()

	// Only settles that publish can wait on the backend; a plain ack needs no timer.
	// Every settle ends at the drain deadline (Stop cancels settleCtx).
	ctx := w.settleCtx
	if p.settle != Ack || len(p.children) > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, w.cfg.SettleTimeout)
		defer cancel()
	}
	span := w.startSettle(job)
	var err error
	// A backend whose deliveries settle atomically gets the children and the record in
	// the settle's own write; any other gets today's publish-then-ack.
	ad, atomic := d.(backend.AtomicDelivery)
	var rec *backend.JobRecord
	if atomic {
		rec = runRecord(job, res, took)
	}
	switch p.settle {
	case Ack:
		if atomic {
			if err = ad.AckWith(ctx, w.childPublications(job, p.children), rec); err == nil || errors.Is(err, backend.ErrSettleUnknown) {
				break // unknown: the ack may still land, so no second settle
			}
			if unsettleable(err) {
				break // no settle can succeed: the backend delivers the job again, or has it settled
			}
			// Nothing was written: the job is failed the retry way, as below.
			endSends(job, p.settle, err)
			p = w.plan(spec, job, Result{Outcome: Failed, Reason: err.Error()})
			err = w.failSettle(ctx, d, p, rec)
			break
		}
		if err = w.publishChildren(ctx, job, p.children); err != nil {
			// A child that cannot be published fails the job: the retry way.
			endSends(job, p.settle, err)
			p = w.plan(spec, job, Result{Outcome: Failed, Reason: err.Error()})
			err = w.failSettle(ctx, d, p, rec)
			break
		}
		err = d.Ack(ctx)
	case Retry:
		if atomic {
			err = ad.RetryWith(ctx, p.next, p.delay, rec)
			break
		}
		err = d.Retry(ctx, p.next, p.delay)
	case Defer:
		if atomic {
			err = ad.DeferWith(ctx, p.next, p.delay, rec)
			break
		}
		err = d.Defer(ctx, p.next, p.delay)
	case DeadLetter:
		if atomic {
			err = ad.DeadLetterWith(ctx, p.reason, rec)
			break
		}
		err = d.DeadLetter(ctx, p.reason)
	case Wait:
		wd, ok := d.(backend.WaitingDelivery)
		if !ok {
			// Acking would lose the fan-in: the job fails, saying why.
			p = w.plan(spec, job, Result{Outcome: Failed, Reason: fmt.Sprintf(
				"wait: the backend's deliveries cannot wait (%T is no backend.WaitingDelivery)", d)})
			err = w.failSettle(ctx, d, p, rec)
			break
		}
		if err = wd.WaitWith(ctx, p.pubs, p.wait, rec); err == nil || errors.Is(err, backend.ErrSettleUnknown) {
			break // unknown: the wait may still land, so no second settle
		}
		// Nothing was written: the job is failed the retry way, as an ack's is.
		endSends(job, p.settle, err)
		p = w.plan(spec, job, Result{Outcome: Failed, Reason: err.Error()})
		err = w.failSettle(ctx, d, p, rec)
	case Cancelled:
		// Whatever the handler staged is dropped: a cancelled job publishes nothing.
		if cd, ok := d.(backend.CancellableDelivery); ok {
			err = cd.Cancel(ctx, p.reason, runRecord(job, res, took))
			break
		}
		err = d.Ack(ctx) // the backend keeps nothing of a settled job: an ack says all
	}
	endSends(job, p.settle, err)
	endSettle(span, job, p.settle, err)
	ev := Event{Kind: EventSettled, Job: job, Result: res, Settle: p.settle, Reason: p.reason, Delay: p.delay, Duration: took}
	if err != nil {
		ev.Kind, ev.Err = EventSettleFailed, fmt.Errorf("%s job %s of queue %q: %w", p.settle, job.Envelope.ID, job.Envelope.Queue, err)
		msg := "settle failed; the backend will deliver the job again"
		if errors.Is(err, backend.ErrSettleUnknown) {
			msg = "settle outcome unknown: the write may still land, else the backend delivers the job again"
		}
		w.log.ErrorContext(trace.ContextWithSpanContext(context.Background(), job.SpanContext()), msg, "job", job.Envelope.ID, "queue", job.Envelope.Queue, "settle", p.settle.String(), "error", err)
	}
	w.obs.Observe(ev)
	return ev.Err
}

// unsettleable reports whether err says that the delivery cannot be settled at all
// (its stream was lost, it was settled already, the backend closed), rather than that
// this settle's write failed: a retry in its place would fail the same way.
func unsettleable(err error) bool {
	return errors.Is(err, backend.ErrStreamClosed) || errors.Is(err, backend.ErrAlreadySettled) || errors.Is(err, backend.ErrShutDown)
}

// failSettle carries out a failure's plan (a retry, or a dead letter once the attempts
// are used up), atomically where the delivery can.
func (w *Worker) failSettle(ctx context.Context, d backend.Delivery, p plan, rec *backend.JobRecord) error {
	if ad, ok := d.(backend.AtomicDelivery); ok {
		if p.settle == Retry {
			return ad.RetryWith(ctx, p.next, p.delay, rec)
		}
		return ad.DeadLetterWith(ctx, p.reason, rec)
	}
	if p.settle == Retry {
		return d.Retry(ctx, p.next, p.delay)
	}
	return d.DeadLetter(ctx, p.reason)
}

// runRecord is what the worker knows of a run for the job's record: the backend adds
// the job's identity, state, attempt and reason, and caps output and logs.
func runRecord(job *Job, res Result, took time.Duration) *backend.JobRecord {
	end := time.Now()
	return &backend.JobRecord{
		Output: res.Output, Logs: res.Logs, Module: res.Handler, ModuleVersion: res.Version, ModuleRole: res.Role,
		StartedAt: end.Add(-took), FinishedAt: end, Calls: CallRecords(res.Calls), CallsDropped: res.CallsDropped,
		TraceID: job.TraceID(),
	}
}

// CallRecords turns a result's calls into the records a backend keeps.
func CallRecords(calls []Call) []backend.CallRecord {
	if len(calls) == 0 {
		return nil
	}
	out := make([]backend.CallRecord, len(calls))
	for i, c := range calls {
		out[i] = backend.CallRecord{Method: c.Method, Target: c.Target, Path: c.Path, Status: c.Status, Error: c.Error, Duration: c.Duration, Bytes: c.Bytes}
	}
	return out
}

// childPublications turns a job's children into the envelopes both settle paths
// publish. A child's id derives from the parent's id and round, its index, its queue and its
// payload, never from the attempt: when child k fails, the parent is retried and
// publishes children 1 to k-1 again under the same ids, which a backend that knows ids
// drops (see backend.Backend.Publish); a different child at the same index is a new job.
func (w *Worker) childPublications(job *Job, children []Child) []backend.Publication {
	if len(children) == 0 {
		return nil
	}
	pubs := make([]backend.Publication, len(children))
	for i, c := range children {
		env := backend.NewEnvelope(c.Queue, c.Payload)
		env.ID, env.Headers = backend.ChildID(job.Envelope.ID, job.Envelope.Round, i, c.Queue, c.Payload), c.Headers
		w.traceChild(job, &env)
		pubs[i] = backend.Publication{Envelope: env, Delay: c.Delay}
	}
	return pubs
}

// publishChildren publishes a job's children one by one, each confirmed by the backend:
// the path for backends without an atomic ack.
// Each child's send span ends with its own publish: those published before a failure
// were sent, whatever becomes of the parent.
func (w *Worker) publishChildren(ctx context.Context, job *Job, children []Child) error {
	pubs := w.childPublications(job, children)
	sends := job.sends
	job.sends = nil
	for i, p := range pubs {
		if err := w.b.Publish(ctx, p.Envelope, p.Delay); err != nil {
			err = fmt.Errorf("publishing child job %d of %d to queue %q: %w", i+1, len(children), p.Envelope.Queue, err)
			if i < len(sends) {
				job.sends = sends[i:] // this one and the rest: endSends gives them err
			}
			return err
		}
		if i < len(sends) {
			sends[i].End()
		}
	}
	return nil
}
