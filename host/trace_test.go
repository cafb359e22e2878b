package host_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/wasmjobs/wasmjobs/host"
	"github.com/wasmjobs/wasmjobs/internal/outbound/outboundtest"
	"github.com/wasmjobs/wasmjobs/worker"
)

// traced is an engine tracing to a real SDK provider whose ended spans are in exp,
// and that provider's tracer, for the test's own process span.
type traced struct {
	e      *host.Engine
	exp    *tracetest.InMemoryExporter
	tracer trace.Tracer
}

// newTraced returns a traced engine (its outbound HTTP resolving as the HTTP tests'),
// keeping at most eventLimit events a span (0: the SDK's default, as the host's).
func newTraced(t *testing.T, eventLimit int) traced {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	opts := []sdktrace.TracerProviderOption{sdktrace.WithSyncer(exp)}
	if eventLimit > 0 {
		opts = append(opts, sdktrace.WithRawSpanLimits(sdktrace.SpanLimits{EventCountLimit: eventLimit,
			AttributeCountLimit: -1, AttributeValueLengthLimit: -1, LinkCountLimit: -1, AttributePerEventCountLimit: -1, AttributePerLinkCountLimit: -1}))
	}
	tp := sdktrace.NewTracerProvider(opts...)
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	e := newEngineWith(t, host.Config{NoCache: true, TracerProvider: tp, TraceEventLimit: eventLimit, HTTP: host.HTTPOptions{Resolver: testResolver{}}})
	return traced{e: e, exp: exp, tracer: tp.Tracer("test")}
}

// handle runs a job of payload through h under a process span of the test's, the
// worker's stand-in, and returns the result, the run's span and the process span.
func (tr traced) handle(t *testing.T, h *host.Handler, payload string) (worker.Result, tracetest.SpanStub, tracetest.SpanStub) {
	t.Helper()
	tr.exp.Reset()
	ctx, process := tr.tracer.Start(context.Background(), "process q", trace.WithSpanKind(trace.SpanKindConsumer))
	res := h.Handle(ctx, jobOf(h.Module(), payload))
	process.End()
	var run, proc []tracetest.SpanStub
	for _, s := range tr.exp.GetSpans() {
		switch {
		case strings.HasPrefix(s.Name, "run "):
			run = append(run, s)
		case s.Name == "process q":
			proc = append(proc, s)
		}
	}
	if len(run) != 1 || len(proc) != 1 {
		t.Fatalf("spans %v: want one run span and the process span", tr.exp.GetSpans().Snapshots())
	}
	return res, run[0], proc[0]
}

// attrsOf returns a span's (or an event's) attributes by key.
func attrsOf(kvs []attribute.KeyValue) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range kvs {
		m[kv.Key] = kv.Value
	}
	return m
}

// checkRunSpan checks the run span of a job of m: named for it, a child of the process
// span, both naming m's version in role.
func checkRunSpan(t *testing.T, m *host.Module, role string, run, proc tracetest.SpanStub) {
	t.Helper()
	if run.Name != "run "+m.Name() || run.SpanKind != trace.SpanKindInternal || run.Parent.SpanID() != proc.SpanContext.SpanID() {
		t.Errorf("run span %q kind %v parent %v: want run %s, internal, a child of %v", run.Name, run.SpanKind, run.Parent.SpanID(), m.Name(), proc.SpanContext.SpanID())
	}
	for _, s := range []tracetest.SpanStub{run, proc} {
		a := attrsOf(s.Attributes)
		if a["wasmjobs.module"].AsString() != m.Name() || a["wasmjobs.module.version"].AsString() != m.Version() || a["wasmjobs.canary.role"].AsString() != role {
			t.Errorf("%s: attributes %v, want module %s version %s role %s", s.Name, s.Attributes, m.Name(), m.Version(), role)
		}
	}
}

