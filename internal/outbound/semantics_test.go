package outbound_test

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/internal/outbound"
	"github.com/wasmjobs/wasmjobs/internal/outbound/outboundtest"
)

// A destination that fails (refuses connections, or answers 5xx) opens its own
// breaker after breaker_failures calls: the next call fails at once as circuit open,
// nothing sent, and the session says so; another destination under the same entry
// goes on. A 4xx is the server answering: it never opens the breaker.
func TestBreakerPerDestination(t *testing.T) {
	t.Parallel()
	refusedPort := outboundtest.RefusedPort(t)
	for _, tc := range []struct {
		name   string
		status int // the failing server's; 0: a port that refuses
		opens  bool
	}{
		{"503", 503, true},
		{"500", 500, true},
		{"refused", 0, true},
		{"404", 404, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			bad := outboundtest.NewServer(t, false, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(tc.status) })
			good := outboundtest.NewServer(t, false, ok)
			badURL := bad.URL + "/x"
			if tc.status == 0 {
				badURL = "http://127.0.0.1:" + refusedPort + "/x"
			}
			s := session(t, "[http]\nallow = [\"http://127.0.0.1:1-65535\"]\nbreaker_failures = 3\nbreaker_cooldown = \"1h\"\n", outbound.Options{})
			for i := range 3 {
				if _, _, err := do(t, s, "GET", badURL, nil); tc.status == 0 && !isKind(err, outbound.KindRefused) {
					t.Fatalf("call %d: %v, want refused", i+1, err)
				}
				// The failure that opens the breaker is the outage's first: the
				// session knows of it, though the guest saw a status.
				if _, open := s.CircuitOpen(); open != (tc.opens && i == 2) {
					t.Fatalf("after call %d: the session met an outage: %v", i+1, open)
				}
			}
			_, _, err := do(t, s, "GET", badURL, nil)
			until, open := s.CircuitOpen()
			if !tc.opens {
				if err != nil || open || bad.Hits.Load() != 4 {
					t.Fatalf("4th call after three %ds: %v, circuit open %v, %d hits; want it sent", tc.status, err, open, bad.Hits.Load())
				}
				return
			}
			var e *outbound.Error
			if !errors.As(err, &e) || e.Kind != outbound.KindCircuitOpen {
				t.Fatalf("4th call: %v, want circuit open", err)
			}
			if tc.status != 0 && bad.Hits.Load() != 3 {
				t.Fatalf("the server had %d requests, want 3: nothing is sent while the breaker is open", bad.Hits.Load())
			}
			if !open || !until.Equal(e.Until) || time.Until(until) < 59*time.Minute {
				t.Fatalf("session: circuit open %v until %v, want until %v (an hour on)", open, until, e.Until)
			}
			if _, _, err := do(t, s, "GET", good.URL+"/y", nil); err != nil {
				t.Fatalf("another destination under the same entry: %v", err)
			}
		})
	}
}

// The breakers of one scope are shared by its clients (a module's versions): a
// reload does not close an open breaker; another scope's are its own.
func TestBreakersSharedByScope(t *testing.T) {
	t.Parallel()
	bad := outboundtest.NewServer(t, false, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(503) })
	reg := outbound.NewBreakers()
	grant := "[http]\nallow = [\"http://127.0.0.1:PORT\"]\nbreaker_failures = 1\nbreaker_cooldown = \"1h\"\n"
	v1 := session(t, grant, outbound.Options{Breakers: reg, Scope: "m"}, "PORT", bad.Port)
	do(t, v1, "GET", bad.URL, nil)
	v2 := session(t, grant, outbound.Options{Breakers: reg, Scope: "m"}, "PORT", bad.Port)
	if _, _, err := do(t, v2, "GET", bad.URL, nil); !isKind(err, outbound.KindCircuitOpen) {
		t.Fatalf("the scope's next client: %v, want circuit open", err)
	}
	other := session(t, grant, outbound.Options{Breakers: reg, Scope: "n"}, "PORT", bad.Port)
	if _, _, err := do(t, other, "GET", bad.URL, nil); err != nil {
		t.Fatalf("another scope: %v, want the request sent", err)
	}
	if st := reg.States("m"); len(st) != 1 || st[0].State != "open" || st[0].Destination != "http://127.0.0.1:"+bad.Port {
		t.Fatalf("states %+v", st)
	}
}

