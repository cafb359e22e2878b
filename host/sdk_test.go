package host_test

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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

// guestModule returns a guest built by `make guests`. Go's are built here when missing
// (Go is always at hand): the conformance handler, and an example with a go.mod of its
// own, once per test process; another language's missing build skips the test, except
// under CI, where it fails.
func guestModule(t testing.TB, name string) []byte {
	t.Helper()
	path, ok := abitest.Guest(name)
	goDir := filepath.Join(abitest.Dir(), "..", "examples", name)
	if strings.HasPrefix(name, "go-") {
		goDir = filepath.Join(abitest.Dir(), "..", "guest-sdk", "go", "conformance")
	}
	if _, err := os.Stat(filepath.Join(goDir, "go.mod")); !ok && err == nil {
		return buildGoGuest(t, name, goDir)
	}
	if !ok {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s.wasm is not built: CI must run make guests first", name)
		}
		t.Skipf("%s.wasm is not built: run make guests (it needs clang, rustc and npm)", name)
	}
	return mustRead(t, path)
}

// goGuests are the Go guests built by this test process, by name: a build takes tens
// of seconds, and several tests load the same guest.
var goGuests struct {
	sync.Mutex
	wasm map[string][]byte
}

// buildGoGuest builds the Go guest in dir, or returns its earlier build. The lock is
// held across the build on purpose: a second test wanting the guest waits for it
// rather than building it again.
func buildGoGuest(t testing.TB, name, dir string) []byte {
	t.Helper()
	goGuests.Lock()
	defer goGuests.Unlock()
	if wasm, ok := goGuests.wasm[name]; ok {
		return wasm
	}
	path := filepath.Join(t.TempDir(), name+".wasm")
	cmd := exec.Command("go", "build", "-buildmode=c-shared", "-o", path, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building %s: %v\n%s", name, err, out)
	}
	wasm := mustRead(t, path)
	if goGuests.wasm == nil {
		goGuests.wasm = map[string][]byte{}
	}
	goGuests.wasm[name] = wasm
	return wasm
}

// runSDKCase runs the conformance case c on m (a job of c's payload, headers and
// attempt, with the tables' job id; under a recording span when c is traced) and checks
// its kind, reason, output, code and delay against c's.
func runSDKCase(t *testing.T, m *host.Module, c abitest.SDKCase) host.Execution {
	t.Helper()
	env := backend.NewEnvelope("conformance", []byte(c.Payload))
	env.ID, env.Headers, env.Round = abitest.SDKJobID, c.Headers, c.Round
	job := &worker.Job{Envelope: env, Attempt: max(c.Attempt, 1), MaxAttempts: 5, Round: c.Round, Awaited: c.Awaited}
	var x host.Execution
	want := c.Output
	if c.Traced {
		want = c.OutputWith(underSpan(t, func(ctx context.Context) { x = m.Run(ctx, job, nil) }))
	} else {
		x = m.Run(context.Background(), job, nil)
	}
	if x.Ending() != c.Kind || x.Reason != c.Reason || string(x.Output) != want {
		t.Errorf("%q: kind %s reason %q output %q; want %s %q %q", c.Payload, x.Ending(), x.Reason, x.Output, c.Kind, c.Reason, want)
	}
	if (x.Code == nil) != (c.Code == nil) || (x.Code != nil && *x.Code != *c.Code) {
		t.Errorf("%q: code %v, want %v", c.Payload, deref(x.Code), deref(c.Code))
	}
	if (x.Delay == nil) != (c.DelayMs == nil) || (x.Delay != nil && x.Delay.Milliseconds() != *c.DelayMs) {
		t.Errorf("%q: delay %v, want %v", c.Payload, deref(x.Delay), deref(c.DelayMs))
	}
	return x
}

