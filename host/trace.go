package host

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/wasmjobs/wasmjobs/internal/telemetry"
	"github.com/wasmjobs/wasmjobs/worker"
)

// The event of a guest's log line on its run's span: its name and attributes.
const (
	logEvent    = "log"
	logSeverity = attribute.Key("log.severity")
	logMessage  = attribute.Key("log.message")
)

// startRun names the module version that runs the job, in role, on ctx's span (the
// worker's process span) and starts the run's span under it, with the same
// attributes: ctx returned holds it, for the host functions to see. Called only with
// tracing on.
func (m *Module) startRun(ctx context.Context, role string) (context.Context, trace.Span) {
	attrs := []attribute.KeyValue{telemetry.AttrModule.String(m.name), telemetry.AttrVersion.String(m.version), telemetry.AttrCanaryRole.String(role)}
	trace.SpanFromContext(ctx).SetAttributes(attrs...)
	return m.e.tracer.Start(ctx, "run "+m.name, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
}

// endRun ends a run's span, if it has one: a failed run (a trap, a timeout, memory
// exhausted, ...) is its error, and the log lines past the span's event limit are
// counted in wasmjobs.logs.dropped (st is the run's call state; nil when the run
// never reached an instance).
func endRun(span trace.Span, x *Execution, st *callState) {
	if span == nil {
		return
	}
	dropped := 0
	if st != nil {
		dropped = st.eventsDropped
	}
	if x.Outcome == worker.Failed {
		span.SetAttributes(semconv.ErrorTypeKey.String(string(x.Cause)))
		span.RecordError(&failure{x.Cause, x.Reason})
		span.SetStatus(codes.Error, x.Reason)
		if st != nil && st.events >= st.eventLimit {
			dropped++ // the error's event pushed the span's oldest out
		}
	}
	if dropped > 0 {
		span.SetAttributes(telemetry.AttrLogsDropped.Int(dropped))
	}
	span.End()
}

// traceRun makes the call's log lines events of span, at most limit of them.
func (st *callState) traceRun(span trace.Span, limit int) {
	st.span, st.eventLimit = span, limit
}

// event adds a log line to the run's span, or counts it past the span's limit: the
// SDK would drop the span's oldest events instead, and the count would be lost.
func (st *callState) event(level slog.Level, msg string) {
	if st.events >= st.eventLimit {
		st.eventsDropped++
		return
	}
	st.events++
	st.span.AddEvent(logEvent, trace.WithAttributes(logSeverity.String(severity(level)), logMessage.String(msg)))
}

// severity names a log line's level as its event says it.
func severity(l slog.Level) string {
	switch {
	case l < slog.LevelInfo:
		return "debug"
	case l < slog.LevelWarn:
		return "info"
	case l < slog.LevelError:
		return "warn"
	}
	return "error"
}
