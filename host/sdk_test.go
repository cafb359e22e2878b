package host_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
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
// attempt, with the tables' job id) and checks its kind, reason, output, code and
// delay against c's.
func runSDKCase(t *testing.T, m *host.Module, c abitest.SDKCase) host.Execution {
	t.Helper()
	env := backend.NewEnvelope("conformance", []byte(c.Payload))
	env.ID, env.Headers = abitest.SDKJobID, c.Headers
	x := m.Run(context.Background(), &worker.Job{Envelope: env, Attempt: max(c.Attempt, 1), MaxAttempts: 5}, nil)
	if x.Ending() != c.Kind || x.Reason != c.Reason || string(x.Output) != c.Output {
		t.Errorf("%q: kind %s reason %q output %q; want %s %q %q", c.Payload, x.Ending(), x.Reason, x.Output, c.Kind, c.Reason, c.Output)
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
// same table: the results must be the table's, hence identical across languages.
func TestSDKConformance(t *testing.T) {
	t.Parallel()
	e := newEngine(t)
	for _, lang := range abitest.Languages {
		t.Run(lang, func(t *testing.T) {
			t.Parallel()
			m := loadModule(t, e, "conformance", guestModule(t, lang+"-conformance"), host.Manifest{MaxAttempts: 5})
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
				if x.Outcome == worker.Ack {
					for _, ch := range x.Children {
						children = append(children, abitest.Child{Queue: ch.Queue, Payload: string(ch.Payload), DelayMs: ch.Delay.Milliseconds()})
					}
				}
				if len(children) != len(c.Children) || (len(children) > 0 && children[1] != c.Children[1]) || (len(children) > 0 && children[0] != c.Children[0]) {
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