// logEvents returns a span's log events as "severity message", and counts its others.
func logEvents(s tracetest.SpanStub) (lines []string, others int) {
	for _, ev := range s.Events {
		if ev.Name != "log" {
			others++
			continue
		}
		a := attrsOf(ev.Attributes)
		lines = append(lines, a["log.severity"].AsString()+" "+a["log.message"].AsString())
	}
	return lines, others
}

// TestRunSpanAndItsLogEvents: a job's run is a span under the worker's, both naming
// the module version, and the guest's log lines (the log import, stdout, stderr) are
// its events in order.
func TestRunSpanAndItsLogEvents(t *testing.T) {
	t.Parallel()
	tr := newTraced(t, 0)
	m := loadFile(t, tr.e, "abi/log", "")
	res, run, proc := tr.handle(t, host.NewHandler(m, nil), "")
	if res.Outcome != worker.Ack {
		t.Fatalf("outcome %v %s", res.Outcome, res.Reason)
	}
	checkRunSpan(t, m, host.RoleCurrent, run, proc)
	lines, others := logEvents(run)
	want := []string{"debug debug line", "info info line", "warn warn line", "error error line", "error clamped high", "debug clamped low",
		"info out 1", "warn err 1", "info out 2"}
	if strings.Join(lines, "|") != strings.Join(want, "|") || others != 0 {
		t.Errorf("events %q (and %d others), want %q", lines, others, want)
	}
	if _, ok := attrsOf(run.Attributes)["wasmjobs.logs.dropped"]; ok || run.Status.Code != codes.Unset {
		t.Errorf("run span %v status %v: want no drop count, no error", run.Attributes, run.Status)
	}
}

// TestRunSpanCountsTheLogLinesPastItsLimit: a guest logging 200 lines keeps the first
// ones up to the span's event limit, the rest counted in wasmjobs.logs.dropped; a
// failed run's error event takes the place of the oldest line (the SDK's eviction),
// counted too; the manifest's max_log_lines cuts first.
func TestRunSpanCountsTheLogLinesPastItsLimit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, manifest, payload string
		limit, events, dropped  int
		first                   string // the first log event kept
		sdkDropped              int    // the events the SDK evicted itself
	}{
		{"the default limit", "", "", 0, 128, 72, "debug line", 0},
		{"a limit of 50", "", "", 50, 50, 150, "debug line", 0},
		{"a trap past the limit", "", "t", 0, 127, 73, "info line", 1},
		{"max_log_lines first", "max_log_lines = 100", "", 0, 100, 0, "debug line", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tr := newTraced(t, tc.limit)
			m := loadFile(t, tr.e, "abi/log_many", tc.manifest)
			res, run, _ := tr.handle(t, host.NewHandler(m, nil), tc.payload)
			failed := tc.payload == "t"
			if (res.Outcome == worker.Failed) != failed {
				t.Fatalf("outcome %v %s", res.Outcome, res.Reason)
			}
			lines, others := logEvents(run)
			if len(lines) != tc.events || lines[0] != tc.first {
				t.Errorf("%d log events, first %q: want %d, from %q", len(lines), lines[:min(4, len(lines))], tc.events, tc.first)
			}
			d, ok := attrsOf(run.Attributes)["wasmjobs.logs.dropped"]
			if int(d.AsInt64()) != tc.dropped || ok != (tc.dropped > 0) {
				t.Errorf("wasmjobs.logs.dropped %v (set %v), want %d", d.Emit(), ok, tc.dropped)
			}
			if failed && (others != 1 || run.Status.Code != codes.Error) {
				t.Errorf("%d other events, status %v: want the error's event and status", others, run.Status)
			}
			if run.DroppedEvents != tc.sdkDropped {
				t.Errorf("the SDK dropped %d events, want %d: the host stops at the limit itself", run.DroppedEvents, tc.sdkDropped)
			}
		})
	}
}

