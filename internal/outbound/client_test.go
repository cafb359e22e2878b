package outbound_test

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/wasmjobs/wasmjobs/internal/outbound"
	"github.com/wasmjobs/wasmjobs/internal/outbound/outboundtest"
)

// TestMain fails the package if a request's goroutine, or a connection's, outlives
// its test.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func ok(w http.ResponseWriter, r *http.Request) {
	w.Header().Add("X-Multi", "a")
	w.Header().Add("X-Multi", "b")
	w.WriteHeader(201)
	fmt.Fprintf(w, "hello %s %s auth=%q", r.Method, r.URL.Path, r.Header.Get("Authorization"))
}

// resolver resolves names from a map; anything else fails.
type resolver map[string]string

func (r resolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	a, ok := r[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return []netip.Addr{netip.MustParseAddr(a)}, nil
}

// session parses text's [http] table (PORT, A and B replaced) and returns a session of
// a new client, both closed with the test.
func session(t *testing.T, text string, opts outbound.Options, repl ...string) *outbound.Session {
	t.Helper()
	g, err := parse(t, strings.NewReplacer(repl...).Replace(text), nil)
	if err != nil {
		t.Fatal(err)
	}
	if opts.Resolver == nil {
		opts.Resolver = resolver{"localhost": "127.0.0.1"}
	}
	c := outbound.NewClient(g, opts)
	s := c.NewSession()
	t.Cleanup(func() { s.Close(); c.Close() })
	return s
}

// limitedSession is a session allowed srv alone, its [http.limits] entry holding the
// TOML lines limits, and a request timeout unless timeout is empty.
func limitedSession(t *testing.T, srv *outboundtest.Server, timeout string, limits ...string) *outbound.Session {
	t.Helper()
	text := "[http]\nallow = [\"http://127.0.0.1:P\"]\n"
	if timeout != "" {
		text += fmt.Sprintf("timeout = %q\n", timeout)
	}
	text += "[http.limits.\"http://127.0.0.1:P\"]\n" + strings.Join(limits, "\n") + "\n"
	return session(t, text, outbound.Options{}, "P", srv.Port)
}

// callUnderDeadline starts a GET of srv for a job whose deadline is d away, under a
// grant whose own timeout is an hour: only the job's deadline can end the call in time.
// It returns the call and the job's context.
func callUnderDeadline(t *testing.T, srv *outboundtest.Server, d time.Duration) (*outbound.Call, context.Context) {
	t.Helper()
	s := session(t, "[http]\nallow = [\"http://127.0.0.1:P\"]\ntimeout = \"1h\"\n", outbound.Options{}, "P", srv.Port)
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	c, err := s.Start(ctx, outbound.Request{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	return c, ctx
}

// startCalls starts n GET requests of url on s.
func startCalls(t *testing.T, s *outbound.Session, url string, n int) []*outbound.Call {
	t.Helper()
	var calls []*outbound.Call
	for range n {
		c, err := s.Start(context.Background(), outbound.Request{URL: url})
		if err != nil {
			t.Fatal(err)
		}
		calls = append(calls, c)
	}
	return calls
}

// do runs one request to its head and reads the whole body.
func do(t *testing.T, s *outbound.Session, method, url string, h http.Header) (*http.Response, string, error) {
	t.Helper()
	return doCtx(t, context.Background(), s, method, url, h)
}

// doCtx is do under ctx, the job's.
func doCtx(t *testing.T, ctx context.Context, s *outbound.Session, method, url string, h http.Header) (*http.Response, string, error) {
	t.Helper()
	c, err := s.Start(ctx, outbound.Request{Method: method, URL: url, Header: h})
	if err != nil {
		return nil, "", err
	}
	defer c.Close()
	resp, herr := c.Head(ctx)
	if herr != nil {
		return nil, "", herr
	}
	var body []byte
	// A first read of 7 bytes shows a body read in pieces; then 32 KiB at a time,
	// so that a megabyte is read in a few dozen calls even on a loaded machine.
	buf := make([]byte, 7)
	for {
		n, err := c.Read(ctx, buf)
		body = append(body, buf[:n]...)
		if len(buf) == 7 {
			buf = make([]byte, 32<<10)
		}
		if err == io.EOF {
			return resp, string(body), nil
		}
		if err != nil {
			return resp, string(body), err
		}
	}
}

func TestGrantedLoopbackCalls(t *testing.T) {
	t.Parallel()
	srv := outboundtest.NewServer(t, false, ok)
	for _, allow := range []string{`"http://127.0.0.1:PORT"`, `"http://127.0.0.0/8:PORT"`, `"http://localhost:PORT"`, `"http://127.0.0.1:1-65535"`} {
		t.Run(allow, func(t *testing.T) {
			s := session(t, "[http]\nallow = ["+allow+"]\n", outbound.Options{}, "PORT", srv.Port)
			host := "127.0.0.1"
			if strings.Contains(allow, "localhost") {
				host = "localhost"
			}
			resp, body, err := do(t, s, "POST", "http://"+host+":"+srv.Port+"/x", nil)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != 201 || body != `hello POST /x auth=""` || strings.Join(resp.Header.Values("X-Multi"), ",") != "a,b" {
				t.Fatalf("status %d body %q headers %v", resp.StatusCode, body, resp.Header)
			}
		})
	}
}

func TestRefusedRequestsReachNothing(t *testing.T) {
	t.Parallel()
	target := outboundtest.NewServer(t, false, ok) // counts what reaches it: nothing may
	redirect := func(to string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, to, http.StatusFound) }
	}
	tp := target.Port
	for _, tc := range []struct {
		name, allow, url string
		redirectTo       string // a redirector at the URL sends here
		kind             outbound.Kind
	}{
		{"ungranted host", `"http://localhost:T"`, "http://127.0.0.1:T/", "", outbound.KindDenied},
		{"ungranted port", `"http://127.0.0.1:1"`, "http://127.0.0.1:T/", "", outbound.KindDenied},
		{"ungranted scheme", `"https://127.0.0.1:T"`, "http://127.0.0.1:T/", "", outbound.KindDenied},
		{"granted name resolving to 127.0.0.1", `"http://api.test:T"`, "http://api.test:T/", "", outbound.KindBlocked},
		{"IPv4-mapped loopback under *", `"http://*:T"`, "http://[::ffff:127.0.0.1]:T/", "", outbound.KindBlocked},
		{"loopback literal under *", `"http://*:T"`, "http://127.0.0.1:T/", "", outbound.KindBlocked},
		{"redirect to an ungranted host", `"http://localhost:R"`, "http://localhost:R/", "http://127.0.0.1:T/", outbound.KindDenied},
		{"redirect to the metadata address", `"http://localhost:R"`, "http://localhost:R/", "http://169.254.169.254/latest/meta-data/", outbound.KindDenied},
		// Under a name grant (*), a hop to a loopback literal or a name that resolves
		// to loopback goes through the strict dialer, though the redirector is reached
		// through the localhost one.
		{"redirect to 127.0.0.1 under *", `"http://localhost:R", "http://*:1-65535"`, "http://localhost:R/", "http://127.0.0.1:T/", outbound.KindBlocked},
		{"redirect to the metadata address under *", `"http://localhost:R", "http://*:1-65535"`, "http://localhost:R/", "http://169.254.169.254/", outbound.KindBlocked},
		{"redirect to a name resolving to 127.0.0.1", `"http://localhost:R", "http://api.test:T"`, "http://localhost:R/", "http://api.test:T/", outbound.KindBlocked},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rp := "0"
			if tc.redirectTo != "" {
				rp = outboundtest.NewServer(t, false, redirect(strings.ReplaceAll(tc.redirectTo, ":T", ":"+tp))).Port
			}
			repl := []string{"R", rp, "T", tp}
			s := session(t, "[http]\nallow = ["+strings.NewReplacer(repl...).Replace(tc.allow)+"]\n",
				outbound.Options{Resolver: resolver{"localhost": "127.0.0.1", "api.test": "127.0.0.1"}})
			before := target.Hits.Load()
			_, _, err := do(t, s, "GET", strings.NewReplacer(":T", ":"+tp, ":R", ":"+rp).Replace(tc.url), nil)
			if !isKind(err, tc.kind) {
				t.Fatalf("err %v, want %s", err, tc.kind)
			}
			if n := target.Hits.Load() - before; n != 0 {
				t.Fatalf("the target received %d requests", n)
			}
		})
	}
}

