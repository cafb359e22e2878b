package inspect

import (
	"math"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// The defaults of NewAuthLimiter: per client, a burst of 5 wrong tokens then one
// every 12 s (5 a minute); over all clients, 20 then one a second, against a guesser
// spread over many addresses.
const (
	ClientAuthBurst    = 5
	ClientAuthInterval = 12 * time.Second
	GlobalAuthBurst    = 20
	GlobalAuthInterval = time.Second
)

// KnownClients is how many clients that sent the right token are remembered, and
// KnownClientFor how long each after its last right token; see AuthLimiter.
const (
	KnownClients   = 4096
	KnownClientFor = 7 * 24 * time.Hour
)

// forgetClient is how long a client's count is kept after its last wrong token: by
// then it has refilled, and the map of clients stays as small as the guesses of an
// hour: those the limit over all clients lets through, and the known clients' own.
const forgetClient = time.Hour

// AuthLimiter bounds the wrong tokens tried at a host, so that its token cannot be
// guessed at line rate: per client (an IPv4 address, an IPv6 /64, which one client
// commonly has whole) a small burst then a slow refill, and a cap over all clients
// against a guesser spread over many addresses. Only a wrong token counts. A client
// over its limit is refused whatever it sent: it learns nothing from its guess,
// whether right or wrong.
//
// The cap over all clients does not apply to a client that sent the right token
// within KnownClientFor (the latest KnownClients of them): other clients' wrong
// tokens, which a guesser can keep coming for as long as it likes, never refuse it.
// Only its own limit does. A client not seen with the token cannot be told from a
// guesser before its token is looked at, which the cap rations: a guesser that keeps
// the cap empty holds off new clients (and all of them after a restart, which forgets
// who is known).
//
// The client is the connection's address: behind a reverse proxy all clients are
// one. No forwarded-for header is believed, since any client can send one.
type AuthLimiter struct {
	client      rate.Limit
	clientBurst int

	// mu is held across the limiters' calls (which take only their own lock, and
	// neither block nor call out), so that checking a token against both limits and
	// counting it is one step: requests in flight together cannot all pass the check
	// before any is counted, and no debt builds up.
	mu      sync.Mutex
	global  *rate.Limiter
	clients map[netip.Prefix]*clientCount
	sweepAt int                        // the map's size at which stale clients are next swept out
	known   map[netip.Prefix]time.Time // clients that sent the right token: when last

	beforeCount func() // a test's hook: a token was read and is not counted yet
}

type clientCount struct {
	lim  *rate.Limiter
	last time.Time // of the last wrong token
}

// NewAuthLimiter returns a limiter with the default limits (ClientAuthBurst...).
func NewAuthLimiter() *AuthLimiter {
	return &AuthLimiter{
		client: rate.Every(ClientAuthInterval), clientBurst: ClientAuthBurst,
		global:  rate.NewLimiter(rate.Every(GlobalAuthInterval), GlobalAuthBurst),
		clients: map[netip.Prefix]*clientCount{}, sweepAt: 1024,
		known: map[netip.Prefix]time.Time{},
	}
}

// clientOf is the key of r's client: its address as a /32, or its IPv6 /64; the zero
// Prefix (one client for all of them) for an address that does not parse.
func clientOf(r *http.Request) netip.Prefix {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Prefix{}
	}
	a := ap.Addr().Unmap().WithZone("")
	bits := 32
	if a.Is6() {
		bits = 64
	}
	p, _ := a.Prefix(bits)
	return p
}

// Check counts a token that r sent, right says whether it is the host's, and says
// how long r's client must wait before a token it sends is looked at: zero when this
// one is (the caller then serves r or refuses it as wrong), else the caller refuses r
// with 429 whatever right says. The caller compares the token in constant time
// before, so that nothing about it shows in how long a refusal takes.
func (l *AuthLimiter) Check(r *http.Request, right bool) time.Duration {
	if l.beforeCount != nil {
		l.beforeCount()
	}
	now := time.Now()
	key := clientOf(r)
	l.mu.Lock()
	defer l.mu.Unlock()
	at, known := l.known[key]
	known = known && now.Sub(at) <= KnownClientFor
	c := l.clients[key]
	var d time.Duration
	if c != nil {
		d = wait(c.lim, now)
	}
	if !known {
		d = max(d, wait(l.global, now))
	}
	if d > 0 {
		return d
	}
	if right {
		l.remember(key, now)
		return 0
	}
	if c == nil {
		c = l.newClient(key, now)
	}
	c.last = now
	// Both hold a whole token (checked above, under mu): neither goes into debt.
	c.lim.AllowN(now, 1)
	if !known {
		l.global.AllowN(now, 1)
	}
	return 0
}

// wait is how long until lim holds a whole token.
func wait(lim *rate.Limiter, now time.Time) time.Duration {
	short := 1 - lim.TokensAt(now)
	if short <= 0 {
		return 0
	}
	return time.Duration(short / float64(lim.Limit()) * float64(time.Second))
}

// newClient adds key's count, first sweeping out the clients that have refilled
// when the map has grown; under mu.
func (l *AuthLimiter) newClient(key netip.Prefix, now time.Time) *clientCount {
	if len(l.clients) >= l.sweepAt {
		for k, old := range l.clients {
			if now.Sub(old.last) > forgetClient {
				delete(l.clients, k)
			}
		}
		l.sweepAt = max(1024, 2*len(l.clients))
	}
	c := &clientCount{lim: rate.NewLimiter(l.client, l.clientBurst)}
	l.clients[key] = c
	return c
}

// remember records that key's client sent the right token at now; under mu. When
// KnownClients are remembered, the one longest without a right token makes room
// (only the right token adds one, so a guesser cannot push anyone out).
func (l *AuthLimiter) remember(key netip.Prefix, now time.Time) {
	if _, ok := l.known[key]; !ok && len(l.known) >= KnownClients {
		oldest, first := netip.Prefix{}, true
		for k, at := range l.known {
			if first || at.Before(l.known[oldest]) {
				oldest, first = k, false
			}
		}
		delete(l.known, oldest)
	}
	l.known[key] = now
}

// RetryAfter is the value of a Retry-After header for a wait of d: whole seconds,
// rounded up, at least 1.
func RetryAfter(d time.Duration) string {
	return strconv.Itoa(max(1, int(math.Ceil(d.Seconds()))))
}
