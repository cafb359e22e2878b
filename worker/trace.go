package worker

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/internal/telemetry"
)

// SpanContext returns the span context of the job's process span: invalid when the
// worker traces nothing (Config.TracerProvider nil). Logs about the job carry it.
func (j *Job) SpanContext() trace.SpanContext {
	if j.span == nil {
		return trace.SpanContext{}
	}
	return j.span.SpanContext()
}

// TraceID returns the hex trace id of the job's process span, "" when the worker traces
// nothing: what the job's record keeps with the attempt.
func (j *Job) TraceID() string {
	if sc := j.SpanContext(); sc.IsValid() {
		return sc.TraceID().String()
	}
	return ""
}

// startProcess starts the job's process span: a new root linking to the context its
// enqueue left in the job's headers (and to the request that replayed it, if one did),
// or, for a queue with TraceChild, a child of that context. It returns the context the
// handler runs under.
func (w *Worker) startProcess(ctx context.Context, spec Queue, job *Job) context.Context {
	env := job.Envelope
	sent := telemetry.Extract(env.Headers)
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer)}
	if spec.TraceChild && sent.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, sent)
	} else {
		opts = append(opts, trace.WithNewRoot())
		if sent.IsValid() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sent, Attributes: []attribute.KeyValue{telemetry.LinkAttr("enqueue")}}))
		}
	}
	if rp := telemetry.ExtractReplay(env.Headers); rp.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: rp, Attributes: []attribute.KeyValue{telemetry.LinkAttr("replay")}}))
	}
	attrs := append(telemetry.Messaging(telemetry.OpProcess, "process", spec.Name),
		telemetry.MessageID(env.ID),
		telemetry.AttrAttempt.Int(job.Attempt),
		telemetry.AttrRound.Int(job.Round),
	)
	if !env.EnqueuedAt.IsZero() {
		attrs = append(attrs, telemetry.AttrWaitedMs.Int64(time.Since(env.EnqueuedAt).Milliseconds()))
	}
	if n := backend.ReplayGeneration(env.Headers); n > 0 {
		attrs = append(attrs, telemetry.AttrReplays.Int(n))
	}
	opts = append(opts, trace.WithAttributes(attrs...))
	ctx, job.span = w.tracer.Start(ctx, "process "+spec.Name, opts...)
	return ctx
}

// endProcess ends the job's process span with how it was settled.
func endProcess(job *Job, res Result, p plan, settleErr error) {
	if job.span == nil {
		return
	}
	s := job.span
	s.SetAttributes(telemetry.AttrSettle.String(p.settle.String()))
	if p.reason != "" {
		s.SetAttributes(telemetry.AttrReason.String(p.reason))
	}
	switch {
	case res.Outcome == Failed:
		s.SetStatus(codes.Error, orDefault(res.Reason, "failed"))
	case settleErr != nil:
		s.SetStatus(codes.Error, settleErr.Error())
	}
	s.End()
}

// startSettle starts the settle span, a child of the job's process span; nil when the
// job has none.
func (w *Worker) startSettle(job *Job) trace.Span {
	if job.span == nil {
		return nil
	}
	ctx := trace.ContextWithSpan(context.Background(), job.span)
	_, s := w.tracer.Start(ctx, "settle "+job.Envelope.Queue, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(telemetry.MessageID(job.Envelope.ID)))
	return s
}

// endSettle ends a settle span with the settle carried out.
func endSettle(s trace.Span, job *Job, settle Outcome, err error) {
	if s == nil {
		return
	}
	s.SetAttributes(telemetry.Messaging(telemetry.OpSettle, settle.String(), job.Envelope.Queue)...)
	if err != nil {
		s.RecordError(err)
		s.SetStatus(codes.Error, err.Error())
	}
	s.End()
}

// traceChild gives a child's envelope the context of a send span of its own, a child
// of the parent's process span, so that the child's process span links back; the span
// ends with the settle that publishes the child (endSends). With no span it clears
// whatever reserved trace headers the child was given, which nobody but the worker
// may set.
func (w *Worker) traceChild(job *Job, env *backend.Envelope) {
	if job.span == nil {
		for _, k := range [...]string{telemetry.ParentHeader, telemetry.StateHeader, telemetry.ReplayParentHeader} {
			if _, ok := env.Headers[k]; ok {
				env.Headers = telemetry.Inject(context.Background(), env.Headers)
				break
			}
		}
		return
	}
	ctx := trace.ContextWithSpan(context.Background(), job.span)
	ctx, s := w.tracer.Start(ctx, "send "+env.Queue, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(append(telemetry.Messaging(telemetry.OpSend, "send", env.Queue), telemetry.MessageID(env.ID))...))
	env.Headers = telemetry.Inject(ctx, env.Headers)
	job.sends = append(job.sends, s)
}

// endSends ends the job's send spans when its settle is done: without an error when
// settle published the children (an ack or a wait that succeeded), else with err, or
// with the settle that took the children's place (a failure's retry publishes none).
func endSends(job *Job, settle Outcome, err error) {
	for _, s := range job.sends {
		switch {
		case err != nil:
			s.RecordError(err)
			s.SetStatus(codes.Error, err.Error())
		case settle != Ack && settle != Wait:
			s.SetStatus(codes.Error, "not sent: the job settled as "+settle.String())
		}
		s.End()
	}
	job.sends = nil
}
