//go:build !wasip1

package wjhttp

import (
	"context"
	"errors"
	"fmt"
	"io"

	"net/http"
	"net/http/httptest"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	wasmjobs "github.com/wasmjobs/wasmjobs/guest-sdk/go"
)

// The tests share the stand-in host (one per process, as a guest has one host), so
// none of them is parallel.

func resetHost(t *testing.T) {
	t.Helper()
	host.allow, host.started, host.requests = nil, nil, map[int32]*fakeRequest{}
	t.Cleanup(func() {
		if n := len(host.requests); n != 0 {
			t.Errorf("%d requests left open on the host", n)
		}
	})
}

func echo(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	w.Header().Add("X-Reply", "a")
	w.Header().Add("X-Reply", "b")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, "%s %s %s [%s]", r.Method, r.URL.Path, r.Header.Get("X-Test"), body)
}

// TestRequestsGoThroughTheHost: http.Get, http.Post and a request with headers reach a
// real server through the http_* functions: method, headers as lines, body; the
// response keeps repeated headers, and reading the body to its end closes the request.
func TestRequestsGoThroughTheHost(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(echo))
	defer srv.Close()
	for _, tc := range []struct {
		name    string
		do      func() (*http.Response, error)
		body    string
		started string
	}{
		{"get", func() (*http.Response, error) { return http.Get(srv.URL + "/g") }, "GET /g  []", "GET " + srv.URL + "/g\n"},
		{"post", func() (*http.Response, error) {
			return http.Post(srv.URL+"/p", "text/plain", strings.NewReader("ping"))
		}, "POST /p  [ping]",
			"POST " + srv.URL + "/p\nContent-Type: text/plain\n"},
		{"headers", func() (*http.Response, error) {
			req, _ := http.NewRequestWithContext(context.Background(), "PUT", srv.URL+"/h", strings.NewReader("x"))
			req.Header.Add("X-Test", "1")
			req.Header.Add("X-Test", "2")
			req.Header.Set("Accept", "text/plain")
			return http.DefaultClient.Do(req)
		}, "PUT /h 1 [x]", "PUT " + srv.URL + "/h\nAccept: text/plain\nX-Test: 1\nX-Test: 2\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resetHost(t)
			resp, err := tc.do()
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(resp.Body)
			if err != nil || resp.StatusCode != 201 || resp.Status != "201 Created" || string(b) != tc.body {
				t.Fatalf("status %q body %q err %v", resp.Status, b, err)
			}
			if got := strings.Join(resp.Header.Values("X-Reply"), ","); got != "a,b" {
				t.Fatalf("X-Reply %q", got)
			}
			if len(host.requests) != 0 {
				t.Fatal("the request is still open after its body was read to the end")
			}
			if len(host.started) != 1 || host.started[0] != tc.started {
				t.Fatalf("started %q, want %q", host.started, tc.started)
			}
		})
	}
}

// TestTheHostFollowsRedirects: the transport returns the host's final response and
// its URL as resp.Request.URL, and makes one request of the host for it.
func TestTheHostFollowsRedirects(t *testing.T) {
	resetHost(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/from" {
			http.Redirect(w, r, "/to", http.StatusFound)
			return
		}
		echo(w, r)
	}))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/from")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 201 || resp.Request.URL.String() != srv.URL+"/to" || len(host.started) != 1 {
		t.Fatalf("status %d url %s, %d requests started", resp.StatusCode, resp.Request.URL, len(host.started))
	}
}

// TestBodyIsReadInPieces: a body is read from the host as the caller reads it, and
// Close before its end closes the request.
func TestBodyIsReadInPieces(t *testing.T) {
	resetHost(t)
	big := strings.Repeat("0123456789", 250)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", fmt.Sprint(len(big)))
		io.WriteString(w, big)
	}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if resp.ContentLength != int64(len(big)) {
		t.Fatalf("content length %d", resp.ContentLength)
	}
	buf := make([]byte, 1000)
	n, err := io.ReadFull(resp.Body, buf)
	if err != nil || string(buf[:n]) != big[:1000] {
		t.Fatalf("first piece %d %v", n, err)
	}
	if len(host.requests) != 1 {
		t.Fatal("the request must stay open while its body is read")
	}
	resp.Body.Close()
	if len(host.requests) != 0 {
		t.Fatal("Close must close the request")
	}
}

