package api

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

// forgetClient is how long a client's count is kept after its last wrong token: by
// then it has refilled (unless concurrent guesses drove it deep into debt, which then
// is forgiven), and the map of clients stays as small as the guesses of an hour.
const forgetClient = time.Hour

// AuthLimiter bounds the wrong tokens tried at a host, so that its token cannot be
// guessed at line rate: per client (an IPv4 address, an IPv6 /64, which one client
// commonly has whole) a small burst then a slow refill, and a cap over all clients.
// Only a wrong token counts. Wait is asked before a token is compared: a client over
// the limit is refused without its guess being looked at, so that it learns nothing
// from it, whether right or wrong.
//
// The client is the connection's address: behind a reverse proxy all clients are
// one. No forwarded-for header is believed, since any client can send one.
type AuthLimiter struct {
	client      rate.Limit
	clientBurst int
	global      *rate.Limiter

	mu      sync.Mutex
	clients map[netip.Prefix]*clientCount
	sweepAt int // the map's size at which stale clients are next swept out
}

type clientCount struct {
	lim  *rate.Limiter
	last time.Time // of the last wrong token; under AuthLimiter.mu
}

// NewAuthLimiter returns a limiter with the default limits (ClientAuthBurst...).
func NewAuthLimiter() *AuthLimiter {
	return &AuthLimiter{
		client: rate.Every(ClientAuthInterval), clientBurst: ClientAuthBurst,
		global:  rate.NewLimiter(rate.Every(GlobalAuthInterval), GlobalAuthBurst),
		clients: map[netip.Prefix]*clientCount{}, sweepAt: 1024,
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

// Wait says how long r's client must wait before a token it sends is looked at: zero
// when it can try one now.
func (l *AuthLimiter) Wait(r *http.Request) time.Duration {
	now := time.Now()
	l.mu.Lock()
	c := l.clients[clientOf(r)]
	l.mu.Unlock()
	d := wait(l.global, now)
	if c != nil {
		d = max(d, wait(c.lim, now))
	}
	return d
}

// wait is how long until lim holds a whole token.
func wait(lim *rate.Limiter, now time.Time) time.Duration {
	short := 1 - lim.TokensAt(now)
	if short <= 0 {
		return 0
	}
	return time.Duration(short / float64(lim.Limit()) * float64(time.Second))
}

// Failed counts a wrong token from r's client. It is counted even past the limit
// (requests that passed Wait together): the debt makes the client's next wait longer.
func (l *AuthLimiter) Failed(r *http.Request) {
	now := time.Now()
	key := clientOf(r)
	l.mu.Lock()
	c := l.clients[key]
	if c == nil {
		if len(l.clients) >= l.sweepAt {
			for k, old := range l.clients {
				if now.Sub(old.last) > forgetClient {
					delete(l.clients, k)
				}
			}
			l.sweepAt = max(1024, 2*len(l.clients))
		}
		c = &clientCount{lim: rate.NewLimiter(l.client, l.clientBurst)}
		l.clients[key] = c
	}
	c.last = now
	l.mu.Unlock()
	c.lim.ReserveN(now, 1)
	l.global.ReserveN(now, 1)
}

// RetryAfter is the value of a Retry-After header for a wait of d: whole seconds,
// rounded up, at least 1.
func RetryAfter(d time.Duration) string {
	return strconv.Itoa(max(1, int(math.Ceil(d.Seconds()))))
}
