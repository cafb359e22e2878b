package outbound_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/wasmjobs/wasmjobs/internal/outbound"
	"github.com/wasmjobs/wasmjobs/internal/outbound/outboundtest"
)

// tracing returns a tracer of a real SDK provider whose spans, once ended, are in the
// exporter it returns.
func tracing(t *testing.T) (trace.Tracer, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	return tp.Tracer("test"), exp
}

// attrs returns a span's attributes by key.
func attrs(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

const guestParent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

// TestRequestSpans: with a tracer, each request is a Client span named by its method,
// a child of the context's span, its URL without user, query or fragment, its status
// and failure recorded and no header value; every hop of a redirect carries the
// span's traceparent, and the guest's own traceparent and tracestate reach no server.
// Without one, the guest's headers go as they were.
func TestRequestSpans(t *testing.T) {
	t.Parallel()
	srv := outboundtest.NewServer(t, false, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/hop":
			http.Redirect(w, r, "/landed?next=1", http.StatusFound)
		case "/missing":
			http.NotFound(w, r)
		default:
			w.Write([]byte("ok"))
		}
	})
	refused := outboundtest.RefusedPort(t)
	grant := "[http]\nallow = [\"http://localhost:P\", \"http://localhost:R\"]\n"
	guestHeader := http.Header{"Traceparent": {guestParent}, "Tracestate": {"guest=1"}, "Authorization": {"Bearer s3cret"}}

	tracer, exp := tracing(t)
	s := session(t, grant, outbound.Options{Tracer: tracer}, "P", srv.Port, "R", refused)
	ctx, parent := tracer.Start(context.Background(), "run m")
	resp, body, err := doCtx(t, ctx, s, "GET", "http://localhost:"+srv.Port+"/hop?token=secret#frag", guestHeader)
	if err != nil || resp.StatusCode != 200 || body != "ok" {
		t.Fatalf("status %v body %q err %v", resp, body, err)
	}
	if _, _, err := doCtx(t, ctx, s, "POST", "http://localhost:"+srv.Port+"/missing", nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := doCtx(t, ctx, s, "GET", "http://localhost:"+refused+"/", nil); err == nil {
		t.Fatal("a refused port answered")
	}
	if _, _, err := doCtx(t, ctx, s, "GET", "http://user:pw@127.0.0.1:"+srv.Port+"/?token=secret", nil); err == nil {
		t.Fatal("an ungranted URL answered")
	}
	parent.End()

	spans := exp.GetSpans()
	if len(spans) != 5 {
		t.Fatalf("%d spans, want 4 requests and their parent: %v", len(spans), spans.Snapshots())
	}
	reqs := spans[:4]
	want := []struct {
		name, url  string
		status     int64
		errorType  string
		statusCode codes.Code
	}{
		{"GET", "http://localhost:" + srv.Port + "/hop", 200, "", codes.Unset},
		{"POST", "http://localhost:" + srv.Port + "/missing", 404, "404", codes.Error},
		{"GET", "http://localhost:" + refused + "/", 0, "refused", codes.Error},
		{"GET", "http://127.0.0.1:" + srv.Port + "/", 0, "denied", codes.Error},
	}
	for i, w := range want {
		sp := reqs[i]
		a := attrs(sp)
		if sp.Name != w.name || sp.SpanKind != trace.SpanKindClient || sp.Parent.SpanID() != parent.SpanContext().SpanID() {
			t.Errorf("span %d: %s kind %v parent %v, want %s, a client span of %v", i, sp.Name, sp.SpanKind, sp.Parent.SpanID(), w.name, parent.SpanContext().SpanID())
		}
		if a["http.request.method"].AsString() != w.name || a["url.full"].AsString() != w.url || a["server.port"].AsInt64() == 0 ||
			a["http.response.status_code"].AsInt64() != w.status || a["error.type"].AsString() != w.errorType || sp.Status.Code != w.statusCode {
			t.Errorf("span %d (%s): attributes %v status %v, want url %s status %d error.type %q code %v", i, w.url, sp.Attributes, sp.Status, w.url, w.status, w.errorType, w.statusCode)
		}
		for _, kv := range sp.Attributes {
			if v := kv.Value.Emit(); strings.Contains(v, "s3cret") || strings.Contains(v, "token") || strings.Contains(v, "pw") {
				t.Errorf("span %d records %s=%q", i, kv.Key, v)
			}
		}
	}
	if a := attrs(reqs[0]); a["server.address"].AsString() != "localhost" {
		t.Errorf("server.address %v, want localhost", a["server.address"])
	}
	hops := srv.Seen()
	if len(hops) != 3 {
		t.Fatalf("the server saw %d requests, want the redirect's two hops and the POST", len(hops))
	}
	for i, sp := range []tracetest.SpanStub{reqs[0], reqs[0], reqs[1]} {
		wantTP := "00-" + sp.SpanContext.TraceID().String() + "-" + sp.SpanContext.SpanID().String() + "-01"
		if tp := hops[i].Values("Traceparent"); len(tp) != 1 || tp[0] != wantTP {
			t.Errorf("hop %d carried traceparent %q, want the client span's %s", i, tp, wantTP)
		}
		if ts := hops[i].Values("Tracestate"); len(ts) != 0 {
			t.Errorf("hop %d carried the guest's tracestate %q", i, ts)
		}
	}

	// Tracing off: no span, and the guest's headers reach the server as it set them.
	off := session(t, grant, outbound.Options{}, "P", srv.Port, "R", refused)
	if _, _, err := doCtx(t, ctx, off, "GET", "http://localhost:"+srv.Port+"/", guestHeader); err != nil {
		t.Fatal(err)
	}
	if n := len(exp.GetSpans()); n != 5 {
		t.Errorf("%d spans after a request with tracing off, want still 5", n)
	}
	hops = srv.Seen()
	if last := hops[len(hops)-1]; last.Get("Traceparent") != guestParent || last.Get("Tracestate") != "guest=1" {
		t.Errorf("with tracing off the server saw %v, want the guest's own headers", last)
	}
}
