package testbroker

import (
	"net"
	"net/url"
	"sync"
	"testing"
)

// Proxy is a loopback TCP proxy to a broker that a test can cut: an outage of that
// test's connections alone, without disturbing the broker other tests share.
type Proxy struct {
	t      testing.TB
	target string
	ln     net.Listener

	mu     sync.Mutex
	thawed *sync.Cond // signalled when frozen or cut change
	conns  map[net.Conn]bool
	cut    bool
	frozen bool
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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{t: t, target: u.Host, ln: ln, conns: make(map[net.Conn]bool)}
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
		up, err := net.Dial("tcp", p.target)
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
		p.wg.Add(2)
		go p.pipe(c, up)
		go p.pipe(up, c)
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
	p.thawed.Broadcast()
	p.ln.Close()
	for c := range p.conns {
		c.Close()
	}
}
