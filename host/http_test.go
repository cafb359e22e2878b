package host_test

import (
	"context"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/host"
	"github.com/wasmjobs/wasmjobs/internal/outbound"
	"github.com/wasmjobs/wasmjobs/internal/outbound/outboundtest"
	"github.com/wasmjobs/wasmjobs/internal/rigs/abitest"
	"github.com/wasmjobs/wasmjobs/internal/tools/jsbuild"
	"github.com/wasmjobs/wasmjobs/worker"
)

// testResolver resolves the names of the HTTP tests: localhost and api.test, both to
// 127.0.0.1.
type testResolver struct{}

func (testResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if host == "localhost" || host == "api.test" {
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func httpEngine(t *testing.T, roots *x509.CertPool) *host.Engine {
	t.Helper()
	return newEngineWith(t, host.Config{NoCache: true, HTTP: host.HTTPOptions{Resolver: testResolver{}, RootCAs: roots}})
}

var bigBody = strings.Repeat("0123456789", 250) // 2,500 bytes: three reads of 1,000

func echoHandler(w http.ResponseWriter, r *http.Request) {
	w.Header()["Date"] = nil
	w.Header().Set("Content-Type", "text/plain")
	w.Header().Add("X-Echo", strings.Join(r.Header.Values("X-Test"), ","))
	w.Header().Add("X-Multi", "1")
	w.Header().Add("X-Multi", "2")
	w.WriteHeader(203)
	fmt.Fprint(w, bigBody)
}

// TestHTTPGetThroughTheABI: a granted GET returns its status, headers (repeated names
// kept), final URL and body, read in pieces; refusals are statuses with a message,
// never traps, and the refused target receives nothing.
func TestHTTPGetThroughTheABI(t *testing.T) {
	t.Parallel()
	srv := outboundtest.NewServer(t, false, echoHandler)
	tlsSrv := outboundtest.NewServer(t, true, echoHandler)
	roots := x509.NewCertPool()
	roots.AddCert(tlsSrv.Certificate())
	e := httpEngine(t, roots)
	redirector := outboundtest.NewServer(t, false, func(w http.ResponseWriter, r *http.Request) {
		to := map[string]string{"/away": "http://127.0.0.1:" + srv.Port + "/", "/meta": "http://169.254.169.254/latest/meta-data/",
			"/ok": "http://localhost:" + srv.Port + "/landed"}[r.URL.Path]
		http.Redirect(w, r, to, http.StatusFound)
	})
	grant := fmt.Sprintf(`[http]
allow = ["http://localhost:%s", "http://localhost:%s", "http://api.test:%s", "https://127.0.0.1:%s"]
`, srv.Port, redirector.Port, srv.Port, tlsSrv.Port)
	m := loadFile(t, e, "abi/http_get", grant)
	ungranted := loadFile(t, e, "abi/http_get", "")
	headers := "Content-Type: text/plain\nX-Echo: a,b\nX-Multi: 1\nX-Multi: 2\n"
	for _, tc := range []struct {
		name   string
		mod    *host.Module
		url    string
		output string // prefix of the output
		target *outboundtest.Server
		hits   int64 // requests the target must receive
	}{
		{"granted", m, "http://localhost:" + srv.Port + "/a?b", "203\n" + headers + "url http://localhost:" + srv.Port + "/a?b\n" + bigBody, srv, 1},
		{"https with the test's root", m, "https://127.0.0.1:" + tlsSrv.Port + "/", "203\n" + headers + "url https://127.0.0.1:" + tlsSrv.Port + "/\n" + bigBody, tlsSrv, 1},
		{"redirect inside the grant", m, "http://localhost:" + redirector.Port + "/ok", "203\n" + headers + "url http://localhost:" + srv.Port + "/landed\n" + bigBody, srv, 1},
		{"no grant", ungranted, "http://localhost:" + srv.Port + "/", "start -4", srv, 0},
		{"ungranted host", m, "http://127.0.0.1:" + srv.Port + "/", "-10\ndenied: http://127.0.0.1:" + srv.Port + " is not granted", srv, 0},
		{"ungranted port", m, "http://localhost:1/", "-10\ndenied: http://localhost:1 is not granted", srv, 0},
		{"granted name resolving to 127.0.0.1", m, "http://api.test:" + srv.Port + "/", "-11\nblocked address: ", srv, 0},
		{"redirect to an ungranted host", m, "http://localhost:" + redirector.Port + "/away", "-10\ndenied: ", srv, 0},
		{"redirect to the metadata address", m, "http://localhost:" + redirector.Port + "/meta", "-10\ndenied: ", srv, 0},
		{"bad URL", m, "not a url", "start -2", srv, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.target.Hits.Load()
			x := run(tc.mod, tc.url)
			if x.Outcome != worker.Ack || !strings.HasPrefix(string(x.Output), tc.output) {
				t.Fatalf("kind %s %s, output\n%q\nwant prefix\n%q", x.Ending(), x.Reason, x.Output, tc.output)
			}
			if strings.HasPrefix(tc.output, "203") && len(x.Output) != len(tc.output) {
				t.Fatalf("output %q has more than %q", x.Output, tc.output)
			}
			if n := tc.target.Hits.Load() - before; n != tc.hits {
				t.Fatalf("the target received %d requests, want %d", n, tc.hits)
			}
			if tc.hits == 0 && tc.mod == m && (len(x.Logs) == 0 || !strings.HasPrefix(x.Logs[0].Msg, "http GET "+tc.url)) {
				t.Fatalf("logs %+v: want the refusal logged at the job", x.Logs)
			}
		})
	}
}

// hostileHTTP is a set of hostile loopback servers, each counting its requests and
// open connections: one that never answers, one that drips a byte a second, one that
// streams a 2 GiB body, a gzip bomb, and a quick one that answers 200 at once.
type hostileHTTP struct {
	never, drip, huge, bomb, quick *outboundtest.Server
	held                           *outboundtest.Server // never answers either: for the requests never closed
	hugeSent                       atomic.Int64         // the body bytes huge wrote, over all its requests
}

const twoGiB = 2 << 30

func newHostileHTTP(t testing.TB) *hostileHTTP {
	t.Helper()
	h := &hostileHTTP{}
	h.never = outboundtest.NewServer(t, false, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	h.held = outboundtest.NewServer(t, false, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	h.drip = outboundtest.NewServer(t, false, outboundtest.Drip)
	zeros := make([]byte, 64<<10) // read-only, shared by every request
	h.huge = outboundtest.NewServer(t, false, func(w http.ResponseWriter, r *http.Request) {
		// 2 GiB declared and streamed from one small buffer: the server never holds
		// the body, and stops when the client goes.
		w.Header().Set("Content-Length", strconv.Itoa(twoGiB))
		for sent := 0; sent < twoGiB; sent += len(zeros) {
			n, err := w.Write(zeros)
			h.hugeSent.Add(int64(n))
			if err != nil {
				return
			}
		}
	})
	h.bomb = outboundtest.NewServer(t, false, outboundtest.GzipBomb())
	h.quick = outboundtest.NewServer(t, false, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) })
	return h
}

// hostileHTTPCase is a run of a hostile guest, or of a guest against a hostile server,
// and what it must end in.
type hostileHTTPCase struct {
	name    string
	m       *host.Module
	payload string
	output  *regexp.Regexp // the whole output
	minDur  time.Duration  // the run lasts at least this (the grant's timeout)...
	maxDur  time.Duration  // ...and at most this
	srv     *outboundtest.Server
	// idle is how many connections may stay open at srv after the run: idle in the
	// client's pool, for reuse (Retire closes them). A dial a cancelled request started
	// still completes into the pool.
	idle int64
	// sent, when set, counts the bytes the server wrote; the run may add at most
	// maxSent to it.
	sent    *atomic.Int64
	maxSent int64
	// heavy marks a case that costs the race detector most of a second (gzip, or
	// hundreds of requests): the soak runs it every tenth round under -race.
	heavy bool
}

// hostileHTTPModules are the modules of the hostile HTTP cases, hostile/http_churn
// under grants of 127.0.0.1's every port, and their bounds.
type hostileHTTPModules struct {
	waiter, reader, churnM, leak *host.Module
	timeout                      time.Duration // the waiter's grant's
	maxResponse                  int64         // the reader's grant's
	churn                        int           // the churning module's max_requests
}

// loadHostileHTTP loads the modules of the hostile HTTP cases: the waiter, for the
// servers that never answer or drip, with the grant's timeout; the reader, for the
// big bodies, with max_response (0: the default) and the default timeout, which no
// body read to the cap comes near, however loaded the machine; the churn with
// max_requests = churn.
func loadHostileHTTP(t testing.TB, e *host.Engine, timeout time.Duration, maxResponse int64, churn int) hostileHTTPModules {
	t.Helper()
	allow := "[http]\nallow = [\"http://127.0.0.1:1-65535\"]\n"
	if maxResponse == 0 {
		maxResponse = outbound.DefaultMaxResponse
	}
	return hostileHTTPModules{timeout: timeout, maxResponse: maxResponse, churn: churn,
		// The waiter's timeouts are what its cases are about: its breakers open only
		// after the most consecutive failures a grant may set (the soak's rounds give
		// one destination far fewer), so that no round finds a circuit open.
		waiter: loadFile(t, e, "hostile/http_churn", fmt.Sprintf("%stimeout = \"%s\"\nbreaker_failures = 1000\n", allow, timeout)),
		reader: loadFile(t, e, "hostile/http_churn", fmt.Sprintf("%smax_response = %d\n", allow, maxResponse)),
		churnM: loadFile(t, e, "hostile/http_churn", fmt.Sprintf("%smax_requests = %d\n", allow, churn)),
		leak:   loadFile(t, e, "hostile/http_churn", allow),
	}
}

func (m hostileHTTPModules) retire() {
	for _, m := range []*host.Module{m.waiter, m.reader, m.churnM, m.leak} {
		m.Retire()
	}
}

// allClosed waits until no connection is open at any server of h.
func (h *hostileHTTP) allClosed() error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		open := map[string]int64{}
		for name, s := range map[string]*outboundtest.Server{"never": h.never, "drip": h.drip, "huge": h.huge, "bomb": h.bomb, "quick": h.quick, "held": h.held} {
			if n := s.Conns.Load(); n > 0 {
				open[name] = n
			}
		}
		if len(open) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("connections still open at the servers: %v", open)
		}
		time.Sleep(time.Millisecond)
	}
}

