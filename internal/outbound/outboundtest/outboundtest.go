// Package outboundtest holds the loopback test server, and the handlers of the hostile
// servers, that both the outbound client's tests and the host's tests of its HTTP host
// functions aim at: what a server a guest calls may do to the host, written once.
package outboundtest

import (
	"compress/gzip"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Drip answers 200, then a byte a second, each flushed, until the client goes: a body
// that never ends, on a connection never idle long enough for a read timeout.
func Drip(w http.ResponseWriter, r *http.Request) {
	w.WriteHeader(http.StatusOK)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		if _, err := w.Write([]byte("x")); err != nil {
			return
		}
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
			return
		case <-tick.C:
		}
	}
}

// GzipBomb returns a handler that answers zeros, gzipped, for ever, until the client
// goes: a few KiB on the wire for each MiB decompressed. Each MiB is flushed at once,
// so that the head is not held back until the server's buffer fills with compressed
// bytes. Its requests share one read-only MiB of zeros.
func GzipBomb() http.HandlerFunc {
	zeros := make([]byte, 1<<20)
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(w)
		for r.Context().Err() == nil {
			if _, err := zw.Write(zeros); err != nil {
				return
			}
			zw.Flush()
			w.(http.Flusher).Flush()
		}
	}
}

// Server is a loopback test server counting the requests it received, the handlers
// that have returned and the connections open to it, for tests that check what
// reached it (or that nothing did, or that nothing is left open).
type Server struct {
	*httptest.Server
	// Hits counts the requests received, Ended the handlers that returned.
	Hits, Ended atomic.Int64
	// Conns counts the open connections: accepted and not yet closed or hijacked.
	Conns atomic.Int64
	// Port is the port it listens on, on 127.0.0.1.
	Port string

	mu   sync.Mutex
	seen []http.Header // the latest MaxSeen
}

// MaxSeen is how many requests' headers a Server keeps, the latest: a soak sends it
// thousands, and a rig that kept them all would look like a leak in the host.
const MaxSeen = 16

// Seen returns the headers of the latest requests received (at most MaxSeen), in
// order.
func (s *Server) Seen() []http.Header {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]http.Header(nil), s.seen...)
}

// Last returns the headers of the last request received; nil before any.
func (s *Server) Last() http.Header {
	seen := s.Seen()
	if len(seen) == 0 {
		return nil
	}
	return seen[len(seen)-1]
}

// NewServer starts a Server serving h, over TLS (httptest's certificate) when tls is
// set, closed with the test.
func NewServer(t testing.TB, tls bool, h http.HandlerFunc) *Server {
	t.Helper()
	s := &Server{}
	hf := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.Hits.Add(1)
		defer s.Ended.Add(1)
		s.mu.Lock()
		if len(s.seen) == MaxSeen {
			s.seen = append(s.seen[:0], s.seen[1:]...)
		}
		s.seen = append(s.seen, r.Header.Clone())
		s.mu.Unlock()
		h(w, r)
	})
	s.Server = httptest.NewUnstartedServer(hf)
	s.Config.ConnState = func(_ net.Conn, cs http.ConnState) {
		switch cs {
		case http.StateNew:
			s.Conns.Add(1)
		case http.StateClosed, http.StateHijacked:
			s.Conns.Add(-1)
		}
	}
	if tls {
		s.StartTLS()
	} else {
		s.Start()
	}
	t.Cleanup(s.Close)
	_, s.Port, _ = net.SplitHostPort(s.Listener.Addr().String())
	return s
}

// RefusedPort returns a port of 127.0.0.1 that refuses connections: one that was free a
// moment ago, listened on and closed again, for a destination that fails at once.
func RefusedPort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, err := net.SplitHostPort(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	return port
}