// With idempotency_header set, each request that is not GET, HEAD or OPTIONS and
// lacks the header is given "<job>-<n>", n by start order; a replayed job's keys
// carry its generation; a guest's own key is left alone; without the setting, or
// without a job, none is added.
func TestIdempotencyKeys(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got []string
	srv := outboundtest.NewServer(t, false, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Method+" "+r.Header.Get("Idempotency-Key"))
		mu.Unlock()
	})
	for _, tc := range []struct {
		name    string
		grant   string
		job     string
		replays int
		want    []string
	}{
		{"keys", `idempotency_header = "idempotency-key"`, "J", 0,
			[]string{"POST J-1", "GET ", "PUT J-2", "POST mine", "HEAD ", "OPTIONS ", "delete J-3", "PATCH J-4"}},
		{"a replay", `idempotency_header = "Idempotency-Key"`, "J", 2,
			[]string{"POST J-r2-1", "GET ", "PUT J-r2-2", "POST mine", "HEAD ", "OPTIONS ", "delete J-r2-3", "PATCH J-r2-4"}},
		{"no header set", ``, "J", 0,
			[]string{"POST ", "GET ", "PUT ", "POST mine", "HEAD ", "OPTIONS ", "delete ", "PATCH "}},
		{"no job", `idempotency_header = "Idempotency-Key"`, "", 0,
			[]string{"POST ", "GET ", "PUT ", "POST mine", "HEAD ", "OPTIONS ", "delete ", "PATCH "}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			got = nil
			mu.Unlock()
			g, err := parse(t, "[http]\nallow = [\"http://127.0.0.1:"+srv.Port+"\"]\n"+tc.grant+"\n", nil)
			if err != nil {
				t.Fatal(err)
			}
			c := outbound.NewClient(g, outbound.Options{})
			defer c.Close()
			s := c.NewJobSession(tc.job, tc.replays)
			defer s.Close()
			for _, m := range []string{"POST", "GET", "PUT", "POST!", "HEAD", "OPTIONS", "delete", "PATCH"} {
				var h http.Header
				if m == "POST!" {
					m, h = "POST", http.Header{"Idempotency-Key": {"mine"}}
				}
				if _, _, err := do(t, s, m, srv.URL, h); err != nil {
					t.Fatal(err)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if len(got) != len(tc.want) {
				t.Fatalf("requests %q, want %q", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("requests %q\nwant     %q", got, tc.want)
				}
			}
		})
	}
}

// A job's keys are the same on every run: each run is a new session numbering its
// requests from 1.
func TestIdempotencyKeysEqualAcrossRuns(t *testing.T) {
	t.Parallel()
	keys := make(chan string, 4)
	srv := outboundtest.NewServer(t, false, func(w http.ResponseWriter, r *http.Request) { keys <- r.Header.Get("Idempotency-Key") })
	g, err := parse(t, "[http]\nallow = [\"http://127.0.0.1:"+srv.Port+"\"]\nidempotency_header = \"Idempotency-Key\"\n", nil)
	if err != nil {
		t.Fatal(err)
	}
	c := outbound.NewClient(g, outbound.Options{})
	defer c.Close()
	for run := range 2 {
		s := c.NewJobSession("J", 0)
		for range 2 {
			call, err := s.Start(context.Background(), outbound.Request{Method: "POST", URL: srv.URL})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := call.Head(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		s.Close()
		if a, b := <-keys, <-keys; a != "J-1" || b != "J-2" {
			t.Fatalf("run %d: keys %q %q, want J-1 J-2", run+1, a, b)
		}
	}
}

// TestBreakerCountsOnlyTheGrantsTimeout: a request that times out counts against its
// destination's breaker only when the grant's own timeout passed: a job's deadline
// shorter than the destination's answer says nothing of its health, and jobs that
// call a slow, healthy API must not defer each other as an outage.
func TestBreakerCountsOnlyTheGrantsTimeout(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		timeout  string        // the grant's
		deadline time.Duration // the job's
		opens    bool
	}{
		{"the job's deadline", "1m", 50 * time.Millisecond, false},
		{"the grant's timeout", "50ms", time.Minute, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := outboundtest.NewServer(t, false, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
			s := session(t, "[http]\nallow = [\"http://127.0.0.1:PORT\"]\nbreaker_failures = 2\nbreaker_cooldown = \"1h\"\ntimeout = \"T\"\n",
				outbound.Options{}, "PORT", srv.Port, "T", tc.timeout)
			for i := range 3 {
				ctx, cancel := context.WithTimeout(context.Background(), tc.deadline)
				_, _, err := doCtx(t, ctx, s, "GET", srv.URL, nil)
				cancel()
				want := outbound.KindTimeout
				if tc.opens && i == 2 {
					want = outbound.KindCircuitOpen
				}
				if !isKind(err, want) {
					t.Fatalf("call %d: %v, want %s", i+1, err, want)
				}
			}
		})
	}
}
