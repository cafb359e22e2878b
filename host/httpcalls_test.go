package host_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/host"
	"github.com/wasmjobs/wasmjobs/internal/outbound"
	"github.com/wasmjobs/wasmjobs/worker"
)

// callLog records the calls an engine reports to Config.OnHTTPCall.
type callLog struct {
	mu    sync.Mutex
	calls []host.HTTPCall
}

func (l *callLog) add(c host.HTTPCall) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, c)
}

// all returns the calls reported since the last reset.
func (l *callLog) all() []host.HTTPCall {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.calls)
}

func (l *callLog) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = nil
}

// TestHTTPCallsReachTheResultAndOnHTTPCall: a job's requests travel into its result
// (worker.Result.Calls, the first MaxResultCalls, the rest counted) without their
// query string or headers (nor do the log lines of their failures hold it), and each is reported to Config.OnHTTPCall with its module,
// matching entry and outcome.
func TestHTTPCallsReachTheResultAndOnHTTPCall(t *testing.T) {
	t.Parallel()
	var calls callLog
	e := newEngineWith(t, host.Config{NoCache: true, HTTP: outbound.Options{Resolver: testResolver{}}, OnHTTPCall: calls.add})
	srv := newCountingServer(t, false, echoHandler)
	quick := newCountingServer(t, false, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) })
	entry := "http://localhost:" + srv.port
	get := loadFile(t, e, "abi/http_get", fmt.Sprintf("[http]\nallow = [%q]\n[http.headers.%q]\nAuthorization = \"Bearer host-secret\"\n", entry, entry))
	flood := loadFile(t, e, "hostile/http_flood", "[http]\nallow = [\"http://127.0.0.1:1-65535\"]\nmax_requests = 60\n")

	for _, tc := range []struct {
		name    string
		mod     *host.Module
		payload string
		calls   []worker.Call // durations not compared
		ncalls  int           // for calls nil: how many, each a GET of quick's / that ended in 204 or cancelled
		dropped int
		grant   string
		outcome string // the outcomes allowed, space-separated
		seen    int
	}{
		{"granted", get, entry + "/a/b?token=query-secret", []worker.Call{{Method: "GET", Target: entry, Path: "/a/b", Status: 203, Bytes: int64(len(bigBody))}},
			1, 0, entry, "2xx", 1},
		{"denied", get, "http://127.0.0.1:" + srv.port + "/x?key=query-secret", []worker.Call{{Method: "GET", Target: "http://127.0.0.1:" + srv.port, Path: "/x", Error: "denied"}},
			1, 0, "", "denied", 1},
		// The guest waits for the first head only: the job's end cancels the rest.
		{"past MaxResultCalls", flood, "o" + quick.URL + "/", nil, host.MaxResultCalls, 60 - host.MaxResultCalls, "http://127.0.0.1:1-65535", "2xx cancelled", 60},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls.reset()
			job := &worker.Job{Envelope: backend.NewEnvelope(tc.mod.Queue(), []byte(tc.payload)), Attempt: 1, MaxAttempts: 3}
			res := host.NewHandler(tc.mod, nil).Handle(context.Background(), job)
			if res.Outcome != worker.Ack || len(res.Calls) != tc.ncalls || res.CallsDropped != tc.dropped {
				t.Fatalf("%s %s: %d calls, %d dropped; want %d and %d: %+v", res.Outcome, res.Reason, len(res.Calls), res.CallsDropped, tc.ncalls, tc.dropped, res.Calls)
			}
			for i, c := range res.Calls {
				if c.Duration <= 0 {
					t.Errorf("call %d has no duration", i)
				}
				c.Duration = 0
				want := worker.Call{Method: "GET", Target: "http://127.0.0.1:" + quick.port, Path: "/", Status: 204}
				if c.Error == "cancelled" {
					want.Status, want.Error = 0, "cancelled"
				}
				if tc.calls != nil {
					want = tc.calls[i]
				}
				if c != want {
					t.Errorf("call %d: %+v, want %+v", i, c, want)
				}
				if strings.Contains(fmt.Sprintf("%+v", c), "secret") {
					t.Errorf("call %d holds a secret: %+v", i, c)
				}
			}
			for _, l := range res.Logs {
				if strings.Contains(l, "secret") {
					t.Errorf("a log line, kept in the job's record, holds the query: %s", l)
				}
			}
			seen := calls.all()
			if len(seen) != tc.seen {
				t.Fatalf("OnHTTPCall saw %d calls, want %d", len(seen), tc.seen)
			}
			for _, c := range seen {
				if c.Module != tc.mod.Name() || c.Grant != tc.grant || !slices.Contains(strings.Fields(tc.outcome), c.Outcome) || c.Duration <= 0 {
					t.Fatalf("OnHTTPCall got %+v, want module %s, grant %q, outcome %s", c, tc.mod.Name(), tc.grant, tc.outcome)
				}
			}
		})
	}
}

// TestJSSetupRequestsReachOnHTTPCall: a request a JS handler's bundle starts at its top
// level, while the VM is set up at load, is reported to Config.OnHTTPCall with its
// module, entry and outcome like a job's, not dropped with the setup's state.
func TestJSSetupRequestsReachOnHTTPCall(t *testing.T) {
	t.Parallel()
	var calls callLog
	e := newEngineWith(t, host.Config{NoCache: true, HTTP: outbound.Options{Resolver: testResolver{}}, OnHTTPCall: calls.add})
	srv := newCountingServer(t, false, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) })
	entry := "http://127.0.0.1:" + srv.port
	src := `fetch("` + srv.URL + `/warm"); fetch("http://127.0.0.2:1/denied").catch(() => {});
var __wasmjobs_handler = { default: async function (job) {} };`
	loadJS(t, e, src, fmt.Sprintf("[http]\nallow = [%q]\n", entry))
	seen := calls.all()
	if len(seen) != 2 {
		t.Fatalf("OnHTTPCall saw %d calls of the setup (%+v), want 2", len(seen), seen)
	}
	for i, want := range []struct{ grant, outcomes string }{{entry, "2xx cancelled"}, {"", "denied"}} {
		if c := seen[i]; c.Module != "js" || c.Grant != want.grant || !slices.Contains(strings.Fields(want.outcomes), c.Outcome) {
			t.Errorf("call %d: %+v, want module js, grant %q, outcome in %q", i, c, want.grant, want.outcomes)
		}
	}
}