// TestSDKConformance runs every language's conformance handler through the host on the
// same table: the results must be the table's, hence identical across languages. It
// runs in both modes of the host's calls: served (every SDK but JavaScript's exports
// wasmjobs_serve, and its instance must be served) and called once a job
// (Config.NoServe).
func TestSDKConformance(t *testing.T) {
	t.Parallel()
	for _, noServe := range []bool{false, true} {
		mode := map[bool]string{false: "served", true: "called"}[noServe]
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			sdkConformance(t, newEngineWith(t, host.Config{NoCache: true, NoServe: noServe}), !noServe)
		})
	}
}

// sdkConformance runs the SDK table on e, each language's module on an engine of its
// own when served, so that its serve loop can be counted.
func sdkConformance(t *testing.T, e *host.Engine, served bool) {
	for _, lang := range abitest.Languages {
		t.Run(lang, func(t *testing.T) {
			t.Parallel()
			e := e
			if served {
				e = newEngine(t)
			}
			m := loadModule(t, e, "conformance", guestModule(t, lang+"-conformance"), host.Manifest{MaxAttempts: 5})
			want := int64(0)
			if served && lang != "typescript" {
				want = 1
			}
			if n := host.ServeLoops(e); n != want {
				t.Fatalf("%d serve loops after the load, want %d (a served SDK's module exports wasmjobs_serve)", n, want)
			}
			for _, c := range abitest.SDKCases() {
				x := runSDKCase(t, m, c)
				var logs []abitest.Log
				for _, l := range x.Logs {
					logs = append(logs, abitest.Log{Level: levelNames[l.Level.String()], Msg: l.Msg})
				}
				if len(logs) != len(c.Logs) || (len(logs) > 0 && !equalLogs(logs, c.Logs)) {
					t.Errorf("%q: logs %v, want %v", c.Payload, logs, c.Logs)
				}
				var children []abitest.Child
				if x.Outcome == worker.Ack || x.Outcome == worker.Wait {
					for _, ch := range x.Children {
						children = append(children, abitest.Child{Queue: ch.Queue, Payload: string(ch.Payload), DelayMs: ch.Delay.Milliseconds(), Await: ch.Await})
					}
				}
				if !slices.Equal(children, c.Children) {
					t.Errorf("%q: children %v, want %v", c.Payload, children, c.Children)
				}
			}
		})
	}
}

func equalLogs(a, b []abitest.Log) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestExamples runs each example handler on a job of its README.
func TestExamples(t *testing.T) {
	t.Parallel()
	e := newEngine(t)
	for _, ex := range []struct {
		name, payload, wantKind, wantOutput, wantChild string
	}{
		// The HMAC-SHA256 of the payload under "change-me", as Python's hmac computes it.
		{"webhook-rust", `{"event":"order.shipped"}`, "ack", "sha256=4a459f6b01035327b745596985e0b8dd8235561e11151afd46fe39ed7a0e7cfe", "deliver-webhook"},
		{"webhook-rust", ``, "dead_letter", "", ""},
		// Plain http is not granted: denied on the host, nothing sent, dead-lettered.
		{"deliver-webhook", "Url: http://hooks.example.com/orders\nX-Signature: sha256=00\n\n{}", "dead_letter", "", ""},
		{"deliver-webhook", "no header lines", "dead_letter", "", ""},
		{"wordcount-c", "hello brave new world\nsecond line\n", "ack", `{"lines":2,"words":6,"bytes":34}`, ""},
		{"wordcount-c", "\xff\xfe", "dead_letter", "", ""},
		{"render-email-as", "template=shipped\nname=Ada\norder=1042\n", "ack", "Subject: Order 1042 shipped\n\nHello Ada,\n\nyour order 1042 is on its way.\n", "send-email"},
		{"render-email-as", "template=shipped\nname=Ada\n", "dead_letter", "", ""},
		{"receipt-ts", `{"id":"A-1","email":"a@b.co","name":"Ada","currency":"GBP","items":[{"sku":"P","name":"Pen","qty":2,"cents":150},{"sku":"INK","name":"Ink","qty":1,"cents":1205}]}`, "ack",
			"Receipt for order A-1\nDear Ada,\n\nPen (P)     2 x £1.50   £3.00\nInk (INK)  1 x £12.05  £12.05\n-----------------------------\nTotal                  £15.05\n", "send-email"},
		{"receipt-ts", `{"id":"A-1","email":"nope","name":"Ada","currency":"GBP","items":[]}`, "dead_letter", "", ""},
		{"receipt-ts", `not json`, "dead_letter", "", ""},
	} {
		t.Run(ex.name+"/"+ex.wantKind, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(abitest.Dir(), "..", "examples", ex.name)
			man, err := host.ReadManifest(filepath.Join(dir, ex.name+".wasm"))
			if err != nil {
				t.Fatal(err)
			}
			m := loadModule(t, e, ex.name, guestModule(t, ex.name), man)
			x := run(m, ex.payload)
			if x.Ending() != ex.wantKind || (ex.wantKind == "ack" && string(x.Output) != ex.wantOutput) {
				t.Fatalf("kind %s reason %q output %q", x.Ending(), x.Reason, x.Output)
			}
			if ex.wantChild != "" && (len(x.Children) != 1 || x.Children[0].Queue != ex.wantChild) {
				t.Fatalf("children %+v", x.Children)
			}
		})
	}
	t.Run("sync-contact-ts", func(t *testing.T) {
		t.Parallel()
		testSyncContact(t, e)
	})
	t.Run("fanout-ts", func(t *testing.T) {
		t.Parallel()
		testFanOut(t, e)
	})
}