func TestHTTPSWithTheTestRoot(t *testing.T) {
	t.Parallel()
	srv := httptest.NewTLSServer(http.HandlerFunc(ok))
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	url := "https://127.0.0.1:" + port + "/s"
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	s := session(t, "[http]\nallow = [\"https://127.0.0.1:P\"]\n", outbound.Options{RootCAs: roots}, "P", port)
	if resp, body, err := do(t, s, "GET", url, nil); err != nil || resp.StatusCode != 201 || body != `hello GET /s auth=""` {
		t.Fatalf("%v %q %v", resp, body, err)
	}
	// Without the test's root the handshake fails, as a TLS error.
	s = session(t, "[http]\nallow = [\"https://127.0.0.1:P\"]\n", outbound.Options{}, "P", port)
	if _, _, err := do(t, s, "GET", url, nil); !isKind(err, outbound.KindTLS) {
		t.Fatalf("err %v, want a TLS failure", err)
	}
}

func TestHostHeadersGoOnlyToTheirEntry(t *testing.T) {
	t.Parallel()
	other := outboundtest.NewServer(t, false, ok)
	api := outboundtest.NewServer(t, false, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/away" {
			http.Redirect(w, r, "http://localhost:"+other.Port+"/landed", http.StatusFound)
			return
		}
		ok(w, r)
	})
	s := session(t, `[http]
allow = ["http://127.0.0.1:PA", "http://localhost:PO"]
[http.headers."http://127.0.0.1:PA"]
Authorization = "Bearer k"
`, outbound.Options{}, "PA", api.Port, "PO", other.Port)
	if _, body, err := do(t, s, "GET", "http://127.0.0.1:"+api.Port+"/", http.Header{"Authorization": {"guest's"}}); err != nil || body != `hello GET / auth="Bearer k"` {
		t.Fatalf("%q %v", body, err)
	}
	if _, body, err := do(t, s, "GET", "http://127.0.0.1:"+api.Port+"/away", nil); err != nil || body != `hello GET /landed auth=""` {
		t.Fatalf("after a redirect to another entry: %q %v", body, err)
	}
}

