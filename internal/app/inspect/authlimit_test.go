package inspect_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/wasmjobs/wasmjobs/internal/app/api"
	"github.com/wasmjobs/wasmjobs/internal/app/inspect"
)

// newAPI is the API with the token "s3cret" and the limiter l (nil: its own), over an
// Inspector of cfg: the limiter is driven through the API's token check.
func newAPI(cfg inspect.Config, l *inspect.AuthLimiter) http.Handler {
	return api.New(api.Config{Token: "s3cret", AuthLimiter: l, Inspector: inspect.New(cfg)})
}

// authed sends GET /v1/schedules (a page that needs no backend) from addr with the
// Authorization header auth (none when empty) to h.
func authed(h http.Handler, addr, auth string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("GET", "http://localhost/v1/schedules", nil)
	r.RemoteAddr = addr
	if auth != "" {
		r.Header.Set("Authorization", auth)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// Wrong bearer tokens are limited per client as the dashboard's are: past the burst
// the client is answered 429 with Retry-After, and its token, right or wrong, is not
// looked at. A request without a token tries none and is not counted. In a synctest
// bubble, so that the Retry-After does not depend on how fast the requests went.
func TestWrongBearerTokensAreLimited(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := newAPI(inspect.Config{}, nil)
		const addr = "192.0.2.1:4000"
		for range 2 * inspect.ClientAuthBurst {
			if w := authed(h, addr, ""); w.Code != 401 {
				t.Fatalf("no token: %d, want 401", w.Code)
			}
		}
		if w := authed(h, addr, "Bearer s3cret"); w.Code != 200 {
			t.Fatalf("the right token after requests without one: %d, want 200", w.Code)
		}
		for i := range inspect.ClientAuthBurst {
			if w := authed(h, addr, fmt.Sprint("Bearer guess", i)); w.Code != 401 {
				t.Fatalf("wrong token %d: %d, want 401", i+1, w.Code)
			}
		}
		if w := authed(h, addr, "Bearer s3cret"); w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "12" {
			t.Errorf("the right token after %d wrong ones: %d, Retry-After %q; want 429, 12", inspect.ClientAuthBurst, w.Code, w.Header().Get("Retry-After"))
		}
	})
}

// Wrong tokens in flight together are each counted before any is looked at: no more
// of them are looked at than the limit holds, the rest are refused, and no debt is
// left that would make the next wait longer than one refill.
func TestWrongTokensInFlightTogetherRunUpNoDebt(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		addr   func(i int) string
		looked int    // how many of them are looked at (401)
		retry  string // the Retry-After of a right token after them, from next
		next   string
	}{
		{name: "one client", addr: func(i int) string { return fmt.Sprintf("192.0.2.1:%d", 4000+i) },
			looked: inspect.ClientAuthBurst, retry: "12", next: "192.0.2.1:5000"},
		{name: "many clients", addr: func(i int) string { return fmt.Sprintf("198.51.100.%d:4000", i+1) },
			looked: inspect.GlobalAuthBurst, retry: "1", next: "203.0.113.1:4000"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				const n = 2 * inspect.GlobalAuthBurst
				l := inspect.NewAuthLimiter()
				// Every request waits at the hook until all n are there: all are in
				// flight at once, as n parallel requests can be.
				var arrived atomic.Int32
				all := make(chan struct{})
				inspect.SetBeforeCount(l, func() {
					if arrived.Add(1) == n {
						close(all)
					}
					<-all
				})
				h := newAPI(inspect.Config{}, l)
				codes := make([]int, n)
				var wg sync.WaitGroup
				for i := range n {
					wg.Go(func() { codes[i] = authed(h, c.addr(i), "Bearer wrong").Code })
				}
				wg.Wait()
				inspect.SetBeforeCount(l, nil)
				looked, refused := 0, 0
				for _, code := range codes {
					switch code {
					case 401:
						looked++
					case 429:
						refused++
					}
				}
				if looked != c.looked || refused != n-c.looked {
					t.Errorf("%d wrong tokens in flight together: %d looked at (401), %d refused (429); want %d and %d", n, looked, refused, c.looked, n-c.looked)
				}
				if w := authed(h, c.next, "Bearer s3cret"); w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != c.retry {
					t.Errorf("the right token after them: %d, Retry-After %q; want 429, %s (one refill, no debt)", w.Code, w.Header().Get("Retry-After"), c.retry)
				}
			})
		})
	}
}