// testSyncContact runs the sync-contact-ts example against a loopback stand-in for
// its CRM, loaded with its own manifest whose local entry grants that server instead
// of port 9000: a new contact and a known one, a 429 with Retry-After, a 503 without
// one, a refused contact, a CRM outside the grant and a bad payload.
func testSyncContact(t *testing.T, e *host.Engine) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var c struct{ Email, Name string }
		if r.Method != http.MethodPut || r.URL.Path != "/v1/contacts" || r.Header.Get("Content-Type") != "application/json" || json.NewDecoder(r.Body).Decode(&c) != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		switch c.Name {
		case "busy":
			w.Header().Set("Retry-After", "3")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		case "down":
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		case "":
			http.Error(w, `{"error":"name is required"}`, http.StatusUnprocessableEntity)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if c.Email == "new@example.com" {
			w.WriteHeader(http.StatusCreated)
		}
		fmt.Fprintf(w, `{"id":"c-%s"}`, c.Name)
	}))
	t.Cleanup(srv.Close)
	dir := filepath.Join(abitest.Dir(), "..", "examples", "sync-contact-ts")
	toml := mustRead(t, filepath.Join(dir, "sync-contact-ts.toml"))
	if !strings.Contains(string(toml), `"http://127.0.0.1:9000"`) {
		t.Fatal("the example's manifest no longer grants its local CRM on port 9000")
	}
	man, err := host.ParseManifest("sync-contact-ts.toml", []byte(strings.Replace(string(toml), "http://127.0.0.1:9000", srv.URL, 1)))
	if err != nil {
		t.Fatal(err)
	}
	m, err := e.Load(context.Background(), "sync-contact-ts", guestModule(t, "sync-contact-ts"), man)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Retire)
	for _, c := range []struct{ crm, email, name, kind, output, reason string }{
		{srv.URL, "new@example.com", "Ada", "ack", `{"email":"new@example.com","contactId":"c-Ada","created":true}`, ""},
		{srv.URL, "old@example.com", "Bob", "ack", `{"email":"old@example.com","contactId":"c-Bob","created":false}`, ""},
		{srv.URL, "a@example.com", "busy", "defer", "", "http 429: Retry-After 3"},
		{srv.URL, "a@example.com", "down", "retry", "", "http 503"},
		{srv.URL, "a@example.com", "", "dead_letter", "", `the CRM refused the contact: 422 {"error":"name is required"}` + "\n"},
		{"http://127.0.0.2:9", "a@example.com", "Ada", "dead_letter", "", "http://127.0.0.2:9/v1/contacts is outside the manifest's [http] grant: denied: "},
		{srv.URL, "not an address", "Ada", "dead_letter", "", "contact: want {email, name}"},
	} {
		payload, _ := json.Marshal(map[string]any{"crm": c.crm, "contact": map[string]string{"email": c.email, "name": c.name}})
		x := run(m, string(payload))
		if x.Ending() != c.kind || string(x.Output) != c.output || !strings.HasPrefix(x.Reason, c.reason) || (c.reason == "" && x.Reason != "") {
			t.Errorf("%s: %s %q %q, want %s %q %q", payload, x.Ending(), x.Reason, x.Output, c.kind, c.reason, c.output)
		}
		if c.kind == "defer" && (x.Delay == nil || *x.Delay != 3*time.Second) {
			t.Errorf("%s: delay %v, want 3s", payload, deref(x.Delay))
		}
	}
}

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