func TestBadRequestsAreRefusedBeforeSending(t *testing.T) {
	t.Parallel()
	srv := outboundtest.NewServer(t, false, ok)
	s := session(t, "[http]\nallow = [\"http://127.0.0.1:P\"]\n", outbound.Options{}, "P", srv.Port)
	u := "http://127.0.0.1:" + srv.Port + "/"
	for _, req := range []outbound.Request{
		{Method: "GET", URL: u, Header: http.Header{"X": {"a\r\nEvil: 1"}}},
		{Method: "GET", URL: u, Header: http.Header{"X\nY": {"1"}}},
		{Method: "GE T", URL: u},
		{Method: "TRACE", URL: u}, // echoes the host's headers back
		{Method: "track", URL: u},
		{Method: "CONNECT", URL: u},
		{Method: "GET", URL: "/relative"},
	} {
		if _, err := s.Start(context.Background(), req); !isKind(err, outbound.KindBadRequest) {
			t.Errorf("%+v: %v, want a bad request", req, err)
		}
	}
	if srv.Hits.Load() != 0 {
		t.Fatalf("the server received %d requests", srv.Hits.Load())
	}
}

func TestHostileServers(t *testing.T) {
	t.Parallel()
	never := outboundtest.NewServer(t, false, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	drip := outboundtest.NewServer(t, false, outboundtest.Drip)
	huge := outboundtest.NewServer(t, false, func(w http.ResponseWriter, r *http.Request) {
		buf := make([]byte, 64<<10)
		for r.Context().Err() == nil {
			if _, err := w.Write(buf); err != nil {
				return
			}
		}
	})
	bomb := outboundtest.NewServer(t, false, outboundtest.GzipBomb())
	bigHead := outboundtest.NewServer(t, false, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Big", strings.Repeat("x", 2<<20))
		w.WriteHeader(200)
	})
	grant := `[http]
allow = ["http://127.0.0.1:1-65535"]
timeout = "6s"
max_response = "1MiB"
`
	for _, tc := range []struct {
		name   string
		srv    *outboundtest.Server
		kind   outbound.Kind
		inHead bool // the failure comes before the head
		min    int  // body bytes read at least
	}{
		{"never answers", never, outbound.KindTimeout, true, 0},
		{"drips a byte a second", drip, outbound.KindTimeout, false, 1},
		{"huge body", huge, outbound.KindTooLarge, false, 1 << 20},
		{"gzip bomb", bomb, outbound.KindTooLarge, false, 1 << 20},
		{"a 2 MiB head", bigHead, outbound.KindConnection, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := session(t, grant, outbound.Options{})
			start := time.Now()
			resp, body, err := do(t, s, "GET", tc.srv.URL+"/", nil)
			if !isKind(err, tc.kind) || (resp == nil) != tc.inHead || len(body) < tc.min || len(body) > 1<<20 {
				t.Fatalf("err %v, head %v, %d body bytes; want %s", err, resp != nil, len(body), tc.kind)
			}
			if d := time.Since(start); d > 15*time.Second {
				t.Fatalf("took %v", d)
			}
		})
	}
}

