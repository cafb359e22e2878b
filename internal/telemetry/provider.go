package telemetry

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
)

// Config configures the provider New builds. The OTEL_* environment does the rest, as
// the SDK and its exporters read it.
type Config struct {
	// Endpoint is the collector's base URL (`--otlp`), as OTEL_EXPORTER_OTLP_ENDPOINT
	// takes it: for OTLP/HTTP the path /v1/traces is appended. Empty means the
	// environment's OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT;
	// with none of the three, tracing is off.
	Endpoint string
	// Version is the service.version of the resource.
	Version string
	// Logger is told once when spans start being dropped; nil discards it.
	Logger *slog.Logger
	// Getenv reads the environment; nil means os.Getenv. Tests pass their own.
	Getenv func(string) string
}

// DefaultMaxQueueSize is the spans waiting for export, past which new ones are
// dropped (and counted), when OTEL_BSP_MAX_QUEUE_SIZE does not say.
const DefaultMaxQueueSize = sdktrace.DefaultMaxQueueSize

// DefaultEventLimit is how many events (a guest's log lines) a span keeps when
// OTEL_SPAN_EVENT_COUNT_LIMIT does not say; the rest are counted in
// wasmjobs.logs.dropped.
const DefaultEventLimit = sdktrace.DefaultEventCountLimit

// ErrProtocol is an OTEL_EXPORTER_OTLP_PROTOCOL (or _TRACES_PROTOCOL) or
// OTEL_TRACES_EXPORTER that wasmjobs cannot honour.
var ErrProtocol = errors.New("telemetry: unsupported exporter setting")

// Provider is the tracer provider of `wasmjobs run`: the SDK's, batching spans to one
// OTLP exporter, with its queue bounded and its drops counted.
type Provider struct {
	embedded.TracerProvider
	sdk      *sdktrace.TracerProvider
	dropped  atomic.Uint64
	inFlight atomic.Int64 // spans handed to the batch processor and not yet exported
	// shutMu orders the last exports' accounting against Shutdown's, which counts
	// every span still in flight as dropped: an export that ends later (the
	// shutdown ran out of time first) changes no count, else its spans would count
	// twice.
	shutMu   sync.Mutex
	shut     bool
	maxQueue int64
	log      *slog.Logger
	warned   sync.Once
	// Protocol is the exporter's: grpc, http/protobuf or http/json.
	Protocol string
	// EventLimit is the span's event limit in force (DefaultEventLimit unless the
	// environment says otherwise).
	EventLimit int
}

