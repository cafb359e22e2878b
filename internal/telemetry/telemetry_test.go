package telemetry_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/wasmjobs/wasmjobs/internal/telemetry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestNewIsOffWithoutAnEndpoint(t *testing.T) {
	t.Parallel()
	for name, vars := range map[string]map[string]string{
		"nothing set":   {},
		"exporter none": {"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"},
	} {
		tp, err := telemetry.New(context.Background(), telemetry.Config{Getenv: env(vars)})
		if err != nil || tp != nil {
			t.Errorf("%s: New = %v, %v; want nil, nil (tracing off)", name, tp, err)
		}
	}
}

func TestNewRefusesWhatItCannotHonour(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		cfg  telemetry.Config
		want error
	}{
		"zipkin exporter": {telemetry.Config{Endpoint: "http://127.0.0.1:4318", Getenv: env(map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"})}, telemetry.ErrProtocol},
		"thrift protocol": {telemetry.Config{Endpoint: "http://127.0.0.1:4318", Getenv: env(map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "thrift"})}, telemetry.ErrProtocol},
		"no scheme":       {telemetry.Config{Endpoint: "127.0.0.1:4318", Getenv: env(nil)}, nil},
	} {
		tp, err := telemetry.New(context.Background(), c.cfg)
		if err == nil || tp != nil || (c.want != nil && !errors.Is(err, c.want)) {
			t.Errorf("%s: New = %v, %v; want an error (%v)", name, tp, err, c.want)
		}
	}
}

// A malformed OTEL_RESOURCE_ATTRIBUTES stops the host with an error naming it, rather
// than leaving the resource half-read. Not parallel: it sets the process environment,
// which the SDK reads.
func TestNewRefusesAMalformedResource(t *testing.T) {
	for _, v := range []string{"region", "region=eu,team"} {
		t.Setenv("OTEL_RESOURCE_ATTRIBUTES", v)
		tp, err := telemetry.New(context.Background(), telemetry.Config{Endpoint: "http://127.0.0.1:4318", Getenv: env(nil)})
		if err == nil || tp != nil || !strings.Contains(err.Error(), "OTEL_RESOURCE_ATTRIBUTES") {
			t.Errorf("OTEL_RESOURCE_ATTRIBUTES=%q: New = %v, %v; want an error naming the variable", v, tp, err)
		}
	}
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "region=eu,team=jobs")
	tp, err := telemetry.New(context.Background(), telemetry.Config{Endpoint: "http://127.0.0.1:4318", Getenv: env(nil)})
	if err != nil || tp == nil {
		t.Fatalf("a well-formed OTEL_RESOURCE_ATTRIBUTES: New = %v, %v", tp, err)
	}
	tp.Shutdown(context.Background())
}

// A collector that hangs never blocks a span's end: past the bounded queue spans are
// dropped and counted, and Shutdown returns by its deadline.
func TestHangingCollectorDropsAndCounts(t *testing.T) {
	t.Parallel()
	hang := make(chan struct{})
	refused := make(chan struct{}, 100)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
			// Refused, late: an export still under way when the shutdown gave up.
			http.Error(w, "refused", http.StatusBadRequest)
			refused <- struct{}{}
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	closeHang := sync.OnceFunc(func() { close(hang) })
	defer closeHang()
	tp, err := telemetry.New(context.Background(), telemetry.Config{Endpoint: srv.URL, Getenv: env(map[string]string{
		"OTEL_BSP_MAX_QUEUE_SIZE": "10", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "5", "OTEL_BSP_SCHEDULE_DELAY": "10"})})
	if err != nil || tp == nil {
		t.Fatalf("New: %v, %v", tp, err)
	}
	tr := tp.Tracer("test")
	start := time.Now()
	for range 200 {
		_, s := tr.Start(context.Background(), "s")
		s.End()
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("ending 200 spans took %v against a hanging collector: the export blocked them", took)
	}
	if n := tp.DroppedSpans(); n < 180 {
		t.Errorf("DroppedSpans = %d, want at least 180 of 200 past a queue of 10", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start = time.Now()
	tp.Shutdown(ctx)
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Shutdown took %v, past its 300 ms deadline", took)
	}
	if n := tp.DroppedSpans(); n != 200 {
		t.Errorf("after the shutdown, DroppedSpans = %d, want all 200: none was exported", n)
	}
	// The export the shutdown left hanging fails now: its spans were counted already.
	closeHang()
	<-refused
	time.Sleep(100 * time.Millisecond) // for the exporter to count, if it would
	if n := tp.DroppedSpans(); n != 200 {
		t.Errorf("after the late export failed, DroppedSpans = %d, want still 200: its spans counted twice", n)
	}
}

// A collector that is down: each failed export counts its spans as dropped.
func TestDownCollectorCountsFailedExports(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nobody listens there now
	tp, err := telemetry.New(context.Background(), telemetry.Config{Endpoint: "http://" + addr, Getenv: env(map[string]string{
		"OTEL_EXPORTER_OTLP_TIMEOUT": "200", "OTEL_BSP_SCHEDULE_DELAY": "10"})})
	if err != nil {
		t.Fatal(err)
	}
	_, s := tp.Tracer("test").Start(context.Background(), "s")
	s.End()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	tp.Shutdown(ctx)
	if n := tp.DroppedSpans(); n != 1 {
		t.Errorf("DroppedSpans = %d, want 1", n)
	}
}

func TestHeadersRoundTrip(t *testing.T) {
	t.Parallel()
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2}, SpanID: trace.SpanID{3}, TraceFlags: trace.FlagsSampled})
	ts, _ := trace.ParseTraceState("k=v")
	sc = sc.WithTraceState(ts)
	h := telemetry.Inject(trace.ContextWithSpanContext(context.Background(), sc), map[string]string{"x": "1"})
	got := telemetry.Extract(h)
	if got.TraceID() != sc.TraceID() || got.SpanID() != sc.SpanID() || !got.IsRemote() || got.TraceState().String() != "k=v" || h["x"] != "1" {
		t.Fatalf("Extract(Inject) = %v (headers %v), want %v remote with its tracestate", got, h, sc)
	}
	if h := telemetry.Inject(context.Background(), h); len(h) != 1 {
		t.Fatalf("Inject without a span left %v, want only the other header", h)
	}
	if telemetry.Extract(map[string]string{telemetry.ParentHeader: "garbage"}).IsValid() {
		t.Fatal("a traceparent that does not parse gave a span context")
	}
	if u := telemetry.TraceURL("https://ui/trace/{trace_id}?x={trace_id}", "ab"); u != "https://ui/trace/ab?x=ab" {
		t.Fatalf("TraceURL = %q", u)
	}
}