// TestSDKsCancelledInARequest: in every language whose SDK makes requests, a job
// blocked in a request to a server that never answers, cancelled by an operator
// (worker.ErrCancelled as its context's cause), fails as cancelled, every run, and
// within 100 ms of the cancel (JavaScript within its 250 ms backstop) in at least one of
// three runs (cancelledPromptly), and its request is aborted (the server sees it end).
func TestSDKsCancelledInARequest(t *testing.T) {
	t.Parallel()
	seen, ended := make(chan struct{}, 1), make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- struct{}{}
		<-r.Context().Done()
		ended <- struct{}{}
	}))
	t.Cleanup(srv.Close)
	e := newEngine(t)
	for _, lang := range abitest.HTTPLanguages {
		t.Run(lang, func(t *testing.T) { // one at a time: they share the server's signals
			m := loadHTTPConformance(t, e, lang)
			cancelledPromptly(t, cancelWithin(lang), func() (context.CancelCauseFunc, <-chan host.Execution) {
				ctx, cancel := context.WithCancelCause(context.Background())
				t.Cleanup(func() { cancel(nil) }) // a run a failed test leaves ends with it
				done := make(chan host.Execution, 1)
				go func() {
					env := backend.NewEnvelope("conformance", []byte("http-get:"+srv.URL+"/"))
					done <- m.Run(ctx, &worker.Job{Envelope: env, Attempt: 1, MaxAttempts: 5}, nil)
				}()
				select {
				case <-seen:
				case <-time.After(30 * time.Second):
					t.Fatal("the request never reached the server")
				}
				return cancel, done
			}, func() {
				select {
				case <-ended:
				case <-time.After(5 * time.Second):
					t.Fatal("the server's request was not aborted")
				}
			})
		})
	}
}

// cancelledPromptly checks that a run cancelled as an operator cancels it ends as
// cancelled by an operator within of the cancel. start begins a run and returns its
// cancel and the channel its Execution arrives on once the run is well inside the
// handler; after, when not nil, checks what must follow each ended run.
//
// A run that ends late is tried again, up to three runs: what is measured is the stop's
// mechanism (the close on the context's end, the guest's next check, the request's
// abort), and on a two-core machine running the whole suite under the race detector one
// run can wait that long for a CPU (CI saw 187 ms once, against 100-150 ms). A stop that
// does not work ends every run late, or never, and still fails. A wrong ending fails at
// once.
func cancelledPromptly(t *testing.T, within time.Duration, start func() (context.CancelCauseFunc, <-chan host.Execution), after func()) {
	t.Helper()
	const runs = 3
	var late []time.Duration
	for range runs {
		cancel, done := start()
		at := time.Now()
		cancel(worker.ErrCancelled)
		var x host.Execution
		select {
		case x = <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("the run had not ended 30s after the cancel")
		}
		took := time.Since(at)
		t.Logf("ended %v after the cancel", took)
		if x.Cause != host.CauseCancelled || x.Reason != "cancelled by an operator" {
			t.Fatalf("%s %q output %q, want cancelled by an operator", x.Ending(), x.Reason, x.Output)
		}
		if after != nil {
			after()
		}
		if took <= within {
			return
		}
		late = append(late, took)
	}
	t.Errorf("each of %d runs ended late after its cancel (%v), want within %v", runs, late, within)
}

