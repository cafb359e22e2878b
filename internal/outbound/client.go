package outbound

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"time"

	"code.dny.dev/ssrf"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/time/rate"
)

// Resolver resolves host names; *net.Resolver is one. Tests give their own to make a
// name resolve where they want.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Options are the host's settings for every grant's client.
type Options struct {
	// RootCAs are the trusted roots for https; nil means the system's.
	RootCAs *x509.CertPool
	// Resolver resolves host names; nil means net.DefaultResolver.
	Resolver Resolver
	// Limiters holds the limiters of [http.limits], shared by every client of one
	// Scope (a module's versions, a reload and a canary); nil means the client's own.
	Limiters *Limiters
	// Scope names whose limits a client takes from Limiters, and whose circuit
	// breakers from Breakers: the module's name.
	Scope string
	// IdleConnsPerHost is how many idle connections to one destination a client keeps
	// for reuse; a request beyond them opens a new connection, closed after use. Size it
	// to the jobs that can call one destination at once (the worker's concurrency).
	// Zero means 64.
	IdleConnsPerHost int
	// Breakers holds the destinations' circuit breakers, shared by every client of
	// one Scope; nil means the client's own.
	Breakers *Breakers
	// Tracer makes a Client span of each request, a child of the span in the
	// context given to Session.Start, whose W3C traceparent every hop of the request
	// carries in place of any the guest set. Nil turns tracing off: no span is made
	// and requests go as the guest wrote them.
	Tracer trace.Tracer
}

// Limiters holds the token buckets and concurrency caps of [http.limits] by scope and
// entry, so that a module's limits hold on the host across its versions: a reload
// does not refill a bucket, a canary beside the current version does not double it.
// A limit whose values change (a reload with another rate) starts afresh. It is safe
// for concurrent use.
type Limiters struct {
	mu sync.Mutex
	m  map[limiterKey]*entryLimit
}

type limiterKey struct {
	scope, entry string
	limit        Limit
}

// NewLimiters returns an empty registry.
func NewLimiters() *Limiters { return &Limiters{m: map[limiterKey]*entryLimit{}} }

// get returns scope's limiter of e, made at its first use.
func (r *Limiters) get(scope string, e *Entry) *entryLimit {
	k := limiterKey{scope, e.String(), *e.Limit}
	r.mu.Lock()
	defer r.mu.Unlock()
	l := r.m[k]
	if l == nil {
		l = newEntryLimit(e.Limit)
		r.m[k] = l
	}
	return l
}

func newEntryLimit(lim *Limit) *entryLimit {
	l := &entryLimit{}
	if lim.PerSecond > 0 {
		l.bucket = rate.NewLimiter(rate.Limit(lim.PerSecond), max(lim.Burst, 1))
		l.interval = time.Duration(math.Round(float64(time.Second) / lim.PerSecond))
	}
	if lim.Concurrency > 0 {
		l.slots = make(chan struct{}, lim.Concurrency)
	}
	return l
}

// Client makes the requests of one module under its grant. It holds two transports,
// each with its own connection pool: a strict one for name URLs, whose dialer refuses
// every non-global address, and one for the URLs that name an IP literal, a CIDR or
// localhost the grant names, whose dialer allows those prefixes too. A Guardian's
// allow list applies to every connection it guards, so the two never share one.
// A Client is safe for concurrent use; Close it when the module is retired.
type Client struct {
	grant           *Grant
	strict, private *http.Transport
	client          *http.Client
	limits          map[*Entry]*entryLimit
	breakers        *Breakers
	scope           string
	tracer          trace.Tracer // nil: tracing is off
}

// entryLimit enforces an entry's [http.limits] for the client's requests: a token
// bucket and a concurrency cap, each waited on under the request's context (the job's
// deadline and the grant's timeout).
type entryLimit struct {
	bucket   *rate.Limiter // nil: no rate limit
	interval time.Duration // the bucket's time per token
	slots    chan struct{} // nil: no concurrency cap

	// mu guards next: the time after the last slot promised to a request the bucket
	// held back (Error.Until), so that the jobs deferred to them come back spaced by
	// the rate rather than all at the next token.
	mu   sync.Mutex
	next time.Time
}

