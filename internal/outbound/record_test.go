package outbound_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/wasmjobs/wasmjobs/internal/outbound"
	"github.com/wasmjobs/wasmjobs/internal/outbound/outboundtest"
)

// TestSessionRecordsEachCall: a session keeps one record per request it started, in
// start order, with the method, origin, path without its query, the matching entry,
// the status or the failure's label, a duration and the body bytes read; no header
// value and no query string reaches a record.
func TestSessionRecordsEachCall(t *testing.T) {
	t.Parallel()
	srv := outboundtest.NewServer(t, false, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/unavailable":
			w.WriteHeader(503)
		case "/big":
			fmt.Fprint(w, strings.Repeat("x", 1000))
		case "/hang":
			<-r.Context().Done()
		default:
			fmt.Fprint(w, "hello")
		}
	})
	closedPort := outboundtest.RefusedPort(t)
	s := session(t, `[http]
allow = ["http://127.0.0.1:1-65535", "http://localhost:PORT"]
max_response = "100B"
[http.headers."http://localhost:PORT"]
Authorization = "Bearer host-secret"
`, outbound.Options{}, "PORT", srv.Port)

	origin := "http://127.0.0.1:" + srv.Port
	hdr := http.Header{"Authorization": {"Bearer guest-secret"}, "Cookie": {"session=cookie-secret"}}
	if _, body, err := do(t, s, "POST", "http://localhost:"+srv.Port+"/hello/there?token=query-secret#frag-secret", hdr); err != nil || body != "hello" {
		t.Fatalf("granted call: %q, %v", body, err)
	}
	do(t, s, "GET", origin+"/unavailable", nil)
	do(t, s, "GET", origin+"/big", nil)
	do(t, s, "GET", "http://10.1.2.3/denied?key=query-secret", nil)
	do(t, s, "GET", "http://127.0.0.1:"+closedPort+"/", nil)
	c, err := s.Start(context.Background(), outbound.Request{URL: origin + "/hang"})
	if err != nil {
		t.Fatal(err)
	}
	c.Close() // before its head: cancelled
	s.Close()

	type want struct {
		method, origin, path, grant string
		status                      int
		err, outcome                string
		bytes                       int64
	}
	any := "http://127.0.0.1:1-65535"
	wants := []want{
		{"POST", "http://localhost:" + srv.Port, "/hello/there", "http://localhost:" + srv.Port, 200, "", "2xx", 5},
		{"GET", origin, "/unavailable", any, 503, "", "5xx", 0},
		{"GET", origin, "/big", any, 200, "too_large", "too_large", 100},
		{"GET", "http://10.1.2.3:80", "/denied", "", 0, "denied", "denied", 0},
		{"GET", "http://127.0.0.1:" + closedPort, "/", any, 0, "refused", "refused", 0},
		{"GET", origin, "/hang", any, 0, "cancelled", "cancelled", 0},
	}
	recs := s.Records()
	if len(recs) != len(wants) {
		t.Fatalf("%d records, want %d: %+v", len(recs), len(wants), recs)
	}
	for i, w := range wants {
		r := recs[i]
		got := want{r.Method, r.Origin, r.Path, r.Grant, r.Status, r.Error, r.Outcome(), r.Bytes}
		if got != w || r.Duration <= 0 {
			t.Errorf("record %d: %+v (duration %v), want %+v and a duration", i, got, r.Duration, w)
		}
		if text := fmt.Sprintf("%+v", r); strings.Contains(text, "secret") {
			t.Errorf("record %d holds a secret: %s", i, text)
		}
	}
}

// TestFailureMessagesNameNoQuery: a failure's message, which the host logs at the job
// and so keeps in its record, never holds the URL's query string (the host's log line
// names the URL through Redact).
func TestFailureMessagesNameNoQuery(t *testing.T) {
	t.Parallel()
	port := outboundtest.RefusedPort(t)
	s := session(t, "[http]\nallow = [\"http://127.0.0.1:PORT\"]\n", outbound.Options{}, "PORT", port)
	_, _, err := do(t, s, "GET", "http://127.0.0.1:"+port+"/p?token=query-secret", nil)
	if !isKind(err, outbound.KindRefused) || strings.Contains(err.Error(), "secret") {
		t.Fatalf("error %v: want a refusal without the URL's query", err)
	}
	for in, want := range map[string]string{
		"https://u:pw@api.test:8443/a%2Fb?k=v#f": "https://api.test:8443/a%2Fb",
		"not a url?secret":                       "not a url",
	} {
		if got := outbound.Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestMessagesOfMalformedURLsNameNoQuery: the failures that quote a URL the guest or
// a server gave (a URL that is not absolute, a Location header that does not parse)
// name it without its query string: the message reaches the job's logs and the guest.
func TestMessagesOfMalformedURLsNameNoQuery(t *testing.T) {
	t.Parallel()
	srv := outboundtest.NewServer(t, false, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", "/%zz/next?api_key=location-secret")
		w.WriteHeader(http.StatusFound)
	})
	s := session(t, "[http]\nallow = [\"http://127.0.0.1:PORT\"]\n", outbound.Options{}, "PORT", srv.Port)
	for _, tc := range []struct {
		url  string
		kind outbound.Kind
	}{
		{"//api.example.com/charge?api_key=url-secret", outbound.KindBadRequest},
		{"http://127.0.0.1:" + srv.Port + "/redirect?api_key=url-secret", outbound.KindConnection},
	} {
		_, _, err := do(t, s, "GET", tc.url, nil)
		if !isKind(err, tc.kind) || strings.Contains(err.Error(), "secret") {
			t.Errorf("GET %s: %v; want a %s naming no query", tc.url, err, tc.kind)
		}
	}
}

// TestRequestPastTheDeadlineIsRecordedAsTimeout: a request that hangs past the job's
// deadline is recorded as a timeout, though the guest's wait for its head (under the
// same deadline) may return before the request's own goroutine saw it; only a close
// that itself ends a request is "cancelled".
func TestRequestPastTheDeadlineIsRecordedAsTimeout(t *testing.T) {
	t.Parallel()
	srv := outboundtest.NewServer(t, false, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	// The breaker is kept out of it: it is not what is tested here.
	s := session(t, "[http]\nallow = [\"http://127.0.0.1:PORT\"]\nbreaker_failures = 100\n", outbound.Options{}, "PORT", srv.Port)
	const n = 10
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	for range n {
		c, err := s.Start(ctx, outbound.Request{URL: srv.URL})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Head(ctx); !isKind(err, outbound.KindTimeout) {
			t.Fatalf("head: %v, want a timeout", err)
		}
	}
	s.Close()
	for i, r := range s.Records() {
		if r.Error != "timeout" {
			t.Errorf("record %d: error %q, want timeout", i, r.Error)
		}
	}
}

// TestDeniedRequestsDurationEndsAtTheRefusal: a request refused before anything is
// sent takes no time, however long the guest keeps it open.
func TestDeniedRequestsDurationEndsAtTheRefusal(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := session(t, "[http]\nallow = [\"http://127.0.0.1:1\"]\n", outbound.Options{})
		c, err := s.Start(context.Background(), outbound.Request{URL: "http://10.1.2.3/x"})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Minute) // the guest holds it open
		c.Close()
		if r := s.Records()[0]; r.Error != "denied" || r.Duration >= time.Minute {
			t.Fatalf("record %+v: want denied, its duration ending at the refusal", r)
		}
	})
}
