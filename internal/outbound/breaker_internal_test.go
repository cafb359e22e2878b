package outbound

import (
	"errors"
	"fmt"
	"net/url"
	"testing"
	"testing/synctest"
	"time"
)

// The breaker opens after breaker_failures consecutive failures, refuses calls until
// the recorded reopen time, then lets one probe through: its failure opens it for
// another cooldown, its success closes it. A call that is not counted (a rate
// limit's wait, a cancelled call) neither opens nor resets it.
func TestBreakerStates(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		g := &Grant{BreakerFailures: 3, BreakerCooldown: 30 * time.Second}
		r := NewBreakers()
		b := r.get("m", "https://api.example.com:443", g)
		call := func(outcome error) error {
			t.Helper()
			done, err := b.allow()
			if err != nil {
				return err
			}
			done(outcome)
			return nil
		}
		refused := &Error{Kind: KindRefused, Msg: "refused"}
		for i, outcome := range []error{refused, errServerError, errNotCounted, refused} {
			if err := call(outcome); err != nil {
				t.Fatalf("call %d refused before the third failure: %v", i+1, err)
			}
		}
		opened := time.Now()
		err := call(nil)
		var e *Error
		if !errors.As(err, &e) || e.Kind != KindCircuitOpen || !e.Until.Equal(opened.Add(30*time.Second)) {
			t.Fatalf("after 3 failures: %v (until %v), want circuit open until %v", err, e.Until, opened.Add(30*time.Second))
		}
		if st := r.States("m"); len(st) != 1 || st[0].State != "open" || !st[0].Until.Equal(e.Until) {
			t.Fatalf("states %+v", st)
		}
		time.Sleep(30*time.Second + time.Millisecond)
		probe, err := b.allow()
		if err != nil {
			t.Fatalf("after the cooldown: %v, want a probe", err)
		}
		if err := call(nil); !errors.As(err, &e) || e.Kind != KindCircuitOpen || !e.Until.Equal(time.Now().Add(30*time.Second/4)) {
			t.Fatalf("beside the probe: %v, want circuit open (the probe is out) for a quarter of the cooldown", err)
		}
		probe(errServerError)
		if err := call(nil); !errors.As(err, &e) || !e.Until.Equal(time.Now().Add(30*time.Second)) {
			t.Fatalf("after a failed probe: %v, want open for another cooldown", err)
		}
		time.Sleep(31 * time.Second)
		if err := call(nil); err != nil {
			t.Fatalf("probe: %v", err)
		}
		for i := range 5 {
			if err := call(nil); err != nil {
				t.Fatalf("call %d after a good probe: %v, want closed", i, err)
			}
		}
		if st := r.States("m"); st[0].State != "closed" || st[0].ConsecutiveFailures != 0 || !st[0].Until.IsZero() {
			t.Fatalf("states %+v", st)
		}
	})
}

// dest names the destination i of the breaker tests.
func dest(i int) string { return fmt.Sprintf("https://h%d.example:443", i) }

// openBreaker returns a grant whose breakers open at the first failure and cool down
// for cooldown, a set of breakers, and the breaker of scope m for dest(0), opened.
func openBreaker(cooldown time.Duration) (*Grant, *Breakers, *breaker) {
	g := &Grant{BreakerFailures: 1, BreakerCooldown: cooldown}
	r := NewBreakers()
	b := r.get("m", dest(0), g)
	done, _ := b.allow()
	done(errServerError)
	return g, r, b
}

// A scope keeps at most MaxBreakers breakers, the least recently used dropped; each
// scope has its own.
func TestBreakersBoundedLeastRecentlyUsed(t *testing.T) {
	t.Parallel()
	g, r, first := openBreaker(time.Minute) // open: a fresh breaker would be closed
	for i := 1; i < MaxBreakers; i++ {
		r.get("m", dest(i), g)
	}
	r.get("m", dest(0), g) // used again: dest(1) is now the least recently used
	r.get("m", dest(MaxBreakers), g)
	if n := len(r.States("m")); n != MaxBreakers {
		t.Fatalf("%d breakers, want %d", n, MaxBreakers)
	}
	if b := r.get("m", dest(0), g); b != first {
		t.Fatal("the recently used breaker was dropped")
	}
	for _, s := range r.States("m") {
		if s.Destination == dest(1) {
			t.Fatalf("%s kept, want it dropped as the least recently used", dest(1))
		}
	}
	if st := r.States("other"); len(st) != 0 {
		t.Fatalf("another scope has breakers %+v", st)
	}
	if b := r.get("other", dest(0), g); b == first {
		t.Fatal("two scopes share a breaker")
	}
}

// A destination is one breaker however its URL spells the host: case, the scheme's
// port named or not, a trailing dot (as the grant's match ignores it).
func TestDestinationOfSpellingsOfOneHost(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{"https://API.example.com/x", "https://api.example.com:443/", "https://api.example.com./y", "HTTPS://Api.Example.Com.:443"} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		if got := destination(u); got != "https://api.example.com:443" {
			t.Errorf("destination(%s) = %s, want https://api.example.com:443", raw, got)
		}
	}
}

// A scope full of breakers drops a closed one before an open one, however long ago the
// open one was used: under https://* a guest that calls 1,024 other names must not
// clear an outage it met.
func TestBreakersKeepOpenOnesOverClosed(t *testing.T) {
	t.Parallel()
	g, r, open := openBreaker(time.Hour)
	for i := 1; i <= 2*MaxBreakers; i++ {
		r.get("m", dest(i), g)
	}
	if b := r.get("m", dest(0), g); b != open {
		t.Fatal("the open breaker was dropped for a closed one")
	}
	if n := len(r.States("m")); n != MaxBreakers {
		t.Fatalf("%d breakers, want %d", n, MaxBreakers)
	}
	// With every breaker open, the least recently used goes.
	all := NewBreakers()
	for i := 0; i <= MaxBreakers; i++ {
		done, _ := all.get("m", dest(i), g).allow()
		done(errServerError)
	}
	for _, s := range all.States("m") {
		if s.Destination == dest(0) || s.State != "open" {
			t.Fatalf("breaker %+v: want dest 0 dropped, the others open", s)
		}
	}
}