// cancelWithin is how soon a run of lang's handler ends after an operator's cancel:
// 100 ms, JavaScript within its interrupt's 250 ms backstop. Under the race detector,
// which slows the host's side of the stop (the guest's close, the request's abort) on
// a loaded machine, half as much again (CI saw 112 ms there).
func cancelWithin(lang string) time.Duration {
	d := 100 * time.Millisecond
	if lang == "typescript" {
		d = 250 * time.Millisecond
	}
	if raceEnabled {
		d += d / 2
	}
	return d
}

// TestSDKsCancelledWhileSpinningOrAsleep: in every SDK, a job spinning in the
// handler's code, and (where the SDK's target has one: Go and C; Rust's
// wasm32-unknown-unknown has no sleep) a job asleep in WASI,
// cancelled by an operator fails as cancelled, every run, and within 100 ms of the
// cancel (JavaScript within its 250 ms backstop) in at least one of three runs
// (cancelledPromptly).
func TestSDKsCancelledWhileSpinningOrAsleep(t *testing.T) {
	t.Parallel()
	e := newEngine(t)
	sleeps := map[string]bool{"go": true, "c": true}
	limits := host.DefaultLimits()
	limits.Timeout = time.Minute
	for _, lang := range abitest.Languages {
		m := loadModule(t, e, "conformance", guestModule(t, lang+"-conformance"), host.Manifest{MaxAttempts: 5, Limits: limits})
		for _, payload := range []string{"spin", "sleep"} {
			if payload == "sleep" && !sleeps[lang] {
				continue
			}
			t.Run(lang+"/"+payload, func(t *testing.T) {
				cancelledPromptly(t, cancelWithin(lang), func() (context.CancelCauseFunc, <-chan host.Execution) {
					ctx, cancel := context.WithCancelCause(context.Background())
					t.Cleanup(func() { cancel(nil) }) // a run a failed test leaves ends with it
					done := make(chan host.Execution, 1)
					started := time.Now()
					go func() {
						env := backend.NewEnvelope("conformance", []byte(payload))
						done <- m.Run(ctx, &worker.Job{Envelope: env, Attempt: 1, MaxAttempts: 5}, nil)
					}()
					select {
					case x := <-done:
						t.Fatalf("the %s run ended by itself after %v: %s %q", payload, time.Since(started), x.Ending(), x.Reason)
					case <-time.After(300 * time.Millisecond): // well inside the handler by now
					}
					return cancel, done
				}, nil)
			})
		}
	}
}