func TestJobDeadlineBoundsTheRequest(t *testing.T) {
	t.Parallel()
	never := outboundtest.NewServer(t, false, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	c, _ := callUnderDeadline(t, never, 200*time.Millisecond)
	start := time.Now()
	if _, err := c.Head(context.Background()); !isKind(err, outbound.KindTimeout) {
		t.Fatalf("err %v, want a timeout", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("ended after %v, not at the job's deadline", d)
	}
}

func TestSessionLimitsAndClose(t *testing.T) {
	t.Parallel()
	var arrived atomic.Int64
	release := make(chan struct{})
	srv := outboundtest.NewServer(t, false, func(w http.ResponseWriter, r *http.Request) {
		arrived.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		ok(w, r)
	})
	s := session(t, "[http]\nallow = [\"http://127.0.0.1:P\"]\nmax_requests = 3\n", outbound.Options{}, "P", srv.Port)
	ctx := context.Background()
	calls := startCalls(t, s, srv.URL, 3)
	if _, err := s.Start(ctx, outbound.Request{URL: srv.URL}); !isKind(err, outbound.KindTooManyRequests) {
		t.Fatalf("the 4th request: %v, want too many requests", err)
	}
	// All three are in flight at once: the server holds each until all arrived.
	for arrived.Load() < 3 {
		time.Sleep(5 * time.Millisecond)
	}
	if i := outbound.Wait(ctx, calls, 20*time.Millisecond); i != -1 {
		t.Fatalf("Wait returned %d before any head was in", i)
	}
	close(release)
	if i := outbound.Wait(ctx, calls, -1); i < 0 {
		t.Fatalf("Wait returned %d", i)
	}
	calls[0].Close()
	if s.Open() != 2 {
		t.Fatalf("%d open, want 2", s.Open())
	}
	// The other two are never closed by the guest: the session's end closes them.
	s.Close()
	if s.Open() != 0 {
		t.Fatalf("%d open after Close", s.Open())
	}
	if _, err := s.Start(ctx, outbound.Request{URL: srv.URL}); err == nil {
		t.Fatal("a closed session started a request")
	}
}

func TestRequestsLeftOpenAreClosedWithTheSession(t *testing.T) {
	t.Parallel()
	never := outboundtest.NewServer(t, false, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	s := session(t, "[http]\nallow = [\"http://127.0.0.1:P\"]\n", outbound.Options{}, "P", never.Port)
	for range 5 {
		if _, err := s.Start(context.Background(), outbound.Request{URL: never.URL}); err != nil {
			t.Fatal(err)
		}
	}
	for never.Hits.Load() < 5 {
		time.Sleep(5 * time.Millisecond)
	}
	done := make(chan struct{})
	go func() { s.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end the requests")
	}
}

// TestWaitOnAListThatRepeatsACall: a guest may name one request many times in
// http_wait's list; it is waited on once (reflect.Select takes at most 65536 cases).
func TestWaitOnAListThatRepeatsACall(t *testing.T) {
	t.Parallel()
	never := outboundtest.NewServer(t, false, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	s := session(t, "[http]\nallow = [\"http://127.0.0.1:P\"]\n", outbound.Options{}, "P", never.Port)
	c, err := s.Start(context.Background(), outbound.Request{URL: never.URL})
	if err != nil {
		t.Fatal(err)
	}
	list := make([]*outbound.Call, 70_000)
	for i := range list {
		list[i] = c
	}
	if i := outbound.Wait(context.Background(), list, 10*time.Millisecond); i != -1 {
		t.Fatalf("Wait returned %d, want -1", i)
	}
}

// TestEntryLimits: [http.limits] holds an entry's requests to its rate and
// concurrency; a wait that would pass the request's deadline fails as rate limited,
// and the server never sees that request.
func TestEntryLimits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("rate", func(t *testing.T) {
		t.Parallel()
		srv := outboundtest.NewServer(t, false, ok)
		// 1 a second, burst 1: the first goes at once, the second after 1 s, the
		// third would wait 2 s, past its 1.5 s timeout: half a second of slack on
		// either side for a loaded machine.
		s := limitedSession(t, srv, "1500ms", `rate = "1/s"`)
		calls := startCalls(t, s, srv.URL, 3)
		kinds := map[outbound.Kind]int{}
		var limited *outbound.Error
		for _, c := range calls {
			_, err := c.Head(ctx)
			if err != nil {
				kinds[err.Kind]++
				limited = err
			} else {
				kinds[0]++
			}
			c.Close()
		}
		if kinds[0] != 2 || kinds[outbound.KindRateLimited] != 1 || srv.Hits.Load() != 2 {
			t.Fatalf("outcomes %v, %d hits; want 2 answered, 1 rate limited, 2 hits", kinds, srv.Hits.Load())
		}
		// The refusal says when the next token comes (within the next second, the
		// rate's), and the session keeps it for the host's defer.
		if until := time.Until(limited.Until); until <= 0 || until > 1100*time.Millisecond {
			t.Fatalf("rate limited until %v from now, want within the next second", until)
		}
		if until, ok := s.RateLimited(); !ok || !until.Equal(limited.Until) {
			t.Fatalf("RateLimited() = %v, %v; want %v, true", until, ok, limited.Until)
		}
	})
	t.Run("held back requests are given spaced slots", func(t *testing.T) {
		t.Parallel()
		srv := outboundtest.NewServer(t, false, ok)
		// 1 a minute: the first goes, the next five would wait past their timeout.
		// Each is told its own slot, a minute after the one before, so that the jobs
		// deferred to them do not all wake at once for the one token.
		s := limitedSession(t, srv, "100ms", `rate = "1/m"`)
		if _, _, err := do(t, s, "GET", srv.URL, nil); err != nil {
			t.Fatal(err)
		}
		var untils []time.Time
		for range 5 {
			_, _, err := do(t, s, "GET", srv.URL, nil)
			var e *outbound.Error
			if !errors.As(err, &e) || e.Kind != outbound.KindRateLimited {
				t.Fatalf("%v, want rate limited", err)
			}
			untils = append(untils, e.Until)
		}
		if d := time.Until(untils[0]); d <= 58*time.Second || d > time.Minute {
			t.Fatalf("the first held back request is told %v from now, want the next token's (about a minute)", d)
		}
		for i := 1; i < len(untils); i++ {
			if d := untils[i].Sub(untils[i-1]); d != time.Minute {
				t.Fatalf("slots %v: %d and %d are %v apart, want 1m (the rate's)", untils, i-1, i, d)
			}
		}
		if until, ok := s.RateLimited(); !ok || !until.Equal(untils[4]) {
			t.Fatalf("RateLimited() = %v, %v; want the latest slot %v", until, ok, untils[4])
		}
	})
	t.Run("an aborted wait is no limit", func(t *testing.T) {
		t.Parallel()
		srv := outboundtest.NewServer(t, false, ok)
		s := limitedSession(t, srv, "", `rate = "1/s"`, `concurrency = 1`)
		if _, _, err := do(t, s, "GET", srv.URL, nil); err != nil {
			t.Fatal(err)
		}
		// The second waits for the next token, and the guest closes it meanwhile: a
		// cancelled call is not one the limit held back.
		c, err := s.Start(ctx, outbound.Request{URL: srv.URL})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
		c.Close()
		if until, ok := s.RateLimited(); ok {
			t.Fatalf("RateLimited() = %v, true after the guest closed a waiting call", until)
		}
		if r := s.Records()[1]; r.Error != "cancelled" {
			t.Fatalf("record %+v, want cancelled", r)
		}
	})
	t.Run("concurrency", func(t *testing.T) {
		t.Parallel()
		release := make(chan struct{})
		srv := outboundtest.NewServer(t, false, func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
			ok(w, r)
		})
		s := limitedSession(t, srv, "", `concurrency = 1`)
		first, err := s.Start(ctx, outbound.Request{URL: srv.URL})
		if err != nil {
			t.Fatal(err)
		}
		second, err := s.Start(ctx, outbound.Request{URL: srv.URL})
		if err != nil {
			t.Fatal(err)
		}
		for srv.Hits.Load() < 1 {
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(100 * time.Millisecond) // time for a second to arrive, if the cap let it
		if n := srv.Hits.Load(); n != 1 {
			t.Fatalf("%d requests in flight under concurrency = 1", n)
		}
		close(release)
		calls := []*outbound.Call{first, second}
		i := outbound.Wait(ctx, calls, -1)
		// The first answered; its slot comes free when its body is read to the end.
		buf := make([]byte, 100)
		for {
			if _, err := calls[i].Read(ctx, buf); err != nil {
				break
			}
		}
		if _, err := calls[1-i].Head(ctx); err != nil {
			t.Fatalf("the second request: %v", err)
		}
		if n := srv.Hits.Load(); n != 2 {
			t.Fatalf("%d hits, want 2", n)
		}
	})
}

// TestSwitchingProtocolsIsAConnectionFailure: a server that answers 101, asked or not,
// would hand over a raw connection whose reads no context ends. The request fails as
// a connection failure, and nothing of the call outlives the job's deadline.
func TestSwitchingProtocolsIsAConnectionFailure(t *testing.T) {
	t.Parallel()
	hijacked := make(chan net.Conn, 1)
	srv := outboundtest.NewServer(t, false, func(w http.ResponseWriter, r *http.Request) {
		conn, rw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: x\r\n\r\n")
		rw.Flush()
		hijacked <- conn // held open, silent, until the test closes it
	})
	t.Cleanup(func() {
		select {
		case conn := <-hijacked:
			conn.Close()
		default:
		}
	})
	c, ctx := callUnderDeadline(t, srv, 500*time.Millisecond)
	read := make(chan error, 1)
	go func() {
		_, err := c.Read(ctx, make([]byte, 10))
		read <- err
	}()
	select {
	case err := <-read:
		if !isKind(err, outbound.KindConnection) {
			t.Fatalf("Read: %v, want a connection failure", err)
		}
	case <-time.After(3 * time.Second):
		(<-hijacked).Close() // let the blocked Read return, so the test can end
		<-read
		t.Fatal("Read blocked 2.5s past the 500ms deadline")
	}
	if _, err := c.Head(ctx); !isKind(err, outbound.KindConnection) || !strings.Contains(err.Error(), "101") {
		t.Fatalf("Head: %v, want a connection failure naming the 101", err)
	}
}

// TestHopByHopHeadersAreRefused: a guest's Connection, Upgrade, Te, Transfer-Encoding
// or Host header is refused before anything is sent: they would ask for a protocol
// switch or another framing, or name another virtual host than the URL's.
func TestHopByHopHeadersAreRefused(t *testing.T) {
	t.Parallel()
	srv := outboundtest.NewServer(t, false, ok)
	s := session(t, "[http]\nallow = [\"http://127.0.0.1:P\"]\n", outbound.Options{}, "P", srv.Port)
	for _, name := range []string{"Connection", "upgrade", "TE", "Transfer-Encoding", "Host"} {
		req := outbound.Request{URL: srv.URL, Header: http.Header{name: {"x"}}}
		if _, err := s.Start(context.Background(), req); !isKind(err, outbound.KindBadRequest) {
			t.Errorf("header %s: %v, want a bad request", name, err)
		}
	}
	if n := srv.Hits.Load(); n != 0 {
		t.Fatalf("the server received %d requests", n)
	}
}

// TestConcurrencySlotFreedWhenTheRequestEnds: a request whose body is never read nor
// closed gives its slot back when its context (the job's) ends.
func TestConcurrencySlotFreedWhenTheRequestEnds(t *testing.T) {
	t.Parallel()
	srv := outboundtest.NewServer(t, false, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	s := session(t, "[http]\nallow = [\"http://127.0.0.1:P\"]\ntimeout = \"5s\"\n[http.limits.\"http://127.0.0.1:P\"]\nconcurrency = 1\n", outbound.Options{}, "P", srv.Port)
	job, endJob := context.WithCancel(context.Background())
	first, err := s.Start(job, outbound.Request{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.Head(context.Background()); err != nil {
		t.Fatal(err)
	}
	endJob() // first is never read nor closed
	second, err := s.Start(context.Background(), outbound.Request{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := second.Head(context.Background()); err != nil {
		t.Fatalf("the second request: %v", err)
	}
}

// TestRequestSizeBounds: a body past max_request_body, headers past 64 KiB, or a body
// that would take the session's bodies held past 4 × max_request_body is refused as
// too large before anything is sent; a closed request gives its bytes back.
func TestRequestSizeBounds(t *testing.T) {
	t.Parallel()
	never := outboundtest.NewServer(t, false, func(w http.ResponseWriter, r *http.Request) {
		// The body is read first: until then the server does not watch the
		// connection, and would not see the request end.
		io.Copy(io.Discard, r.Body)
		<-r.Context().Done()
	})
	s := session(t, "[http]\nallow = [\"http://127.0.0.1:P\"]\nmax_request_body = \"1KiB\"\n", outbound.Options{}, "P", never.Port)
	ctx := context.Background()
	start := func(body int, header int) (*outbound.Call, error) {
		h := http.Header{}
		if header > 0 {
			h.Set("X-Big", strings.Repeat("h", header))
		}
		return s.Start(ctx, outbound.Request{Method: "POST", URL: never.URL, Header: h, Body: make([]byte, body)})
	}
	if _, err := start(1025, 0); !isKind(err, outbound.KindRequestTooLarge) {
		t.Fatalf("a body of 1025 bytes: %v, want too large", err)
	}
	if _, err := start(0, 64<<10); !isKind(err, outbound.KindRequestTooLarge) {
		t.Fatalf("a 64 KiB header: %v, want too large", err)
	}
	var held []*outbound.Call
	for range 4 {
		c, err := start(1024, 0)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	if _, err := start(1, 0); !isKind(err, outbound.KindRequestTooLarge) {
		t.Fatalf("a fifth body with 4 KiB held: %v, want too large", err)
	}
	held[0].Close()
	if _, err := start(1024, 0); err != nil {
		t.Fatalf("after a close: %v", err)
	}
}

// TestLocalhostIsLoopbackWithoutTheResolver: localhost is 127.0.0.1 and ::1 (RFC
// 6761), whatever the system's resolver says of it.
func TestLocalhostIsLoopbackWithoutTheResolver(t *testing.T) {
	t.Parallel()
	srv := outboundtest.NewServer(t, false, ok)
	s := session(t, "[http]\nallow = [\"http://localhost:P\"]\n", outbound.Options{Resolver: resolver{"localhost": "10.0.0.1"}}, "P", srv.Port)
	if _, body, err := do(t, s, "GET", "http://localhost:"+srv.Port+"/", nil); err != nil || body != `hello GET / auth=""` {
		t.Fatalf("%q %v", body, err)
	}
}

// TestStatusOutside200To599IsAConnectionFailure: net/http takes any three digits as a
// status; the ABI promises 200-599.
func TestStatusOutside200To599IsAConnectionFailure(t *testing.T) {
	t.Parallel()
	srv := outboundtest.NewServer(t, false, func(w http.ResponseWriter, r *http.Request) {
		conn, rw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		rw.WriteString("HTTP/1.1 999 Odd\r\nContent-Length: 0\r\n\r\n")
		rw.Flush()
	})
	s := session(t, "[http]\nallow = [\"http://127.0.0.1:P\"]\n", outbound.Options{}, "P", srv.Port)
	if _, _, err := do(t, s, "GET", srv.URL+"/", nil); !isKind(err, outbound.KindConnection) {
		t.Fatalf("err %v, want a connection failure", err)
	}
}

// TestIdleConnectionsKeptPerOption: a client keeps IdleConnsPerHost idle connections to
// a destination, so that a second wave of 8 requests at once reuses all 8 connections
// of the first when the option is 8, and opens 6 new ones when it is 2.
func TestIdleConnectionsKeptPerOption(t *testing.T) {
	t.Parallel()
	const wave = 8
	for _, tc := range []struct{ idle, wantConns int }{{2, wave + wave - 2}, {wave, wave}} {
		t.Run(fmt.Sprint(tc.idle), func(t *testing.T) {
			t.Parallel()
			var arrived sync.WaitGroup
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				arrived.Done()
				arrived.Wait() // every request of a wave is in flight at once
				fmt.Fprint(w, "ok")
			}))
			var conns atomic.Int64
			srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
				if st == http.StateNew {
					conns.Add(1)
				}
			}
			srv.Start()
			t.Cleanup(srv.Close)
			_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
			g, err := parse(t, "[http]\nallow = [\"http://127.0.0.1:"+port+"\"]\n", nil)
			if err != nil {
				t.Fatal(err)
			}
			c := outbound.NewClient(g, outbound.Options{IdleConnsPerHost: tc.idle})
			t.Cleanup(c.Close)
			for range 2 {
				arrived.Add(wave)
				var wg sync.WaitGroup
				for range wave {
					wg.Go(func() {
						s := c.NewSession()
						defer s.Close()
						if _, body, err := do(t, s, "GET", srv.URL, nil); err != nil || body != "ok" {
							t.Errorf("%q, %v", body, err)
						}
					})
				}
				wg.Wait()
			}
			if n := conns.Load(); n != int64(tc.wantConns) {
				t.Fatalf("%d connections for two waves of %d with %d kept idle, want %d", n, wave, tc.idle, tc.wantConns)
			}
		})
	}
}

// TestDestinationFailedIsWhatTheBreakerCounts: a session says a destination failed for
// a 5xx or a refused connection, whether or not its breaker opened, and not for a 4xx
// or a denial.
func TestDestinationFailedIsWhatTheBreakerCounts(t *testing.T) {
	t.Parallel()
	srv := outboundtest.NewServer(t, false, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/down" {
			w.WriteHeader(503)
			return
		}
		w.WriteHeader(404)
	})
	closed := "http://127.0.0.1:" + outboundtest.RefusedPort(t) + "/"
	for _, tc := range []struct {
		url  string
		want bool
	}{
		{srv.URL + "/down", true},
		{closed, true},
		{srv.URL + "/missing", false},
		{"http://127.0.0.2:1/", false}, // denied
	} {
		s := session(t, "[http]\nallow = [\"http://127.0.0.1:1-65535\"]\nbreaker_failures = 100\n", outbound.Options{})
		do(t, s, "GET", tc.url, nil)
		if got := s.DestinationFailed(); got != tc.want {
			t.Errorf("%s: DestinationFailed() = %v, want %v", tc.url, got, tc.want)
		}
	}
}