// New builds the provider from cfg and the environment, or returns nil (and no error)
// when no endpoint is set or OTEL_TRACES_EXPORTER is "none": tracing is then off.
func New(ctx context.Context, cfg Config) (*Provider, error) {
	getenv := cfg.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	switch e := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); e {
	case "", "otlp":
	case "none":
		return nil, nil
	default:
		return nil, fmt.Errorf("%w: OTEL_TRACES_EXPORTER=%q: wasmjobs exports traces over OTLP only (otlp or none)", ErrProtocol, e)
	}
	endpoint := cfg.Endpoint
	if endpoint == "" && getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" && getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" {
		return nil, nil
	}
	// The resource first: an error there leaves no exporter to shut down.
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName("wasmjobs"), semconv.ServiceVersion(cmp.Or(cfg.Version, "dev"))),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES, last so they win
	)
	if err != nil {
		// The SDK would go on with what it could parse; a setting that is silently
		// half-applied is worse than a host that says which one is wrong.
		return nil, fmt.Errorf("telemetry: the resource from OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES (key=value pairs separated by commas, values percent-encoded): %w", err)
	}
	proto := cmp.Or(strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")), strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_PROTOCOL")), "http/protobuf")
	var exp sdktrace.SpanExporter
	switch proto {
	case "grpc":
		var opts []otlptracegrpc.Option
		if endpoint != "" {
			if _, perr := url.Parse(endpoint); perr != nil {
				return nil, fmt.Errorf("telemetry: --otlp %q: %w", endpoint, perr)
			}
			opts = append(opts, otlptracegrpc.WithEndpointURL(endpoint))
		}
		exp, err = otlptracegrpc.New(ctx, opts...)
	case "http/protobuf", "http/json":
		// otlptracehttp reads the protocol variable itself to choose between the two.
		var opts []otlptracehttp.Option
		if endpoint != "" {
			u, perr := url.Parse(endpoint)
			if perr != nil || u.Scheme == "" || u.Host == "" {
				return nil, fmt.Errorf("telemetry: --otlp %q: want a URL such as http://127.0.0.1:4318", endpoint)
			}
			u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/traces"
			opts = append(opts, otlptracehttp.WithEndpointURL(u.String()))
		}
		exp, err = otlptracehttp.New(ctx, opts...)
	default:
		return nil, fmt.Errorf("%w: OTEL_EXPORTER_OTLP_PROTOCOL=%q: want grpc, http/protobuf or http/json", ErrProtocol, proto)
	}
	if err != nil {
		return nil, fmt.Errorf("telemetry: the OTLP exporter: %w", err)
	}
	p := &Provider{Protocol: proto, log: cfg.Logger, maxQueue: int64(envInt(getenv, "OTEL_BSP_MAX_QUEUE_SIZE", DefaultMaxQueueSize)),
		EventLimit: envInt(getenv, "OTEL_SPAN_EVENT_COUNT_LIMIT", DefaultEventLimit)}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	// The queue's bound is passed, not left to the SDK's own read of the variable, so
	// that the drops counted here are the bound the batch processor has.
	bsp := sdktrace.NewBatchSpanProcessor(&countingExporter{SpanExporter: exp, p: p}, sdktrace.WithMaxQueueSize(int(p.maxQueue)),
		sdktrace.WithMaxExportBatchSize(min(int(p.maxQueue), envInt(getenv, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", sdktrace.DefaultMaxExportBatchSize))))
	p.sdk = sdktrace.NewTracerProvider(
		sdktrace.WithResource(res),
		sdktrace.WithSpanProcessor(&boundedProcessor{SpanProcessor: bsp, p: p}),
	)
	return p, nil
}

// envInt reads a positive integer variable, def when unset or not one.
func envInt(getenv func(string) string, name string, def int) int {
	if n, err := strconv.Atoi(strings.TrimSpace(getenv(name))); err == nil && n > 0 {
		return n
	}
	return def
}

// Tracer returns a tracer of the provider.
func (p *Provider) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	return p.sdk.Tracer(name, opts...)
}

// DroppedSpans counts the spans dropped: past the bounded queue (a collector down or
// slow), in an export that failed, or left at a shutdown that ran out of time.
func (p *Provider) DroppedSpans() uint64 { return p.dropped.Load() }

func (p *Provider) drop(n int, why string) {
	if n <= 0 {
		return
	}
	p.dropped.Add(uint64(n))
	p.warned.Do(func() {
		p.log.Warn("tracing: spans are being dropped; counted in wasmjobs_trace_spans_dropped_total, logged once", "why", why, "spans", n)
	})
}

// Shutdown flushes what is queued and stops the exporter, within ctx: the spans it
// could not send by then are dropped and counted, even those an export still under way
// delivers later. A span that ends after Shutdown (a job abandoned at the drain
// deadline, whose run ends afterwards) is not exported, and not counted either: the
// SDK's provider, shut down, hands it to no processor.
func (p *Provider) Shutdown(ctx context.Context) error {
	err := p.sdk.Shutdown(ctx)
	p.shutMu.Lock()
	p.shut = true
	left := p.inFlight.Swap(0)
	p.shutMu.Unlock()
	if left > 0 {
		p.drop(int(left), "the shutdown ran out of time")
	}
	return err
}

// boundedProcessor hands the batch processor at most maxQueue spans not yet exported,
// so that its own queue never overflows: a span past the bound is dropped here and
// counted, never blocking the job that ended it.
type boundedProcessor struct {
	sdktrace.SpanProcessor
	p *Provider
}

func (b *boundedProcessor) OnEnd(s sdktrace.ReadOnlySpan) {
	if !s.SpanContext().IsSampled() {
		return // the batch processor exports sampled spans only
	}
	if b.p.inFlight.Add(1) > b.p.maxQueue {
		b.p.inFlight.Add(-1)
		b.p.drop(1, "the export queue is full: the collector is down or slow")
		return
	}
	b.SpanProcessor.OnEnd(s)
}

// countingExporter counts the spans of failed exports as dropped.
type countingExporter struct {
	sdktrace.SpanExporter
	p *Provider
}

func (c *countingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := c.SpanExporter.ExportSpans(ctx, spans)
	c.p.shutMu.Lock()
	late := c.p.shut // Shutdown counted these spans already
	if !late {
		c.p.inFlight.Add(-int64(len(spans)))
	}
	c.p.shutMu.Unlock()
	if err != nil && !late {
		c.p.drop(len(spans), "an export failed: "+err.Error())
	}
	return err
}

// TraceURL expands a trace UI's URL template (`--trace-url`) for a trace id: every
// {trace_id} is replaced. An empty template gives "".
func TraceURL(template, traceID string) string {
	if template == "" || traceID == "" {
		return ""
	}
	return strings.ReplaceAll(template, "{trace_id}", url.PathEscape(traceID))
}

// SpanIDs returns the hex trace and span ids of ctx's span, "" when it has none.
func SpanIDs(ctx context.Context) (traceID, spanID string) {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return "", ""
	}
	return sc.TraceID().String(), sc.SpanID().String()
}

// LinkAttr marks a link with what it links to ("enqueue", "replay", "child").
func LinkAttr(kind string) attribute.KeyValue { return AttrLinkKind.String(kind) }
