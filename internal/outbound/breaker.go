package outbound

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sony/gobreaker/v2"
)

// Defaults of a grant's circuit breakers.
const (
	// DefaultBreakerFailures is breaker_failures' default: the consecutive failures
	// that open a destination's breaker.
	DefaultBreakerFailures = 5
	// DefaultBreakerCooldown is breaker_cooldown's default: how long an open breaker
	// refuses calls before it lets one probe through.
	DefaultBreakerCooldown = 30 * time.Second
	// MaxBreakers bounds the breakers one scope (a module) keeps: past it the least
	// recently used closed one is dropped (an open one only when all are open), so
	// that a deliverer under https://* that meets a new customer host with every job
	// holds a bounded number of them.
	MaxBreakers = 1024
)

// errServerError and errNotCounted are what a call reports to its breaker: a 5xx
// counts as a failure; an error that says nothing of the destination's health (a
// denied hop, a rate limit's wait, the job cancelling its call) counts as neither
// failure nor success.
var (
	errServerError = errors.New("server error (5xx)")
	errNotCounted  = errors.New("not counted")
)

// errGrantTimeout is the cause of a request's context when the grant's timeout ended
// it: the one timeout that counts against the destination's breaker. A deadline of the
// job's (or of the guest's own, for its request) shorter than the destination's answer
// says nothing of the destination's health.
var errGrantTimeout = fmt.Errorf("the grant's timeout passed: %w", context.DeadlineExceeded)

// Breakers holds the circuit breakers of outbound calls by scope (a module: its
// versions, reloads and canaries share them) and destination scheme://host:port, at
// most MaxBreakers per scope. A destination's breaker, not a grant entry's: under
// https://* one dead customer must not block the others. A breaker whose settings
// change (a reload with another breaker_failures) starts afresh. It is safe for
// concurrent use.
type Breakers struct {
	mu     sync.Mutex
	scopes map[string]*breakerSet
}

// breakerSet is one scope's breakers, most recently used first.
type breakerSet struct {
	order *list.List // of *breaker
	m     map[breakerKey]*list.Element
}

type breakerKey struct {
	dest     string
	failures int
	cooldown time.Duration
}

// NewBreakers returns an empty registry.
func NewBreakers() *Breakers { return &Breakers{scopes: map[string]*breakerSet{}} }

// breaker is one destination's circuit breaker, with the time its open state ends
// (gobreaker keeps it private), recorded as it opens.
type breaker struct {
	key breakerKey
	cb  *gobreaker.TwoStepCircuitBreaker[struct{}]

	mu      sync.Mutex
	reopen  time.Time // when the last open state ends
	tripped bool      // open or half-open: not closed
}

// get returns scope's breaker of dest under g's settings, made at its first use, and
// marks it used.
func (r *Breakers) get(scope, dest string, g *Grant) *breaker {
	k := breakerKey{dest, g.BreakerFailures, g.BreakerCooldown}
	r.mu.Lock()
	defer r.mu.Unlock()
	set := r.scopes[scope]
	if set == nil {
		set = &breakerSet{order: list.New(), m: map[breakerKey]*list.Element{}}
		r.scopes[scope] = set
	}
	if el, ok := set.m[k]; ok {
		set.order.MoveToFront(el)
		return el.Value.(*breaker)
	}
	b := newBreaker(k)
	set.m[k] = set.order.PushFront(b)
	if set.order.Len() > MaxBreakers {
		drop := set.evictable()
		set.order.Remove(drop)
		delete(set.m, drop.Value.(*breaker).key)
	}
	return b
}

// evictable returns the breaker to drop from a full set: the least recently used
// closed one, or when every other is open (or half-open), the least recently used of
// all. The newest, just made, is never dropped. An open breaker is an outage the
// jobs are waiting out: a guest under https://* that calls other names must not clear
// it.
func (set *breakerSet) evictable() *list.Element {
	front := set.order.Front()
	for el := set.order.Back(); el != front; el = el.Prev() {
		b := el.Value.(*breaker)
		b.mu.Lock()
		closed := !b.tripped
		b.mu.Unlock()
		if closed {
			return el
		}
	}
	return set.order.Back()
}

func newBreaker(k breakerKey) *breaker {
	b := &breaker{key: k}
	b.cb = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        k.dest,
		MaxRequests: 1, // half-open lets one probe through
		Timeout:     k.cooldown,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= uint32(k.failures) },
		IsExcluded:  func(err error) bool { return errors.Is(err, errNotCounted) },
		OnStateChange: func(_ string, _, to gobreaker.State) {
			// Called under gobreaker's lock as the state changes: only b's own fields
			// are touched. The state is kept here too, so that the registry can choose
			// a breaker to drop under its own lock without calling into gobreaker.
			b.mu.Lock()
			if to == gobreaker.StateOpen {
				b.reopen = time.Now().Add(k.cooldown)
			}
			b.tripped = to != gobreaker.StateClosed
			b.mu.Unlock()
		},
	})
	return b
}