// hostileHTTPCases are the cases of m against the servers of h.
func hostileHTTPCases(h *hostileHTTP, m hostileHTTPModules) []hostileHTTPCase {
	const slack = 5 * time.Second // a loaded machine, -race
	timeout, churn := m.timeout, m.churn
	cut := regexp.MustCompile(fmt.Sprintf(`^200 %d -16$`, m.maxResponse))
	// The drip's head and first byte come at once, then a byte a second; a timeout
	// under a second may pass before the head, or the first read, on a loaded machine.
	drip := fmt.Sprintf(`200 [1-%d] `, min(9, 2+int(timeout/time.Second)))
	if timeout < time.Second {
		drip = "(200 [0-2] )?"
	}
	return []hostileHTTPCase{
		// A dial that the timeout cut short still completes into the pool, where the
		// next run takes it: one idle connection may stay.
		{name: "never answers", m: m.waiter, payload: "r" + h.never.URL + "/", output: regexp.MustCompile(`^-15$`),
			minDur: timeout, maxDur: timeout + slack, srv: h.never, idle: 1},
		{name: "drips a byte a second", m: m.waiter, payload: "r" + h.drip.URL + "/",
			output: regexp.MustCompile(`^` + drip + `-15$`),
			minDur: timeout, maxDur: timeout + slack, srv: h.drip, idle: 1},
		{name: "2 GiB body", m: m.reader, payload: "r" + h.huge.URL + "/", output: cut,
			maxDur: slack, srv: h.huge,
			// Cut at max_response: the server wrote what the guest read and what the
			// sockets' buffers took (loopback's receive buffer grows to tcp_rmem's
			// maximum, 32 MiB on recent kernels), never the 2 GiB.
			sent: &h.hugeSent, maxSent: m.maxResponse + 64<<20},
		{name: "gzip bomb", m: m.reader, payload: "r" + h.bomb.URL + "/", output: cut,
			maxDur: slack, srv: h.bomb, heavy: true},
		{name: fmt.Sprintf("%d requests from one job", churn), m: m.churnM, payload: "c" + h.quick.URL + "/",
			output: regexp.MustCompile(fmt.Sprintf(`^%d %d -17$`, churn, churn)), srv: h.quick, idle: 1, heavy: true},
		{name: "requests never closed", m: m.leak, payload: "n" + h.held.URL + "/",
			output: regexp.MustCompile(fmt.Sprintf(`^%d -17$`, outbound.DefaultMaxRequests)), maxDur: slack, srv: h.held,
			idle: maxIdlePerHost},
	}
}