// TestRunSpanOfAFailedRun: a trap, a timeout and exhausted memory are the run span's
// error: its status, its exception event and its error.type.
func TestRunSpanOfAFailedRun(t *testing.T) {
	t.Parallel()
	tr := newTraced(t, 0)
	for _, tc := range []struct {
		module, manifest, cause, reason string
	}{
		{"hostile/trap", "", "trap", "trap: unreachable"},
		{"hostile/loop", `timeout = "50ms"`, "timeout", "timeout after 50ms"},
		{"hostile/membomb", `memory = "2MiB"`, "trap", "trap: unreachable"},
		{"abi/ack", "", "", ""},
	} {
		t.Run(tc.module, func(t *testing.T) {
			m := loadFile(t, tr.e, tc.module, tc.manifest)
			res, run, proc := tr.handle(t, host.NewHandler(m, nil), "")
			checkRunSpan(t, m, host.RoleCurrent, run, proc)
			if tc.cause == "" {
				if res.Outcome != worker.Ack || run.Status.Code != codes.Unset || len(run.Events) != 0 {
					t.Errorf("outcome %v, span status %v events %v: want an ack, no error", res.Outcome, run.Status, run.Events)
				}
				return
			}
			if res.Outcome != worker.Failed || !strings.HasPrefix(res.Reason, tc.reason) {
				t.Fatalf("outcome %v %q, want failed %q", res.Outcome, res.Reason, tc.reason)
			}
			a := attrsOf(run.Attributes)
			if run.Status.Code != codes.Error || run.Status.Description != res.Reason || a["error.type"].AsString() != tc.cause {
				t.Errorf("status %v error.type %v: want an error %q of %s", run.Status, a["error.type"].Emit(), res.Reason, tc.cause)
			}
			if len(run.Events) != 1 || run.Events[0].Name != "exception" || attrsOf(run.Events[0].Attributes)["exception.message"].AsString() != res.Reason {
				t.Errorf("events %v: want the exception", run.Events)
			}
		})
	}
}

// TestRunSpanOfACanary: a job the canary takes names the canary's version and role.
func TestRunSpanOfACanary(t *testing.T) {
	t.Parallel()
	tr := newTraced(t, 0)
	cur := loadModule(t, tr.e, "svc", variant(t, "abi/ack", "v1"), host.Manifest{})
	next := loadModule(t, tr.e, "svc", variant(t, "abi/ack", "v2"), host.Manifest{})
	h := host.NewHandler(cur, nil)
	host.StartCanary(h, next, host.Rollout{CanaryPercent: 100, CanaryJobs: 1000, CanaryMinJobs: 1000}, func(host.Verdict) {})
	res, run, proc := tr.handle(t, h, "")
	if res.Outcome != worker.Ack || res.Role != host.RoleCanary {
		t.Fatalf("outcome %v role %q, want an ack on the canary", res.Outcome, res.Role)
	}
	checkRunSpan(t, next, host.RoleCanary, run, proc)
}

// checkClientSpan checks a guest's GET of path on srv: one Client span, a child of
// the run span, its URL without the query, and the server reached with that span's
// traceparent alone, none of the guest's trace headers.
func checkClientSpan(t *testing.T, tr traced, srv *outboundtest.Server, run tracetest.SpanStub, path string) {
	t.Helper()
	var clients []tracetest.SpanStub
	for _, s := range tr.exp.GetSpans() {
		if s.SpanKind == trace.SpanKindClient {
			clients = append(clients, s)
		}
	}
	if len(clients) != 1 {
		t.Fatalf("%d client spans, want 1", len(clients))
	}
	c := clients[0]
	a := attrsOf(c.Attributes)
	if c.Name != "GET" || c.Parent.SpanID() != run.SpanContext.SpanID() || a["url.full"].AsString() != "http://localhost:"+srv.Port+path ||
		a["http.response.status_code"].AsInt64() != 200 || a["server.address"].AsString() != "localhost" {
		t.Errorf("client span %s parent %v attributes %v: want GET, a child of the run %v, url.full without the query", c.Name, c.Parent.SpanID(), c.Attributes, run.SpanContext.SpanID())
	}
	want := fmt.Sprintf("00-%s-%s-01", c.SpanContext.TraceID(), c.SpanContext.SpanID())
	if h := srv.Last(); h == nil || len(h.Values("Traceparent")) != 1 || h.Get("Traceparent") != want || len(h.Values("Tracestate")) != 0 {
		t.Errorf("the server saw %v, want traceparent %s alone", h, want)
	}
}

