package outbound

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"syscall"
	"testing"
	"time"

	"code.dny.dev/ssrf"
)

// addrs resolves every name to the same addresses.
type addrs []netip.Addr

func (a addrs) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) { return a, nil }

// unanswered listens on 127.0.0.2:port and never accepts, its accept queue (backlog 0)
// full, so that the kernel drops every further SYN: a connect to it hangs, as to an
// address that drops packets.
func unanswered(t *testing.T, port int) {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 2}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.2", strconv.Itoa(port))
	for i := 0; ; i++ {
		c, err := net.DialTimeout("tcp", addr, 300*time.Millisecond)
		if err != nil {
			break // the queue is full: connects hang from here on
		}
		t.Cleanup(func() { c.Close() })
		if i == 16 {
			t.Fatal("the accept queue never filled")
		}
	}
}

// TestDialSeveralAddresses: a name that resolves to several addresses is BLOCKED only
// when every address is; otherwise the request fails as the allowed addresses failed,
// or reaches one of them; and the connect deadline is shared among the addresses, so
// that one that never answers does not take the others' time. The guardian is the
// strict dialer's but for 127.0.0.1 and 127.0.0.2, which stand for public addresses
// (127.0.0.3 and 127.0.0.4 stay blocked, as any loopback address is for a name).
func TestDialSeveralAddresses(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(srv.Close)
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().(*net.TCPAddr).Port
	l.Close()
	unanswered(t, port)
	guard := ssrf.New(ssrf.WithAnyPort(), ssrf.WithAllowedV4Prefixes(netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("127.0.0.2/32")))
	a := netip.MustParseAddr
	for _, tc := range []struct {
		name    string
		addrs   addrs
		port    int
		timeout time.Duration
		kind    Kind // 0: connected
		within  time.Duration
	}{
		{"every address blocked", addrs{a("127.0.0.3"), a("127.0.0.4")}, port, 4 * time.Second, KindBlocked, time.Second},
		{"a blocked address, then one that refuses", addrs{a("127.0.0.3"), a("127.0.0.1")}, closed, 4 * time.Second, KindRefused, time.Second},
		{"one that refuses, then a blocked one", addrs{a("127.0.0.1"), a("127.0.0.3")}, closed, 4 * time.Second, KindRefused, time.Second},
		{"a blocked address, then a reachable one", addrs{a("127.0.0.3"), a("127.0.0.1")}, port, 4 * time.Second, 0, time.Second},
		{"one that never answers, then a reachable one", addrs{a("127.0.0.2"), a("127.0.0.1")}, port, 4 * time.Second, 0, 3500 * time.Millisecond},
		{"two that never answer", addrs{a("127.0.0.2"), a("127.0.0.2")}, port, 3 * time.Second, KindTimeout, 4 * time.Second},
		{"one that never answers", addrs{a("127.0.0.2")}, port, time.Second, KindTimeout, 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tr := newTransport(guard, tc.addrs, Options{}, tc.timeout)
			defer tr.CloseIdleConnections()
			start := time.Now()
			// No deadline on the request: the dial's own bounds it, as when net/http
			// dials for a request that has ended (a connection may serve a later one).
			resp, err := (&http.Client{Transport: tr}).Get("http://multi.test:" + strconv.Itoa(tc.port) + "/")
			took := time.Since(start)
			if resp != nil {
				resp.Body.Close()
			}
			switch {
			case tc.kind == 0 && err != nil:
				t.Fatalf("%v, want a connection", err)
			case tc.kind != 0 && err == nil:
				t.Fatalf("connected, want %s", tc.kind)
			case tc.kind != 0 && classify(err).Kind != tc.kind:
				t.Fatalf("%v: %s, want %s", err, classify(err).Kind, tc.kind)
			case took > tc.within:
				t.Fatalf("took %v, want at most %v", took, tc.within)
			}
		})
	}
}

// hangingResolver answers no lookup: each waits for its context (or the test's end),
// and tells returned when it gives up.
type hangingResolver struct {
	returned chan error
	release  chan struct{}
}

func (r hangingResolver) LookupNetIP(ctx context.Context, _, _ string) ([]netip.Addr, error) {
	select {
	case <-ctx.Done():
	case <-r.release:
	}
	r.returned <- ctx.Err()
	return nil, &net.DNSError{Err: "no answer", Name: "hang.test", IsTimeout: true}
}

// TestLookupBoundedByTheConnectTime: the name's lookup is part of the dial, and takes
// at most the connect time: net/http dials without the request's deadline, so a
// resolver that never answers would otherwise outlive the request and its job.
func TestLookupBoundedByTheConnectTime(t *testing.T) {
	t.Parallel()
	res := hangingResolver{returned: make(chan error, 1), release: make(chan struct{})}
	t.Cleanup(func() { close(res.release) })
	tr := newTransport(ssrf.New(ssrf.WithAnyPort()), res, Options{}, 200*time.Millisecond)
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", "http://hang.test/", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (&http.Client{Transport: tr}).Do(req); err == nil || classify(err).Kind != KindTimeout {
		t.Fatalf("%v, want a timeout", err)
	}
	select {
	case err := <-res.returned:
		if err == nil {
			t.Fatal("the lookup was let go by the test, not ended by its deadline")
		}
	case <-time.After(time.Second):
		t.Fatal("the lookup still runs a second after the request ended")
	}
}