// allow asks the breaker for a call. It returns done, to be called once with the
// call's outcome (nil, errServerError, errNotCounted or the failure), or a
// KindCircuitOpen *Error when the breaker is open, or half-open with its probe out.
func (b *breaker) allow() (done func(error), err error) {
	done, err = b.cb.Allow()
	if err == nil {
		return done, nil
	}
	b.mu.Lock()
	until := b.reopen
	b.mu.Unlock()
	if errors.Is(err, gobreaker.ErrTooManyRequests) || until.Before(time.Now()) {
		// Half-open: the probe is out; when calls go again is not known yet. Callers
		// that wait are told a quarter of the cooldown: told "now", the jobs waiting
		// out the outage came back at once and found the probe still out, again and
		// again (1,516 defers of 50 jobs over a 30 s outage).
		until = time.Now().Add(b.key.cooldown / 4)
		return nil, &Error{Kind: KindCircuitOpen, Until: until, Err: err,
			Msg: fmt.Sprintf("%s failed %d times in a row: its circuit breaker lets one probe through, and the probe is out", b.key.dest, b.key.failures)}
	}
	return nil, &Error{Kind: KindCircuitOpen, Until: until, Err: err,
		Msg: fmt.Sprintf("%s failed %d times in a row: its circuit breaker is open until %s", b.key.dest, b.key.failures, until.UTC().Format(time.RFC3339))}
}

// report tells the breaker a call's outcome (done from allow); it returns true, with
// when calls go again, when the outcome was a failure that leaves the breaker open:
// the failure that opened it, or a probe's that opened it again.
func (b *breaker) report(done func(error), outcome error) (opened bool, until time.Time) {
	done(outcome)
	if outcome == nil || errors.Is(outcome, errNotCounted) || b.cb.State() != gobreaker.StateOpen {
		return false, time.Time{}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return true, b.reopen
}

// outageKey is the context key of the Session a request belongs to: its round trips
// tell it of the outages they meet (Session.CircuitOpen).
type outageKey struct{}

// noteOutage records, for the round trip of ctx's request, that its destination is
// down until until (Session.CircuitOpen).
func noteOutage(ctx context.Context, until time.Time) {
	inSession(ctx, func(s *Session) {
		if !s.sawOpen || until.After(s.outage) {
			s.outage = until
		}
		s.sawOpen = true
	})
}

// noteFailure records, for the round trip of ctx's request, that it failed in a way
// its destination's breaker counts (Session.DestinationFailed).
func noteFailure(ctx context.Context) {
	inSession(ctx, func(s *Session) { s.sawFailure = true })
}

// noteRateLimit records, for the round trip of ctx's request, that a limit of
// [http.limits] held it back until until (Session.RateLimited).
func noteRateLimit(ctx context.Context, until time.Time) {
	inSession(ctx, func(s *Session) {
		if !s.sawLimit || until.After(s.limited) {
			s.limited = until
		}
		s.sawLimit = true
	})
}

// inSession calls f, under the session's lock, with the Session ctx's request
// belongs to, if any (a request of a client outside a session has none).
func inSession(ctx context.Context, f func(s *Session)) {
	s, ok := ctx.Value(outageKey{}).(*Session)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

// breakerOutcome is what the result of a round trip under ctx (the request's) tells
// its destination's breaker: connection failures (refused, DNS, reset, closed early)
// count as failures, as does a 5xx, and a timeout when it is the grant's (or the
// dial's own, the request's context still running); a TLS failure (a configuration
// problem, not an outage), a refusal of the grant or a blocked address, a rate limit's
// wait, a call the job cancelled and a timeout of the job's deadline count as neither.
func breakerOutcome(ctx context.Context, status int, err error) error {
	if err == nil {
		if status >= 500 {
			return errServerError
		}
		return nil
	}
	e := classify(err)
	switch {
	case e.Kind == KindTimeout && errors.Is(err, context.Canceled):
		return errNotCounted
	case e.Kind == KindTimeout && ctx.Err() != nil && !errors.Is(context.Cause(ctx), errGrantTimeout):
		return errNotCounted
	case e.Kind == KindRefused, e.Kind == KindDNS, e.Kind == KindConnection, e.Kind == KindTimeout:
		return err
	}
	return errNotCounted
}

// destination returns u's scheme://host:port, the key of its breaker: host in lower
// case without a trailing dot (the grant's match ignores it too), the scheme's port
// when the URL names none.
func destination(u *url.URL) string {
	return strings.ToLower(u.Scheme) + "://" + net.JoinHostPort(strings.TrimSuffix(strings.ToLower(u.Hostname()), "."), portOf(u))
}

// BreakerState is one destination's circuit breaker, as an operator sees it.
type BreakerState struct {
	// Destination is scheme://host:port.
	Destination string `json:"destination"`
	// State is "closed", "open" or "half-open".
	State string `json:"state"`
	// ConsecutiveFailures counts the failures in a row since the last success (in
	// the closed state).
	ConsecutiveFailures uint32 `json:"consecutive_failures"`
	// Until is when an open breaker lets a call through again; zero unless open.
	Until time.Time `json:"until,omitzero"`
}

// States returns scope's breakers, destinations in order.
func (r *Breakers) States(scope string) []BreakerState {
	r.mu.Lock()
	var bs []*breaker
	if set := r.scopes[scope]; set != nil {
		for el := set.order.Front(); el != nil; el = el.Next() {
			bs = append(bs, el.Value.(*breaker))
		}
	}
	r.mu.Unlock()
	out := make([]BreakerState, 0, len(bs))
	for _, b := range bs {
		st := b.cb.State()
		s := BreakerState{Destination: b.key.dest, State: st.String(), ConsecutiveFailures: b.cb.Counts().ConsecutiveFailures}
		if st == gobreaker.StateOpen {
			b.mu.Lock()
			s.Until = b.reopen
			b.mu.Unlock()
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b BreakerState) int { return strings.Compare(a.Destination, b.Destination) })
	return out
}