// TestRunSpanOfOutboundHTTP: a guest's request is a Client span under its run, and the
// request carries that span's traceparent in place of the one the guest set.
func TestRunSpanOfOutboundHTTP(t *testing.T) {
	t.Parallel()
	srv := outboundtest.NewServer(t, false, func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })
	tr := newTraced(t, 0)
	m := loadFile(t, tr.e, "abi/http_traceparent", fmt.Sprintf("[http]\nallow = [\"http://localhost:%s\"]\n", srv.Port))
	res, rs, _ := tr.handle(t, host.NewHandler(m, nil), "http://localhost:"+srv.Port+"/x?token=secret")
	if res.Outcome != worker.Ack || string(res.Output) != "\xc8\x00\x00\x00" {
		t.Fatalf("outcome %v %s output %q: want an ack with status 200", res.Outcome, res.Reason, res.Output)
	}
	checkClientSpan(t, tr, srv, rs, "/x")

	// Tracing off: the guest's own headers go as it set them.
	off := loadFile(t, httpEngine(t, nil), "abi/http_traceparent", fmt.Sprintf("[http]\nallow = [\"http://localhost:%s\"]\n", srv.Port))
	if x := run(off, "http://localhost:"+srv.Port+"/"); x.Outcome != worker.Ack {
		t.Fatalf("outcome %v %s", x.Outcome, x.Reason)
	}
	if h := srv.Last(); h.Get("Traceparent") != "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" || h.Get("Tracestate") != "guest=1" {
		t.Errorf("with tracing off the server saw %v, want the guest's headers", h)
	}
}

// TestRunSpanOfAJSHandler: a JS handler's run is the same span: its log lines are
// events, its fetch a Client span under it, a throw its error.
func TestRunSpanOfAJSHandler(t *testing.T) {
	t.Parallel()
	srv := outboundtest.NewServer(t, false, func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })
	tr := newTraced(t, 0)
	m := loadJS(t, tr.e, `var __wasmjobs_handler = { default: async function (job) {
  job.log.info("hello", 1);
  job.log.warn("careful");
  const r = await fetch("http://localhost:`+srv.Port+`/js?token=secret", { headers: { traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" } });
  await r.text();
  if (job.text === "throw") throw new Error("boom");
} };`, fmt.Sprintf("timeout = \"10s\"\n[http]\nallow = [\"http://localhost:%s\"]\n", srv.Port))
	h := host.NewHandler(m, nil)
	res, run, proc := tr.handle(t, h, "")
	if res.Outcome != worker.Ack {
		t.Fatalf("outcome %v %s", res.Outcome, res.Reason)
	}
	checkRunSpan(t, m, host.RoleCurrent, run, proc)
	if lines, others := logEvents(run); strings.Join(lines, "|") != "info hello 1|warn careful" || others != 0 {
		t.Errorf("events %q and %d others", lines, others)
	}
	checkClientSpan(t, tr, srv, run, "/js")

	res, run, _ = tr.handle(t, h, "throw")
	if res.Outcome != worker.Failed || run.Status.Code != codes.Error || run.Status.Description != res.Reason || !strings.Contains(res.Reason, "boom") {
		t.Errorf("outcome %v %q, span status %v: want the throw as the span's error", res.Outcome, res.Reason, run.Status)
	}
}
