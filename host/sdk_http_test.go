package host_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/host"
	"github.com/wasmjobs/wasmjobs/internal/abitest"
	"github.com/wasmjobs/wasmjobs/worker"
)

// TestSDKHTTPConformance runs the HTTP cases of the cross-language table through every
// SDK that makes requests, against one loopback server: a granted GET and POST return
// status, repeated headers and body; an ungranted URL is the ABI's denial as the SDK's
// error; the Retry-After helper defers a 429 by its header and retries a 503 without.
func TestSDKHTTPConformance(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(abitest.HTTPServer())
	t.Cleanup(srv.Close)
	e := newEngine(t)
	man, err := host.ParseManifest("conformance.toml", []byte(abitest.HTTPManifest))
	if err != nil {
		t.Fatal(err)
	}
	for _, lang := range abitest.HTTPLanguages {
		t.Run(lang, func(t *testing.T) {
			t.Parallel()
			m, err := e.Load(context.Background(), "conformance", guestModule(t, lang+"-conformance"), man)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Retire()
			for _, c := range abitest.HTTPCases(srv.URL) {
				env := backend.NewEnvelope("conformance", []byte(c.Payload))
				env.ID = abitest.SDKJobID
				x := m.Run(context.Background(), &worker.Job{Envelope: env, Attempt: 1, MaxAttempts: 5}, nil)
				if string(x.Kind) != c.Kind || x.Reason != c.Reason || string(x.Output) != c.Output {
					t.Errorf("%q: kind %s reason %q output %q; want %s %q %q", c.Payload, x.Kind, x.Reason, x.Output, c.Kind, c.Reason, c.Output)
				}
				if (x.Code == nil) != (c.Code == nil) || (x.Code != nil && *x.Code != *c.Code) {
					t.Errorf("%q: code %v, want %v", c.Payload, deref(x.Code), deref(c.Code))
				}
				if (x.Delay == nil) != (c.DelayMs == nil) || (x.Delay != nil && x.Delay.Milliseconds() != *c.DelayMs) {
					t.Errorf("%q: delay %v, want %v", c.Payload, deref(x.Delay), deref(c.DelayMs))
				}
			}
		})
	}
}

// TestGoSDKHTTPDeadlines: in the Go SDK, a request context's deadline and an
// http.Client's Timeout of 300 ms end a request to a server that never answers at about
// that time, as context.DeadlineExceeded in the guest, although the guest's own timers
// cannot fire during the host call that waits: the transport hands the deadline to the
// host, and closes the request there (the server sees it cancelled).
func TestGoSDKHTTPDeadlines(t *testing.T) {
	t.Parallel()
	cancelled := make(chan struct{}, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
			cancelled <- struct{}{}
		case <-time.After(5 * time.Second):
		}
	}))
	t.Cleanup(srv.Close)
	e := newEngine(t)
	man, err := host.ParseManifest("conformance.toml", []byte(abitest.HTTPManifest))
	if err != nil {
		t.Fatal(err)
	}
	m, err := e.Load(context.Background(), "conformance", guestModule(t, "go-conformance"), man)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Retire()
	const d = 300 * time.Millisecond
	for _, kind := range []string{"http-context-deadline", "http-client-timeout"} {
		env := backend.NewEnvelope("conformance", []byte(kind+":"+srv.URL+"/"))
		start := time.Now()
		x := m.Run(context.Background(), &worker.Job{Envelope: env, Attempt: 1, MaxAttempts: 5}, nil)
		took := time.Since(start)
		if x.Kind != host.KindAck || string(x.Output) != "deadline" {
			t.Fatalf("%s: kind %s reason %q output %q", kind, x.Kind, x.Reason, x.Output)
		}
		if took < d || took > d+500*time.Millisecond {
			t.Fatalf("%s: the request ended after %v, want about %v", kind, took, d)
		}
		select {
		case <-cancelled:
		case <-time.After(2 * time.Second):
			t.Fatalf("%s: the server's request was not cancelled", kind)
		}
	}
}
