package inspect

import (
	"context"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/internal/telemetry"
)

// startSend starts the send span of an enqueue, a child of the caller's span in ctx,
// and gives every envelope its context: one span for one request, whatever its count
// of jobs (messaging.batch.message_count when more than one). It returns the span to
// end, nil when tracing is off.
func (in *Inspector) startSend(ctx context.Context, envs ...*backend.Envelope) trace.Span {
	if in.tracer == nil || len(envs) == 0 {
		return nil
	}
	queue := envs[0].Queue
	for _, e := range envs[1:] {
		if e.Queue != queue {
			queue = ""
			break
		}
	}
	name := "send"
	if queue != "" {
		name += " " + queue
	}
	attrs := telemetry.Messaging(telemetry.OpSend, "send", queue)
	if queue == "" {
		attrs = attrs[:len(attrs)-1] // no one destination
	}
	if len(envs) == 1 {
		attrs = append(attrs, telemetry.MessageID(envs[0].ID))
	} else {
		attrs = append(attrs, telemetry.BatchCount(len(envs)))
	}
	ctx, span := in.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
	for _, e := range envs {
		e.Headers = telemetry.Inject(ctx, e.Headers)
	}
	return span
}

// endSpan ends a span (nil: none) with err as its error, if any.
func endSpan(span trace.Span, err error) {
	if span == nil {
		return
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// replayContext carries the replaying request's span to the backend, which keeps it in
// the replayed job's headers (telemetry.ReplayParentHeader) so that its next process
// span links to the request as well as to the original enqueue. Untraced (no tracer,
// or a request without a span) it removes the header, so that the replayed job's span
// does not link to an earlier replayer.
func (in *Inspector) replayContext(ctx context.Context) context.Context {
	if in.tracer == nil {
		ctx = trace.ContextWithSpanContext(ctx, trace.SpanContext{})
	}
	return backend.WithReplayHeaders(ctx, telemetry.InjectReplay(ctx))
}
