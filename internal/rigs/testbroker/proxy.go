package testbroker

import (
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// Proxy is a loopback TCP proxy to a broker that a test can cut: an outage of that
// test's connections alone, without disturbing the broker other tests share.
type Proxy struct {
	t       testing.TB
	network string // of target: "tcp", or "unix" for a socket
	target  string
	ln      net.Listener

	mu     sync.Mutex
	thawed *sync.Cond // signalled when frozen or cut change
	conns  map[net.Conn]bool
	cut    bool
	cutCh  chan struct{} // closed by Cut
	frozen bool
	lag    time.Duration // what the broker sends is forwarded this long after it came
	lagSet chan struct{} // closed, and replaced, when lag changes
	wg     sync.WaitGroup
}

// NewProxy listens on a loopback port and forwards each connection to the broker of
// brokerURL. It is closed with the test.
func NewProxy(t testing.TB, brokerURL string) *Proxy {
	t.Helper()
	u, err := url.Parse(brokerURL)
	if err != nil {
		t.Fatalf("broker URL: %v", err)
	}
	return newProxy(t, "tcp", u.Host)
}

// NewPostgresProxy is NewProxy for the tests' PostgreSQL at pgURL, which a client
// reaches over its unix socket (host=/dir&port=N, as scripts/postgres.sh prints it): the
// proxy listens on loopback TCP and forwards to the socket, so the server still sees
// a local connection of the test's own user (Debian's peer authentication). It
// returns the proxy and the URL that goes through it.
func NewPostgresProxy(t testing.TB, pgURL string) (*Proxy, string) {
	t.Helper()
	u, err := url.Parse(pgURL)
	if err != nil {
		t.Fatalf("PostgreSQL URL: %v", err)
	}
	q := u.Query()
	dir, port := q.Get("host"), q.Get("port")
	if dir == "" || !strings.HasPrefix(dir, "/") {
		t.Fatalf("PostgreSQL URL %q: want a unix socket directory in host=", pgURL)
	}
	if port == "" {
		port = "5432"
	}
	p := newProxy(t, "unix", dir+"/.s.PGSQL."+port)
	q.Del("host")
	q.Del("port")
	q.Set("sslmode", "disable")
	u.Host = p.ln.Addr().String()
	u.RawQuery = q.Encode()
	return p, u.String()
}

func newProxy(t testing.TB, network, target string) *Proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{t: t, network: network, target: target, ln: ln, conns: make(map[net.Conn]bool),
		cutCh: make(chan struct{}), lagSet: make(chan struct{})}
	p.thawed = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() { p.Cut(); p.wg.Wait() })
	return p
}

// URL returns brokerURL with its host replaced by the proxy's address.
func (p *Proxy) URL(brokerURL string) string {
	u, err := url.Parse(brokerURL)
	if err != nil {
		p.t.Fatalf("broker URL: %v", err)
	}
	u.Host = p.ln.Addr().String()
	return u.String()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial(p.network, p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			c.Close()
			up.Close()
			return
		}
		p.conns[c], p.conns[up] = true, true
		p.mu.Unlock()
		p.wg.Add(3)
		go p.pipe(up, c)
		go p.pipeLagged(c, up)
	}
}

// pipe copies src to dst until either ends or the proxy is cut. While the proxy is
// frozen it neither reads nor writes (a chunk read just before is held, not lost).
func (p *Proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	defer src.Close()
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for p.hold() {
		n, err := src.Read(buf)
		if n > 0 && p.hold() {
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// pipeLagged is pipe for what the broker sends, through a queue of chunks stamped
// with the time they came, so that Lag delays each by the same amount, not by its own
// plus those of the chunks ahead of it.
func (p *Proxy) pipeLagged(dst, src net.Conn) {
	type chunk struct {
		at   time.Time
		data []byte
	}
	queue := make(chan chunk, 1024)
	quit := make(chan struct{}) // closed when the writes end
	// The reads; the writes follow.
	go func() {
		defer p.wg.Done()
		defer close(queue)
		defer src.Close()
		buf := make([]byte, 32<<10)
		for p.hold() {
			n, err := src.Read(buf)
			if n > 0 {
				select {
				case queue <- chunk{time.Now(), append([]byte(nil), buf[:n]...)}:
				case <-quit:
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	defer p.wg.Done()
	defer dst.Close()
	defer src.Close() // ends the reads when a write fails
	defer close(quit)
	for c := range queue {
		if !p.await(c.at) {
			return
		}
		if !p.hold() {
			return
		}
		if _, err := dst.Write(c.data); err != nil {
			return
		}
	}
}

// await waits until the lag has passed since at, the lag that holds meanwhile; it
// reports false once the proxy is cut.
func (p *Proxy) await(at time.Time) bool {
	for {
		p.mu.Lock()
		wait, set := time.Until(at.Add(p.lag)), p.lagSet
		p.mu.Unlock()
		if wait <= 0 {
			return true
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
			return true
		case <-set:
			t.Stop()
		case <-p.cutCh:
			t.Stop()
			return false
		}
	}
}

// Lag makes the broker slow but alive: every byte it sends, heartbeats too, reaches
// the client d after it came, in order; what the client sends is not delayed. Zero
// ends the lag (bytes already delayed are then forwarded at once).
func (p *Proxy) Lag(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lag = d
	close(p.lagSet)
	p.lagSet = make(chan struct{})
}

// hold waits while the proxy is frozen; it reports false once the proxy is cut.
func (p *Proxy) hold() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.frozen && !p.cut {
		p.thawed.Wait()
	}
	return !p.cut
}

// Freeze makes the broker hang through the proxy: no byte is forwarded in either
// direction until Thaw, and every connection stays open, so that a client sees neither
// an answer nor a closed connection, and its writes block once the socket buffers are
// full. Connections made meanwhile are accepted and frozen too. It is idempotent.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.frozen = true
}

// Thaw forwards again what Freeze held, and whatever comes after.
func (p *Proxy) Thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.frozen = false
	p.thawed.Broadcast()
}

// Cut makes the broker unreachable through the proxy: it stops accepting (a dial is
// refused) and closes every connection, frozen or not. It is idempotent.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return
	}
	p.cut = true
	close(p.cutCh)
	p.thawed.Broadcast()
	p.ln.Close()
	for c := range p.conns {
		c.Close()
	}
}