// NewClient returns the client of grant.
func NewClient(grant *Grant, opts Options) *Client {
	res := opts.Resolver
	if res == nil {
		res = net.DefaultResolver
	}
	var v4, v6 []netip.Prefix
	for _, e := range grant.Allow {
		switch {
		case e.kind == hostLocalhost:
			v4 = append(v4, netip.MustParsePrefix("127.0.0.0/8"))
			v6 = append(v6, netip.MustParsePrefix("::1/128"))
		case e.private() && e.prefix.Addr().Is4():
			v4 = append(v4, e.prefix)
		case e.private():
			v6 = append(v6, e.prefix)
		}
	}
	// Ports are checked against the grant in layer 1; ssrf's default allows only 80
	// and 443. WithAllowedV6Prefixes with no prefix keeps IPv6 to global unicast.
	strict := ssrf.New(ssrf.WithAnyPort())
	private := ssrf.New(ssrf.WithAnyPort(), ssrf.WithAllowedV4Prefixes(v4...), ssrf.WithAllowedV6Prefixes(v6...))
	c := &Client{grant: grant, strict: newTransport(strict, res, opts, grant.Timeout), private: newTransport(private, res, opts, grant.Timeout),
		limits: map[*Entry]*entryLimit{}}
	c.breakers, c.scope, c.tracer = opts.Breakers, opts.Scope, opts.Tracer
	if c.breakers == nil {
		c.breakers = NewBreakers()
	}
	reg := opts.Limiters
	if reg == nil {
		reg = NewLimiters()
	}
	for _, e := range grant.Allow {
		if e.Limit != nil {
			c.limits[e] = reg.get(opts.Scope, e)
		}
	}
	c.client = &http.Client{
		Transport: (*grantTransport)(c),
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) > MaxRedirects {
				return &Error{Kind: KindTooManyRedirects, Msg: fmt.Sprintf("stopped after %d redirects", MaxRedirects)}
			}
			// The hop is checked here, before anything is sent to it (and again in
			// RoundTrip).
			_, err := grant.Match(req.URL)
			return err
		},
	}
	return c
}

// Close closes the idle connections of both pools.
func (c *Client) Close() {
	c.strict.CloseIdleConnections()
	c.private.CloseIdleConnections()
}

// grantTransport routes each request, first or redirect hop, through the transport
// its matching entry calls for, and adds the entry's headers.
type grantTransport Client

func (t *grantTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	e, err := t.grant.Match(req.URL)
	if err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	tr := t.strict
	if e.private() {
		tr = t.private
	}
	// The destination's breaker is asked first: while it is open nothing is sent, and
	// no token of the rate limit is spent.
	b := t.breakers.get(t.scope, destination(req.URL), t.grant)
	done, err := b.allow()
	if err != nil {
		var e *Error
		if errors.As(err, &e) {
			noteOutage(req.Context(), e.Until)
		}
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	report := func(outcome error) {
		if outcome != nil && !errors.Is(outcome, errNotCounted) {
			noteFailure(req.Context())
		}
		if opened, until := b.report(done, outcome); opened {
			noteOutage(req.Context(), until)
		}
	}
	release := func() {}
	if l := t.limits[e]; l != nil {
		var err error
		if release, err = l.acquire(req.Context(), e); err != nil {
			report(errNotCounted)
			var le *Error
			if errors.As(err, &le) && le.Kind == KindRateLimited {
				noteRateLimit(req.Context(), le.Until)
			}
			if req.Body != nil {
				req.Body.Close()
			}
			return nil, err
		}
	}
	if len(e.Header) > 0 || t.tracer != nil {
		// A RoundTripper must not change the request it was given. The entry's
		// headers go only to the entry's destinations: a redirect elsewhere does not
		// carry them, since each hop comes here again.
		req = req.Clone(req.Context())
		for k, vs := range e.Header {
			req.Header[k] = vs
		}
		if t.tracer != nil {
			// Every hop, redirects too, carries the request's span (its context holds
			// it: Session.Start put it there).
			inject(req.Context(), req.Header)
		}
	}
	// The slot is given back once: when the body is closed or read to its end, or
	// when the request's context ends, whichever comes first, so that no body left
	// unclosed holds it.
	release = sync.OnceFunc(release)
	stop := context.AfterFunc(req.Context(), release)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		report(breakerOutcome(req.Context(), 0, err))
		stop()
		release()
		return nil, err
	}
	report(breakerOutcome(req.Context(), resp.StatusCode, nil))
	resp.Body = &releasingBody{ReadCloser: resp.Body, release: func() { stop(); release() }}
	return resp, nil
}

