// Package telemetry owns wasmjobs' tracing: the OpenTelemetry tracer provider that
// `wasmjobs run` builds from the standard OTEL_* environment, the spans' names and
// attributes (the messaging conventions, plus wasmjobs.* ones), and how a job's trace
// context crosses the queue in its reserved headers.
//
// Nothing here is global: the provider is a value handed to the packages that make
// spans, and a nil trace.Tracer anywhere means tracing is off and no span is made.
package telemetry

import (
	"context"
	"maps"
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
)

// The reserved headers in which a job keeps the trace context of its enqueue. Clients
// cannot set them (every header beginning "wasmjobs-" is reserved) and a handler's
// children get them from the host, whatever the guest asked for. They survive
// retries, defers, replays and restarts with the job's other headers.
const (
	// ParentHeader holds the W3C traceparent of the job's send span.
	ParentHeader = "wasmjobs-traceparent"
	// StateHeader holds the W3C tracestate that came with it, when there was one.
	StateHeader = "wasmjobs-tracestate"
	// ReplayParentHeader holds the traceparent of the request that replayed the job
	// from its dead letters, the latest one; the process span links to it too.
	ReplayParentHeader = "wasmjobs-replay-traceparent"
)

// ScopeName is the instrumentation scope of every wasmjobs span.
const ScopeName = "github.com/wasmjobs/wasmjobs"

// System is the value of messaging.system on every wasmjobs span.
const System = "wasmjobs"

// The messaging operation types of wasmjobs' spans.
const (
	OpSend    = "send"
	OpProcess = "process"
	OpSettle  = "settle"
)

// The wasmjobs.* attribute keys.
const (
	AttrAttempt     = attribute.Key("wasmjobs.attempt")
	AttrRound       = attribute.Key("wasmjobs.round")
	AttrModule      = attribute.Key("wasmjobs.module")
	AttrVersion     = attribute.Key("wasmjobs.module.version")
	AttrCanaryRole  = attribute.Key("wasmjobs.canary.role")
	AttrSettle      = attribute.Key("wasmjobs.settle")
	AttrReason      = attribute.Key("wasmjobs.reason")
	AttrWaitedMs    = attribute.Key("wasmjobs.waited_ms")
	AttrReplays     = attribute.Key("wasmjobs.replays")
	AttrLogsDropped = attribute.Key("wasmjobs.logs.dropped")
	AttrLinkKind    = attribute.Key("wasmjobs.link")
)

// Tracer returns tp's wasmjobs tracer, or nil when tp is nil: the nil every span maker
// here takes for "tracing is off".
func Tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		return nil
	}
	return tp.Tracer(ScopeName)
}

// Messaging returns the messaging attributes of an operation on queue (op one of
// OpSend, OpProcess, OpSettle; name the operation's own name, such as "ack").
func Messaging(op, name, queue string) []attribute.KeyValue {
	return []attribute.KeyValue{
		semconv.MessagingSystemKey.String(System),
		semconv.MessagingOperationTypeKey.String(op),
		semconv.MessagingOperationName(name),
		semconv.MessagingDestinationName(queue),
	}
}

// MessageID is the messaging.message.id attribute of a job.
func MessageID(id string) attribute.KeyValue { return semconv.MessagingMessageID(id) }

// BatchCount is the messaging.batch.message_count attribute.
func BatchCount(n int) attribute.KeyValue { return semconv.MessagingBatchMessageCount(n) }

var w3c = propagation.TraceContext{}

// Inject returns a copy of h for a job about to be sent: the reserved trace headers
// set from ctx's span, or removed when ctx holds no valid span context, and
// ReplayParentHeader removed, since a job just sent was replayed by nobody (whatever
// a handler staged for its child). h itself, which may be shared (a handler's staged
// headers, a schedule's), is not changed.
func Inject(ctx context.Context, h map[string]string) map[string]string {
	out := make(map[string]string, len(h)+2)
	maps.Copy(out, h)
	delete(out, ParentHeader)
	delete(out, StateHeader)
	delete(out, ReplayParentHeader)
	if trace.SpanContextFromContext(ctx).IsValid() {
		w3c.Inject(ctx, headerCarrier{out, ParentHeader, StateHeader})
	}
	return out
}

// Extract returns the span context a job's reserved headers hold (remote), invalid
// when they hold none or one that does not parse.
func Extract(h map[string]string) trace.SpanContext {
	return extract(h, ParentHeader, StateHeader)
}

// ExtractReplay returns the span context of the request that last replayed the job.
func ExtractReplay(h map[string]string) trace.SpanContext {
	return extract(h, ReplayParentHeader, "")
}

// InjectReplay returns the header that carries ctx's span as the replaying request's:
// ReplayParentHeader set to it, or to "" when ctx holds none, which a replay takes
// for "remove" (backend.WithReplayHeaders), so that a job replayed by an untraced
// request does not keep linking to an earlier replayer.
func InjectReplay(ctx context.Context) map[string]string {
	h := map[string]string{ReplayParentHeader: ""}
	if trace.SpanContextFromContext(ctx).IsValid() {
		w3c.Inject(ctx, headerCarrier{h, ReplayParentHeader, ""})
	}
	return h
}

func extract(h map[string]string, parent, state string) trace.SpanContext {
	if h[parent] == "" {
		return trace.SpanContext{}
	}
	ctx := w3c.Extract(context.Background(), headerCarrier{h, parent, state})
	return trace.SpanContextFromContext(ctx)
}

// headerCarrier maps the W3C fields onto reserved job headers.
type headerCarrier struct {
	h             map[string]string
	parent, state string
}

func (c headerCarrier) key(k string) string {
	switch strings.ToLower(k) {
	case "traceparent":
		return c.parent
	case "tracestate":
		return c.state
	}
	return ""
}

func (c headerCarrier) Get(k string) string {
	if k = c.key(k); k == "" {
		return ""
	}
	return c.h[k]
}

func (c headerCarrier) Set(k, v string) {
	if k = c.key(k); k != "" && v != "" {
		c.h[k] = v
	}
}

func (c headerCarrier) Keys() []string { return []string{"traceparent", "tracestate"} }

// FromHTTP returns ctx with the remote span context of a request's W3C traceparent and
// tracestate, as the API and the CLI's TRACEPARENT take them; ctx unchanged when there
// is none or it does not parse.
func FromHTTP(ctx context.Context, h http.Header) context.Context {
	return w3c.Extract(ctx, propagation.HeaderCarrier(h))
}
