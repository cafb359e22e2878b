package host_test

import (
	"context"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/host"
	"github.com/wasmjobs/wasmjobs/internal/rigs/abitest"
	"github.com/wasmjobs/wasmjobs/worker"
)

// loadHTTPConformance loads the language's conformance handler with the HTTP tables'
// manifest (their grant), retired with the test.
func loadHTTPConformance(t *testing.T, e *host.Engine, lang string) *host.Module {
	t.Helper()
	man, err := host.ParseManifest("conformance.toml", []byte(abitest.HTTPManifest))
	if err != nil {
		t.Fatal(err)
	}
	return loadModule(t, e, "conformance", guestModule(t, lang+"-conformance"), man)
}

// TestSDKHTTPConformance runs the HTTP cases of the cross-language table through every
// SDK that makes requests, against one loopback server: a granted GET and POST return
// status, repeated headers and body; an ungranted URL is the ABI's denial as the SDK's
// error; the Retry-After helper defers a 429 by its header and retries a 503 without.
func TestSDKHTTPConformance(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(abitest.HTTPServer())
	t.Cleanup(srv.Close)
	e := newEngine(t)
	for _, lang := range abitest.HTTPLanguages {
		t.Run(lang, func(t *testing.T) {
			t.Parallel()
			m := loadHTTPConformance(t, e, lang)
			for _, c := range abitest.HTTPCases(srv.URL) {
				runSDKCase(t, m, c)
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
	m := loadHTTPConformance(t, newEngine(t), "go")
	const d = 300 * time.Millisecond
	for _, kind := range []string{"http-context-deadline", "http-client-timeout"} {
		env := backend.NewEnvelope("conformance", []byte(kind+":"+srv.URL+"/"))
		start := time.Now()
		x := m.Run(context.Background(), &worker.Job{Envelope: env, Attempt: 1, MaxAttempts: 5}, nil)
		took := time.Since(start)
		if x.Outcome != worker.Ack || string(x.Output) != "deadline" {
			t.Fatalf("%s: kind %s reason %q output %q", kind, x.Ending(), x.Reason, x.Output)
		}
		if took < d || took > d+700*time.Millisecond {
			t.Fatalf("%s: the request ended after %v, want about %v", kind, took, d)
		}
		select {
		case <-cancelled:
		case <-time.After(2 * time.Second):
			t.Fatalf("%s: the server's request was not cancelled", kind)
		}
	}
}

// TestDeliverWebhookEndToEnd: webhook-rust signs a webhook whose body names its URL,
// and deliver-webhook delivers its child there: the receiver gets the body and the
// signature header, and its answer settles the delivery. The example's grant,
// "https://*", reaches public addresses only, so here it is loaded with a test manifest
// granting the loopback TLS server instead (the rest of its manifest as it is); under
// its own manifest the loopback URL is refused and the delivery dead-lettered.
func TestDeliverWebhookEndToEnd(t *testing.T) {
	t.Parallel()
	type received struct {
		path, signature, contentType, body string
	}
	got := make(chan received, 8)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- received{r.URL.Path, r.Header.Get("X-Signature"), r.Header.Get("Content-Type"), string(b)}
		switch r.URL.Path {
		case "/busy":
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(http.StatusTooManyRequests)
		case "/gone":
			w.WriteHeader(http.StatusGone)
		case "/down":
			w.WriteHeader(http.StatusBadGateway)
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	}))
	t.Cleanup(srv.Close)
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	e := httpEngine(t, roots)
	dir := filepath.Join(abitest.Dir(), "..", "examples")
	signMan, err := host.ReadManifest(filepath.Join(dir, "webhook-rust", "webhook-rust.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	signer := loadModule(t, e, "webhook-rust", guestModule(t, "webhook-rust"), signMan)
	toml := mustRead(t, filepath.Join(dir, "deliver-webhook", "deliver-webhook.toml"))
	wasm := guestModule(t, "deliver-webhook")
	load := func(toml string) *host.Module {
		man, err := host.ParseManifest("deliver-webhook.toml", []byte(toml))
		if err != nil {
			t.Fatal(err)
		}
		m, err := e.Load(context.Background(), "deliver-webhook", wasm, man)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(m.Retire)
		return m
	}
	own := load(string(toml))
	if !strings.Contains(string(toml), `allow = ["https://*"]`) {
		t.Fatal(`the example's manifest no longer grants "https://*"`)
	}
	granted := load(strings.Replace(string(toml), `allow = ["https://*"]`, fmt.Sprintf("allow = [%q]", srv.URL), 1))
	for _, tc := range []struct {
		name, path string
		mod        *host.Module
		outcome    worker.Outcome
		reason     string // prefix
		delay      time.Duration
		sent       bool
	}{
		{"delivered", "/hook", granted, worker.Ack, "", 0, true},
		{"retry after", "/busy", granted, worker.Defer, "http 429: Retry-After 7", 7 * time.Second, true},
		{"refused by the receiver", "/gone", granted, worker.DeadLetter, "http 410: the receiver refused", 0, true},
		{"receiver down", "/down", granted, worker.Retry, "http 502", 0, true},
		{"loopback under https://*", "/hook", own, worker.DeadLetter, "cannot deliver: Post ", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := fmt.Sprintf(`{"event":"order.shipped","order":1042,"url":"%s%s"}`, srv.URL, tc.path)
			signed := signer.Run(context.Background(), &worker.Job{Envelope: backend.NewEnvelope("webhooks", []byte(body)), Attempt: 1, MaxAttempts: 3}, nil)
			if signed.Outcome != worker.Ack || len(signed.Children) != 1 || signed.Children[0].Queue != "deliver-webhook" {
				t.Fatalf("webhook-rust: kind %s reason %q children %+v", signed.Ending(), signed.Reason, signed.Children)
			}
			child := signed.Children[0].Payload
			if want := "Url: " + srv.URL + tc.path + "\nX-Signature: " + string(signed.Output) + "\n\n" + body; string(child) != want {
				t.Fatalf("child %q, want %q", child, want)
			}
			x := tc.mod.Run(context.Background(), &worker.Job{Envelope: backend.NewEnvelope("deliver-webhook", child), Attempt: 1, MaxAttempts: 8}, nil)
			var r *received
			select {
			case rr := <-got:
				r = &rr
			default:
			}
			if x.Outcome != tc.outcome || !strings.HasPrefix(x.Reason, tc.reason) || (x.Delay != nil) != (tc.delay > 0) || (x.Delay != nil && *x.Delay != tc.delay) {
				t.Fatalf("kind %s reason %q delay %v output %q; want %s %q %v", x.Ending(), x.Reason, deref(x.Delay), x.Output, tc.outcome, tc.reason, tc.delay)
			}
			if (r != nil) != tc.sent {
				t.Fatalf("the receiver got %+v, want a delivery: %v", r, tc.sent)
			}
			if r != nil && (r.path != tc.path || r.signature != string(signed.Output) || r.body != body || r.contentType != "application/json") {
				t.Fatalf("the receiver got %+v", r)
			}
		})
	}
}

// TestRetryAfterDefersOnPebble: on the default backend (the durable Pebble store) under
// a real worker, a 429 with Retry-After: 2 seen through the Go SDK's helper defers the
// job by 2 s without spending its attempt: the second run starts 2 s (± 0.5 s) after
// the first and is attempt 1 again, and the job then succeeds.
func TestRetryAfterDefersOnPebble(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hits.Add(1) == 1 {
			w.Header().Set("Retry-After", "2")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	m := loadHTTPConformance(t, newEngine(t), "go")
	b := openPebble(t)
	type run struct {
		at      time.Time
		attempt int
	}
	var mu sync.Mutex
	var runs []run
	settled := make(chan worker.Event, 4)
	serve(t, b, m, worker.Config{Concurrency: 1, Observer: worker.ObserverFunc(func(ev worker.Event) {
		switch ev.Kind {
		case worker.EventStarted:
			mu.Lock()
			runs = append(runs, run{time.Now(), ev.Job.Attempt})
			mu.Unlock()
		case worker.EventSettled:
			settled <- ev
		}
	})})
	if err := b.Publish(ctx, backend.NewEnvelope(m.Queue(), []byte("http-retry-after:"+srv.URL+"/")), 0); err != nil {
		t.Fatal(err)
	}
	for i, want := range []worker.Outcome{worker.Defer, worker.Ack} {
		select {
		case ev := <-settled:
			if ev.Settle != want || (i == 0 && (ev.Reason != "http 429: Retry-After 2" || ev.Delay != 2*time.Second)) {
				t.Fatalf("run %d settled %v %q %v; want %v", i+1, ev.Settle, ev.Reason, ev.Delay, want)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("run %d did not settle", i+1)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(runs) != 2 || runs[0].attempt != 1 || runs[1].attempt != 1 {
		t.Fatalf("runs %+v; want two, both attempt 1", runs)
	}
	if gap := runs[1].at.Sub(runs[0].at); gap < 1500*time.Millisecond || gap > 2500*time.Millisecond {
		t.Fatalf("the second run started %v after the first, want 2s ± 0.5s", gap)
	}
}