// acquire waits for the entry's bucket and a concurrency slot under ctx; a wait that
// would pass ctx's deadline, or that it passed, fails as rate limited. A wait that
// ends because ctx was cancelled (the guest closed the call, the job ended) is no
// limit: it fails as classify says of the cancellation. release gives the slot back.
func (l *entryLimit) acquire(ctx context.Context, e *Entry) (release func(), err error) {
	if l.bucket != nil {
		if err := l.bucket.Wait(ctx); err != nil {
			if errors.Is(ctx.Err(), context.Canceled) {
				return nil, classify(ctx.Err())
			}
			return nil, &Error{Kind: KindRateLimited, Until: l.slot(time.Now()), Msg: fmt.Sprintf("the rate limit of %s (%g/s) would hold the request past its deadline", e, e.Limit.PerSecond), Err: err}
		}
	}
	if l.slots == nil {
		return func() {}, nil
	}
	select {
	case l.slots <- struct{}{}:
		return func() { <-l.slots }, nil
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.Canceled) {
			return nil, classify(ctx.Err())
		}
		return nil, &Error{Kind: KindRateLimited, Until: time.Now().Add(time.Second), Msg: fmt.Sprintf("no concurrency slot of %s (%d) came free before the deadline", e, e.Limit.Concurrency), Err: ctx.Err()}
	}
}

// slot returns the time promised to a request the bucket held back at now: when the
// bucket's next token is due (from its tokens, reservations counted: nothing is
// reserved or spent), or one interval after the slot promised before, whichever is
// later. It is a promise of spacing, not a reservation: the requests that come back
// at their slots still take their tokens from the bucket like any other.
func (l *entryLimit) slot(now time.Time) time.Time {
	due := now
	if tokens := l.bucket.TokensAt(now); tokens < 1 {
		due = now.Add(time.Duration(math.Ceil((1 - tokens) * float64(l.interval))))
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	slot := due
	if l.next.After(slot) {
		slot = l.next
	}
	l.next = slot.Add(l.interval)
	return slot
}

// releasingBody gives the request's concurrency slot back when its body is closed or
// read to its end.
type releasingBody struct {
	io.ReadCloser
	release func()
}

func (b *releasingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.release()
	}
	return n, err
}

func (b *releasingBody) Close() error {
	err := b.ReadCloser.Close()
	b.release()
	return err
}