// A client that sent the right token is not held off by other clients' wrong ones:
// a guesser spread over many addresses that keeps the limit over all clients empty
// for an hour refuses only clients the host has not seen with the token.
func TestARightTokenIsNotRefusedForOthersWrongOnes(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := newAPI(inspect.Config{}, nil)
		const known = "192.0.2.7:4000"
		if w := authed(h, known, "Bearer s3cret"); w.Code != 200 {
			t.Fatalf("the right token: %d, want 200", w.Code)
		}
		// 60 addresses, each a wrong token a minute: under every client's limit, and
		// together one a second, all that the limit over all clients refills.
		guess := func(i int) *httptest.ResponseRecorder {
			return authed(h, fmt.Sprintf("198.51.100.%d:4000", i%60+1), "Bearer wrong")
		}
		for i := range inspect.GlobalAuthBurst {
			guess(i)
		}
		for i := range 3600 {
			time.Sleep(time.Second)
			if w := guess(i); w.Code != 401 {
				t.Fatalf("guess %d: %d, want 401 (the guesser keeps within the limits)", i, w.Code)
			}
			if i%600 == 0 {
				if w := authed(h, known, "Bearer s3cret"); w.Code != 200 {
					t.Fatalf("after %d s of guesses from others, the right token of a client seen with it: %d, want 200", i+1, w.Code)
				}
			}
		}
		// Someone new cannot be told from a guesser before their token is looked at,
		// which the limit over all clients rations.
		if w := authed(h, "203.0.113.1:4000", "Bearer s3cret"); w.Code != http.StatusTooManyRequests {
			t.Errorf("a new client's right token while others' guesses keep the limit empty: %d, want 429", w.Code)
		}
	})
}

// Only a bearer token is a token tried: another scheme (Basic, forwarded by a proxy
// that authenticated the user) is answered 401 and not counted against the client.
func TestOtherAuthorizationSchemesAreNotCounted(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := newAPI(inspect.Config{}, nil)
		const addr = "192.0.2.1:4000"
		for i := range 4 * inspect.ClientAuthBurst {
			if w := authed(h, addr, "Basic dXNlcjpwYXNz"); w.Code != 401 {
				t.Fatalf("Basic %d: %d, want 401", i+1, w.Code)
			}
		}
		if w := authed(h, addr, "Bearer s3cret"); w.Code != 200 {
			t.Errorf("the right bearer token after %d Basic headers: %d, want 200", 4*inspect.ClientAuthBurst, w.Code)
		}
	})
}

// The clients exempt from the limit over all clients are bounded: one is forgotten
// KnownClientFor after its last right token, and past KnownClients the one longest
// without a right token makes room.
func TestKnownClientsAreBounded(t *testing.T) {
	t.Parallel()
	drain := func(h http.Handler) {
		for i := range inspect.GlobalAuthBurst {
			authed(h, fmt.Sprintf("198.51.100.%d:4000", i+1), "Bearer wrong")
		}
	}
	t.Run("for a time", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			h := newAPI(inspect.Config{}, nil)
			authed(h, "192.0.2.1:4000", "Bearer s3cret")
			authed(h, "192.0.2.2:4000", "Bearer s3cret")
			time.Sleep(inspect.KnownClientFor - time.Second)
			authed(h, "192.0.2.2:4000", "Bearer s3cret") // each right token renews
			time.Sleep(2 * time.Second)
			drain(h)
			if w := authed(h, "192.0.2.1:4000", "Bearer s3cret"); w.Code != http.StatusTooManyRequests {
				t.Errorf("a client last seen with the token %v ago, the limit over all clients empty: %d, want 429", inspect.KnownClientFor+time.Second, w.Code)
			}
			if w := authed(h, "192.0.2.2:4000", "Bearer s3cret"); w.Code != 200 {
				t.Errorf("a client seen with the token 2 s ago, the limit over all clients empty: %d, want 200", w.Code)
			}
		})
	})
	t.Run("in number", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			h := newAPI(inspect.Config{}, nil)
			addr := func(i int) string { return fmt.Sprintf("10.%d.%d.%d:4000", i>>16&255, i>>8&255, i&255) }
			for i := range inspect.KnownClients + 1 {
				if w := authed(h, addr(i), "Bearer s3cret"); w.Code != 200 {
					t.Fatalf("client %d's right token: %d, want 200", i, w.Code)
				}
				time.Sleep(time.Millisecond)
			}
			drain(h)
			if w := authed(h, addr(0), "Bearer s3cret"); w.Code != http.StatusTooManyRequests {
				t.Errorf("the client longest without a right token, %d newer ones since: %d, want 429", inspect.KnownClients, w.Code)
			}
			if w := authed(h, addr(1), "Bearer s3cret"); w.Code != 200 {
				t.Errorf("one of the latest %d clients with the right token: %d, want 200", inspect.KnownClients, w.Code)
			}
		})
	})
}