// TestFailuresAreErrors: a host's failure is an *Error with its status and message,
// matched by its sentinel with errors.Is, through net/http's *url.Error.
func TestFailuresAreErrors(t *testing.T) {
	closed := httptest.NewServer(http.NotFoundHandler())
	refusedURL := closed.URL
	closed.Close()
	loop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/again", http.StatusFound) }))
	defer loop.Close()
	for _, tc := range []struct {
		name  string
		url   string
		allow func(string) bool
		code  int32
		kind  error
		msg   string
	}{
		{"denied", "http://127.0.0.2:1/", func(string) bool { return false }, StatusDenied, ErrDenied, "denied: http://127.0.0.2:1/ is not granted"},
		{"refused", refusedURL, nil, StatusRefused, ErrRefused, "connection refused: "},
		{"too many redirects", loop.URL, nil, StatusTooManyRedirects, ErrTooManyRedirects, "too many redirects"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resetHost(t)
			host.allow = tc.allow
			resp, err := http.Get(tc.url)
			if err == nil {
				resp.Body.Close()
				t.Fatal("no error")
			}
			var e *Error
			if !errors.As(err, &e) || e.Code != tc.code || !errors.Is(err, tc.kind) || !strings.HasPrefix(e.Message, tc.msg) {
				t.Fatalf("%v (%#v), want code %d, kind %v, message %q", err, e, tc.code, tc.kind, tc.msg)
			}
			for _, other := range kinds {
				if other != tc.kind && errors.Is(err, other) {
					t.Fatalf("%v is also %v", err, other)
				}
			}
		})
	}
}

// TestBadHeadersAreRefused: a header name outside the token characters, or a value
// holding CR, LF or NUL, fails the request with wasmjobs.ErrBadArgument before anything
// reaches the host: the host splits header lines on LF, so "a\nX-Evil: 1" would be two
// headers, the second of the caller's making.
func TestBadHeadersAreRefused(t *testing.T) {
	for _, tc := range []struct {
		name, key, value string
	}{
		{"LF in a value", "X-Inject", "a\nIdempotency-Key: fixed"},
		{"CR in a value", "X-Inject", "a\rb"},
		{"NUL in a value", "X-Inject", "a\x00b"},
		{"space in a name", "X Inject", "a"},
		{"colon in a name", "X-Inject:", "a"},
		{"LF in a name", "X-A\nX-Evil", "1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resetHost(t)
			req, err := http.NewRequest(http.MethodGet, "http://127.0.0.1:1/", nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header[tc.key] = []string{tc.value}
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				resp.Body.Close()
			}
			if !errors.Is(err, wasmjobs.ErrBadArgument) || len(host.started) != 0 {
				t.Fatalf("err %v, %d started; want wasmjobs.ErrBadArgument and nothing started", err, len(host.started))
			}
		})
	}
}

// TestMessagesLeaveOutTheQuery: the transport's own messages name a URL as
// scheme://host/path, without the query, user or fragment that may carry a secret
// (net/http's *url.Error around them still carries the full URL).
func TestMessagesLeaveOutTheQuery(t *testing.T) {
	resetHost(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, do := range []func() error{
		func() error {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://user:pw@127.0.0.1:1/p?token=secret#frag", nil)
			_, err := http.DefaultClient.Do(req)
			return err
		},
		func() error {
			req, _ := http.NewRequest(http.MethodGet, "http://user:pw@127.0.0.1:1/p?token=secret#frag", nil)
			req.Header.Set("X-Bad", "a\nb")
			_, err := http.DefaultClient.Do(req)
			return err
		},
	} {
		var ue *url.Error
		if err := do(); !errors.As(err, &ue) {
			t.Fatalf("%v is not a *url.Error", err)
		}
		msg := ue.Err.Error()
		if !strings.Contains(msg, "http://127.0.0.1:1/p") || strings.Contains(msg, "secret") || strings.Contains(msg, "pw") || strings.Contains(msg, "frag") {
			t.Fatalf("message %q: want the URL as http://127.0.0.1:1/p, nothing more", msg)
		}
	}
}

// TestRequestBodyIsBounded: a body past MaxRequestBody is refused before anything is
// sent.
func TestRequestBodyIsBounded(t *testing.T) {
	resetHost(t)
	old := MaxRequestBody
	MaxRequestBody = 10
	defer func() { MaxRequestBody = old }()
	_, err := http.Post("http://127.0.0.1:1/", "text/plain", strings.NewReader("12345678901"))
	if !errors.Is(err, wasmjobs.ErrLimitExceeded) || len(host.started) != 0 {
		t.Fatalf("err %v, %d started", err, len(host.started))
	}
}

// TestDeadlinesReachTheHost: against a server that does not answer, a request context's
// deadline and an http.Client's Timeout end the request at about that time, as
// context.DeadlineExceeded, and close it on the host.
func TestDeadlinesReachTheHost(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select { // never answers within the tests' deadlines
		case <-release:
		case <-r.Context().Done():
		case <-time.After(3 * time.Second):
		}
	}))
	defer srv.Close()
	defer close(release)
	const d = 300 * time.Millisecond
	for _, tc := range []struct {
		name string
		do   func() (*http.Response, error)
	}{
		{"context deadline", func() (*http.Response, error) {
			ctx, cancel := context.WithTimeout(context.Background(), d)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
			return http.DefaultClient.Do(req)
		}},
		{"client timeout", func() (*http.Response, error) { return (&http.Client{Timeout: d}).Get(srv.URL) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resetHost(t)
			start := time.Now()
			resp, err := tc.do()
			took := time.Since(start)
			if err == nil {
				resp.Body.Close()
				t.Fatal("no error")
			}
			if !errors.Is(err, context.DeadlineExceeded) || took < d || took > d+700*time.Millisecond {
				t.Fatalf("after %v: %v", took, err)
			}
		})
	}
}