func newTransport(g *ssrf.Guardian, res Resolver, opts Options, connectTimeout time.Duration) *http.Transport {
	roots, idle := opts.RootCAs, cmp.Or(opts.IdleConnsPerHost, 64)
	d := &net.Dialer{
		// No timeout of its own: dial shares connectTimeout among the addresses.
		Control: func(network, address string, c syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return &Error{Kind: KindBlocked, Msg: fmt.Sprintf("cannot parse address %s", address), Err: err}
			}
			// ssrf takes an IPv4-mapped address down its IPv6 path, where it is
			// outside global unicast; unmapped, it is judged as the IPv4 address it is,
			// by the same lists as a plain IPv4 address.
			ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
			if err := g.Safe(network, ap.String(), c); err != nil {
				return &Error{Kind: KindBlocked, Msg: fmt.Sprintf("address %s is not allowed (a granted name must resolve to public addresses)", ap.Addr()), Err: err}
			}
			return nil
		},
	}
	dial := func(ctx context.Context, network, address string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(address)
		if err != nil {
			return nil, err
		}
		// net/http dials without the request's deadline (the connection may serve a
		// later request), so the dial, the name's lookup included, takes at most the
		// grant's timeout of its own: no lookup outlives the job that asked for it.
		deadline := time.Now().Add(connectTimeout)
		ctx, cancel := context.WithDeadline(ctx, deadline)
		defer cancel()
		var addrs []netip.Addr
		if a, err := netip.ParseAddr(host); err == nil {
			addrs = []netip.Addr{a}
		} else if strings.EqualFold(strings.TrimSuffix(host, "."), "localhost") {
			// localhost is the loopback (RFC 6761), never what a resolver (a hosts
			// file, a DNS server) may say of it.
			addrs = []netip.Addr{netip.AddrFrom4([4]byte{127, 0, 0, 1}), netip.IPv6Loopback()}
		} else {
			addrs, err = res.LookupNetIP(ctx, "ip", host)
			if err != nil && ctx.Err() != nil {
				return nil, &Error{Kind: KindTimeout, Msg: fmt.Sprintf("resolve %s: no answer within the connect time (%v)", host, connectTimeout), Err: err}
			}
			if err != nil {
				return nil, &Error{Kind: KindDNS, Msg: fmt.Sprintf("resolve %s: %v", host, err), Err: err}
			}
			if len(addrs) == 0 {
				return nil, &Error{Kind: KindDNS, Msg: fmt.Sprintf("%s has no addresses", host)}
			}
		}
		// Each address is dialled, and checked by the dialer's control hook, in turn;
		// the first connection wins. The time the lookup left is shared among the
		// addresses as net.Dialer shares its own: an address that never answers does
		// not take the others' time.
		var failed, blocked []error
		for i, a := range addrs {
			actx, cancel := context.WithDeadline(ctx, partDeadline(time.Now(), deadline, len(addrs)-i))
			conn, err := d.DialContext(actx, network, net.JoinHostPort(a.Unmap().String(), port))
			cancel()
			if err == nil {
				return conn, nil
			}
			if isKind(err, KindBlocked) {
				blocked = append(blocked, err)
			} else {
				failed = append(failed, err)
			}
			if ctx.Err() != nil || !time.Now().Before(deadline) {
				break
			}
		}
		if len(failed) == 0 {
			return nil, errors.Join(blocked...)
		}
		// BLOCKED only when every address is: otherwise the request failed as the
		// last address it was allowed to reach failed (refused, timed out), and the
		// blocked ones are named but not classified. The kind is decided here, on
		// the dialer's own error: *url.Error's Timeout does not look into a joined one.
		kind := classify(failed[len(failed)-1]).Kind
		msgs := make([]string, 0, len(failed)+len(blocked))
		for _, err := range append(failed, blocked...) {
			msgs = append(msgs, err.Error())
		}
		return nil, &Error{Kind: kind, Msg: strings.Join(msgs, "; "), Err: errors.Join(failed...)}
	}
	// A TLS handshake, too, runs without the request's deadline.
	handshake := min(10*time.Second, connectTimeout)
	return &http.Transport{
		Proxy:                  nil, // a proxy would hide the destination from the checks
		DialContext:            dial,
		TLSClientConfig:        &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           max(256, idle),
		MaxIdleConnsPerHost:    idle,
		IdleConnTimeout:        90 * time.Second,
		TLSHandshakeTimeout:    handshake,
		MaxResponseHeaderBytes: 1 << 20, // a head is held in memory whole
		ExpectContinueTimeout:  time.Second,
	}
}

// minDialPart is the least time an address of several is given to connect (or all
// the time left, when less is), as net.Dialer gives.
const minDialPart = 2 * time.Second

// partDeadline is the deadline of the next of left addresses to dial before deadline:
// an equal part of the time left, at least minDialPart.
func partDeadline(now, deadline time.Time, left int) time.Time {
	part := deadline.Sub(now) / time.Duration(left)
	if part < minDialPart {
		part = min(deadline.Sub(now), minDialPart)
	}
	return now.Add(part)
}