// TestSDKWaitImportsOnlyWhenUsed: an SDK's handler imports the functions of fan-out
// and fan-in only when it uses them, so on a host whose backend keeps no waiting jobs
// every example (none waits) loads and every conformance handler (each waits) is
// refused, naming the backend.
func TestSDKWaitImportsOnlyWhenUsed(t *testing.T) {
	t.Parallel()
	e := newEngineWith(t, host.Config{NoCache: true, NoWait: true, Backend: "rabbitmq"})
	for _, lang := range abitest.Languages {
		t.Run(lang, func(t *testing.T) {
			t.Parallel()
			_, err := e.Load(context.Background(), "conformance", guestModule(t, lang+"-conformance"), host.Manifest{})
			// A JS handler is the engine, which imports nothing of fan-in: it loads,
			// and its WAIT fails at run time (TestJSWaitWhereTheHostCannot), the awaited enqueue refused.
			if lang == "typescript" {
				if err != nil {
					t.Fatalf("Load: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), "backend rabbitmq keeps no waiting jobs") {
				t.Fatalf("Load = %v, want the refusal that names the backend", err)
			}
		})
	}
	for _, example := range []string{"greet-go", "wordcount-c", "webhook-rust", "render-email-as"} {
		t.Run(example, func(t *testing.T) {
			t.Parallel()
			m, err := e.Load(context.Background(), example, guestModule(t, example), host.Manifest{})
			if err != nil {
				t.Fatalf("an example that never waits is refused: %v", err)
			}
			m.Retire()
		})
	}
}

// TestJSWaitWhereTheHostCannot: a JS handler (the engine, which imports nothing of
// fan-in) loads on a host whose backend keeps no waiting jobs, and there its awaited
// enqueue throws "not permitted": the job fails, saying so, and stages nothing.
func TestJSWaitWhereTheHostCannot(t *testing.T) {
	t.Parallel()
	e := newEngineWith(t, host.Config{NoCache: true, NoWait: true, Backend: "rabbitmq"})
	m := loadModule(t, e, "conformance", guestModule(t, "typescript-conformance"), host.Manifest{MaxAttempts: 5})
	x := runSDKCase(t, m, abitest.SDKCase{Payload: "fanout", Kind: "trap", Reason: `trap: RangeError: enqueue into "child": not permitted`, Output: "0 0\n"})
	if res := x.Result(); res.Outcome != worker.Failed || len(res.Children) != 0 {
		t.Fatalf("result %s with children %v, want a failure that publishes none", res.Outcome, res.Children)
	}
}

// testFanOut runs the README's fan-out example: its first run stages an awaited render
// per page and waits, with the manifest's wait_timeout; its resumed run joins the
// pages' outputs, and one without results does not fan out again.
func testFanOut(t *testing.T, e *host.Engine) {
	dir := filepath.Join(abitest.Dir(), "..", "examples", "fanout-ts")
	man, err := host.ReadManifest(filepath.Join(dir, "fanout-ts.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	m := loadModule(t, e, "fanout-ts", guestModule(t, "fanout-ts"), man)
	job := jobOf(m, `{"pages": ["intro", "body"]}`)
	x := m.Run(context.Background(), job, nil)
	res := m.Settle(&x, job, time.Now())
	if res.Outcome != worker.Wait || res.WaitTimeout != time.Hour || len(res.Children) != 2 {
		t.Fatalf("first run: %s (%s), wait timeout %v, children %+v", res.Outcome, res.Reason, res.WaitTimeout, res.Children)
	}
	for i, page := range []string{"intro", "body"} {
		if c := res.Children[i]; c.Queue != "render" || string(c.Payload) != page || !c.Await {
			t.Fatalf("child %d = %+v, want an awaited render of %q", i, c, page)
		}
	}
	job = jobOf(m, `{"pages": ["intro", "body"]}`)
	job.Round, job.Envelope.Round = 1, 1
	job.Awaited = []backend.AwaitResult{{ID: "01JA", Queue: "render", State: backend.JobSucceeded, Output: []byte("<h1>intro</h1>")},
		{ID: "01JB", Queue: "render", State: backend.JobSucceeded, Output: []byte("<p>body</p>")}}
	if x := m.Run(context.Background(), job, nil); x.Ending() != "ack" || string(x.Output) != "<h1>intro</h1>\n<p>body</p>" {
		t.Fatalf("resumed run: %s %q, output %q", x.Ending(), x.Reason, x.Output)
	}
	// A resumed run tells itself from a first one by its round, not by its results:
	// one given none does not fan out again.
	job = jobOf(m, `{"pages": ["intro", "body"]}`)
	job.Round, job.Envelope.Round = 1, 1
	if x := m.Run(context.Background(), job, nil); x.Ending() != "ack" || len(x.Children) != 0 {
		t.Fatalf("resumed run without results: %s %q, children %+v, want an ack staging none", x.Ending(), x.Reason, x.Children)
	}
	// No page: nothing to wait for, a failure that says so.
	job = jobOf(m, `{"pages": []}`)
	x = m.Run(context.Background(), job, nil)
	if settle, reason := worker.Decide(job, m.Settle(&x, job, time.Now()), 0); settle != worker.Retry || reason != "wait without an awaited child" {
		t.Fatalf("no pages: %s %q", settle, reason)
	}
}