// TestRetryAfter: the helper defers by delay-seconds or until an HTTP date (at least
// 1 ms), and retries with the queue's backoff without a header it can parse.
func TestRetryAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		now := time.Now() // the bubble's clock: it does not move while nothing sleeps
		for _, tc := range []struct {
			name, value string
			status      int
			outcome     wasmjobs.Outcome
			delay       time.Duration
			reason      string
		}{
			{"seconds", "2", 429, wasmjobs.DeferJob, 2 * time.Second, "http 429: Retry-After 2"},
			{"zero seconds", "0", 503, wasmjobs.DeferJob, time.Millisecond, "http 503: Retry-After 0"},
			{"a date", now.Add(90 * time.Second).UTC().Format(http.TimeFormat), 503, wasmjobs.DeferJob, 90 * time.Second,
				"http 503: Retry-After " + now.Add(90*time.Second).UTC().Format(http.TimeFormat)},
			{"a date past", "Sun, 06 Nov 1994 08:49:37 GMT", 429, wasmjobs.DeferJob, time.Millisecond, "http 429: Retry-After Sun, 06 Nov 1994 08:49:37 GMT"},
			{"past a day", "99999999999", 429, wasmjobs.DeferJob, RetryAfterCap, "http 429: Retry-After 99999999999"},
			{"a date past a day", now.Add(48 * time.Hour).UTC().Format(http.TimeFormat), 429, wasmjobs.DeferJob, RetryAfterCap,
				"http 429: Retry-After " + now.Add(48*time.Hour).UTC().Format(http.TimeFormat)},
			{"garbage", "soon", 429, wasmjobs.RetryJob, 0, "http 429"},
			{"negative", "-5", 503, wasmjobs.RetryJob, 0, "http 503"},
			{"absent", "", 503, wasmjobs.RetryJob, 0, "http 503"},
		} {
			resp := &http.Response{StatusCode: tc.status, Header: http.Header{}}
			if tc.value != "" {
				resp.Header.Set("Retry-After", tc.value)
			}
			var se *wasmjobs.SettleError
			if err := RetryAfter(resp); !errors.As(err, &se) || se.Outcome != tc.outcome || se.Delay != tc.delay || se.Reason != tc.reason {
				t.Errorf("%s: %+v, want %v %v %q", tc.name, se, tc.outcome, tc.delay, tc.reason)
			}
		}
	})
}

// TestCoreDoesNotImportNetHTTP: a guest that makes no requests does not carry net/http.
func TestCoreDoesNotImportNetHTTP(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", "github.com/wasmjobs/wasmjobs/guest-sdk/go")
	cmd.Env = append(cmd.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	for dep := range strings.FieldsSeq(string(out)) {
		if dep == "net/http" || dep == "net" {
			t.Fatalf("the core package depends on %s", dep)
		}
	}
}