// maxIdlePerHost is the bound of the client's pool of idle connections to one host.
const maxIdlePerHost = 64

// run runs the case and checks how it ended, then that no request is left running at
// the server and at most c.idle connections open.
func (c hostileHTTPCase) run() error {
	var sent0 int64
	if c.sent != nil {
		sent0 = c.sent.Load()
	}
	x := run(c.m, c.payload)
	if x.Outcome != worker.Ack || !c.output.MatchString(string(x.Output)) {
		return fmt.Errorf("%s: %s %s, output %q, want %v; logs %+v", c.name, x.Ending(), x.Reason, x.Output, c.output, x.Logs)
	}
	if x.Duration < c.minDur || c.maxDur > 0 && x.Duration > c.maxDur {
		return fmt.Errorf("%s: took %v, want %v to %v", c.name, x.Duration, c.minDur, c.maxDur)
	}
	deadline := time.Now().Add(5 * time.Second)
	for c.srv.Conns.Load() > c.idle || c.srv.Ended.Load() < c.srv.Hits.Load() {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %d connections still open at the server (want at most %d), %d of its %d requests running",
				c.name, c.srv.Conns.Load(), c.idle, c.srv.Hits.Load()-c.srv.Ended.Load(), c.srv.Hits.Load())
		}
		time.Sleep(time.Millisecond)
	}
	if c.sent != nil {
		// Read after the server's handler returned: it wrote all it will.
		if n := c.sent.Load() - sent0; n > c.maxSent {
			return fmt.Errorf("%s: the server wrote %d MiB, more than %d MiB", c.name, n>>20, c.maxSent>>20)
		}
	}
	return nil
}

// TestHTTPHostileServersAndGuests: each ends in its documented status within the
// job's bounds, and leaves no request or connection open (goleak in TestMain checks
// goroutines; each server counts its connections).
func TestHTTPHostileServersAndGuests(t *testing.T) {
	t.Parallel()
	e := httpEngine(t, nil)
	h := newHostileHTTP(t)
	const timeout = 1500 * time.Millisecond
	mods := loadHostileHTTP(t, e, timeout, 0, outbound.MaxRequestsLimit)
	for _, c := range hostileHTTPCases(h, mods) {
		t.Run(c.name, func(t *testing.T) {
			heap0, rss0 := heapMiB(), rssKiB()
			if err := c.run(); err != nil {
				t.Fatal(err)
			}
			heap1, rss1 := heapMiB(), rssKiB()
			t.Logf("heap %.1f -> %.1f MiB, RSS %d -> %d MiB", heap0, heap1, rss0>>10, rss1>>10)
			// Parallel tests share the process: the bound catches a body held whole
			// (2 GiB), not a few MiB of another test.
			if rss1-rss0 > 1<<20 {
				t.Fatalf("RSS grew by %d MiB", (rss1-rss0)>>10)
			}
		})
	}
	// Retired, the modules' clients close the connections left idle for reuse.
	mods.retire()
	if err := h.allClosed(); err != nil {
		t.Fatal(err)
	}

	never, quick := h.never, h.quick
	grant := `[http]
allow = ["http://127.0.0.1:1-65535"]
max_requests = 3
max_response = "4KiB"
timeout = "2s"
`
	get := loadFile(t, e, "abi/http_get", grant)
	flood := loadFile(t, e, "hostile/http_flood", grant)
	hang := loadFile(t, e, "hostile/http_flood", "timeout = \"300ms\"\n[http]\nallow = [\"http://127.0.0.1:1-65535\"]\n")

	t.Run("never answers, through http_get", func(t *testing.T) {
		x := run(get, never.URL+"/")
		if x.Outcome != worker.Ack || !strings.HasPrefix(string(x.Output), "-15\ntimeout: ") {
			t.Fatalf("%s %s %q", x.Ending(), x.Reason, x.Output)
		}
	})
	t.Run("huge body, through http_get", func(t *testing.T) {
		x := run(get, h.huge.URL+"/")
		out := string(x.Output)
		body, _ := strings.CutPrefix(out[strings.Index(out, "url "):], "url "+h.huge.URL+"/\n")
		if x.Outcome != worker.Ack || !strings.HasPrefix(out, "200\n") || body != strings.Repeat("\x00", 4096)+"\nbody -16" {
			t.Fatalf("%s %s: output %d bytes ending %q", x.Ending(), x.Reason, len(out), out[max(0, len(out)-20):])
		}
	})
	t.Run("too many requests, never closed", func(t *testing.T) {
		before, hits := never.Ended.Load(), never.Hits.Load()
		x := run(flood, "o"+never.URL+"/")
		if x.Outcome != worker.Ack || string(x.Output) != "3 -17" {
			t.Fatalf("%s %s %q", x.Ending(), x.Reason, x.Output)
		}
		// The guest waits 1 s for a head, so its requests mostly reach the server
		// first; on a loaded machine one may still be connecting when the job ends.
		// None is ever past max_requests, and each that arrived ends with the job.
		n := never.Hits.Load() - hits
		if n > 3 {
			t.Fatalf("the server received %d requests, want at most 3", n)
		}
		deadline := time.Now().Add(5 * time.Second)
		for never.Ended.Load()-before < n {
			if time.Now().After(deadline) {
				t.Fatalf("%d of the job's %d requests that arrived ended at the server", never.Ended.Load()-before, n)
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
	t.Run("two at once", func(t *testing.T) {
		x := run(flood, "w"+quick.URL+"/")
		if x.Outcome != worker.Ack || (string(x.Output) != "0 200 200" && string(x.Output) != "1 200 200") {
			t.Fatalf("%s %s %q", x.Ending(), x.Reason, x.Output)
		}
	})
	t.Run("poll", func(t *testing.T) {
		if x := run(flood, "p"+never.URL+"/"); x.Outcome != worker.Ack || string(x.Output) != "-1" {
			t.Fatalf("%s %s %q", x.Ending(), x.Reason, x.Output)
		}
	})
	t.Run("a denial the guest never reads is logged", func(t *testing.T) {
		x := run(flood, "phttps://127.0.0.1:1/")
		if x.Outcome != worker.Ack || len(x.Logs) == 0 || !strings.Contains(x.Logs[0].Msg, "denied: https://127.0.0.1:1 is not granted") {
			t.Fatalf("%s %s %q, logs %+v: want the denial logged", x.Ending(), x.Reason, x.Output, x.Logs)
		}
	})
	t.Run("a wait list longer than max_requests", func(t *testing.T) {
		if x := run(flood, "l"+never.URL+"/"); x.Outcome != worker.Ack || string(x.Output) != "-2" {
			t.Fatalf("%s %s %q, want -2", x.Ending(), x.Reason, x.Output)
		}
	})
	t.Run("a hanging request ends at the job's deadline", func(t *testing.T) {
		x := run(hang, "h"+never.URL+"/")
		if x.Cause != host.CauseTimeout || x.Duration > 3*time.Second {
			t.Fatalf("%s %s after %v", x.Ending(), x.Reason, x.Duration)
		}
	})
}

// TestJSHandlerRequestsEndWithTheirCall: a JS module (here a stand-in for the engine
// that imports http_start) has its requests closed when its VM's setup ends and when
// each job ends, as an ABI v1 module's are: none holds a connection, or a slot of
// [http.limits], past its call.
func TestJSHandlerRequestsEndWithTheirCall(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	never := outboundtest.NewServer(t, false, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200) // the head; the body never comes
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	t.Cleanup(func() { close(release) }) // before the server's Close, if the requests leaked
	e := httpEngine(t, nil)
	wasm := mustRead(t, filepath.Join(abitest.Dir(), "hostile", "js_http_leak.wasm"))
	man, err := host.ParseManifest("js.toml", []byte(fmt.Sprintf("timeout = \"2s\"\n[http]\nallow = [\"http://127.0.0.1:%s\"]\ntimeout = \"1h\"\n", never.Port)))
	if err != nil {
		t.Fatal(err)
	}
	m, err := e.Load(context.Background(), "jsleak", jsbuild.Module(wasm, []byte(never.URL+"/")), man)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Retire)
	x := run(m, "")
	if x.Cause != host.CauseTrap {
		t.Fatalf("%s %s, want the stand-in's trap (it never settles)", x.Ending(), x.Reason)
	}
	// Load's VM setup started one request (its instance then ran the job), the job
	// one; each waited for its head.
	if n := never.Hits.Load(); n != 2 {
		t.Fatalf("the server received %d requests, want 2", n)
	}
	deadline := time.Now().Add(5 * time.Second)
	for never.Ended.Load() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d requests ended at the server after their calls ended", never.Ended.Load(), never.Hits.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestHTTPLimitsOutliveAReload: [http.limits] bound the module on this host, not one
// loaded version of it: a reload (or a canary beside the current version) takes from
// the same bucket.
func TestHTTPLimitsOutliveAReload(t *testing.T) {
	t.Parallel()
	srv := outboundtest.NewServer(t, false, echoHandler)
	e := httpEngine(t, nil)
	grant := fmt.Sprintf("[http]\nallow = [\"http://localhost:%s\"]\ntimeout = \"300ms\"\n[http.limits.\"http://localhost:%s\"]\nrate = \"1/h\"\n", srv.Port, srv.Port)
	first := loadFile(t, e, "abi/http_get", grant)
	if x := run(first, "http://localhost:"+srv.Port+"/"); !strings.HasPrefix(string(x.Output), "203\n") {
		t.Fatalf("the first request: %s %s %q", x.Ending(), x.Reason, x.Output)
	}
	reloaded := loadFile(t, e, "abi/http_get", grant)
	if x := run(reloaded, "http://localhost:"+srv.Port+"/"); !strings.HasPrefix(string(x.Output), "-18\n") {
		t.Fatalf("after a reload: %s %s %q, want -18 (the bucket is empty)", x.Ending(), x.Reason, x.Output)
	}
	if n := srv.Hits.Load(); n != 1 {
		t.Fatalf("the server received %d requests, want 1", n)
	}
}

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
	e := newEngineWith(t, host.Config{NoCache: true, HTTP: host.HTTPOptions{Resolver: testResolver{}}, OnHTTPCall: calls.add})
	srv := outboundtest.NewServer(t, false, echoHandler)
	quick := outboundtest.NewServer(t, false, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) })
	entry := "http://localhost:" + srv.Port
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
		{"denied", get, "http://127.0.0.1:" + srv.Port + "/x?key=query-secret", []worker.Call{{Method: "GET", Target: "http://127.0.0.1:" + srv.Port, Path: "/x", Error: "denied"}},
			1, 0, "", "denied", 1},
		// The guest waits for the first head only: the job's end cancels the rest.
		{"past MaxResultCalls", flood, "o" + quick.URL + "/", nil, host.MaxResultCalls, 60 - host.MaxResultCalls, "http://127.0.0.1:1-65535", "2xx cancelled", 60},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls.reset()
			res := host.NewHandler(tc.mod, nil).Handle(context.Background(), jobOf(tc.mod, tc.payload))
			if res.Outcome != worker.Ack || len(res.Calls) != tc.ncalls || res.CallsDropped != tc.dropped {
				t.Fatalf("%s %s: %d calls, %d dropped; want %d and %d: %+v", res.Outcome, res.Reason, len(res.Calls), res.CallsDropped, tc.ncalls, tc.dropped, res.Calls)
			}
			for i, c := range res.Calls {
				if c.Duration <= 0 {
					t.Errorf("call %d has no duration", i)
				}
				c.Duration = 0
				want := worker.Call{Method: "GET", Target: "http://127.0.0.1:" + quick.Port, Path: "/", Status: 204}
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
	e := newEngineWith(t, host.Config{NoCache: true, HTTP: host.HTTPOptions{Resolver: testResolver{}}, OnHTTPCall: calls.add})
	srv := outboundtest.NewServer(t, false, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) })
	entry := "http://127.0.0.1:" + srv.Port
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
