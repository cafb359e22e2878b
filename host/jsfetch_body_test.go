package host_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/host"
	"github.com/wasmjobs/wasmjobs/internal/outbound/outboundtest"
	"github.com/wasmjobs/wasmjobs/worker"
)

// newBodyServer answers /drip with 30 bytes, one each 100 ms, and /stall with one
// byte and then nothing until the request ends.
func newBodyServer(t *testing.T) *outboundtest.Server {
	return outboundtest.NewServer(t, false, func(w http.ResponseWriter, r *http.Request) {
		f := w.(http.Flusher)
		switch r.URL.Path {
		case "/drip":
			for range 30 {
				if _, err := w.Write([]byte("x")); err != nil {
					return
				}
				f.Flush()
				select {
				case <-time.After(100 * time.Millisecond):
				case <-r.Context().Done():
					return
				}
			}
		case "/stall":
			w.Write([]byte("x"))
			f.Flush()
			<-r.Context().Done()
		}
	})
}

// TestJSFetchAbortsABodyRead: an abort, by AbortSignal.timeout or by an
// AbortController's abort from a timer, ends a body read that is under way near its
// time (the body would take 3 s, or never end), rejects text() with the signal's
// reason, and closes the request (the server's handler returns while the job runs).
func TestJSFetchAbortsABodyRead(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, path, abort, want string }{
		{"AbortSignal.timeout, a dripping body", "/drip", `const signal = AbortSignal.timeout(300);`, "TimeoutError"},
		{"AbortSignal.timeout, a stalled body", "/stall", `const signal = AbortSignal.timeout(300);`, "TimeoutError"},
		{"abort() from a timer, a stalled body", "/stall", `const c = new AbortController(); const signal = c.signal; setTimeout(() => c.abort(), 300);`, "AbortError"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := newBodyServer(t)
			m := loadJS(t, httpEngine(t, nil), jsEval, fmt.Sprintf("timeout = \"10s\"\n[http]\nallow = [\"http://127.0.0.1:%s\"]\n", s.Port))
			x := run(m, c.abort+`const r = await fetch("`+s.URL+c.path+`", { signal });
				try { return "read " + (await r.text()).length; } catch (e) { return e.name; }`)
			if x.Outcome != worker.Ack || string(x.Output) != c.want || x.Duration > 1500*time.Millisecond {
				t.Fatalf("%s %s %q after %v, want %q near 300ms", x.Ending(), x.Reason, x.Output, x.Duration, c.want)
			}
			deadline := time.Now().Add(2 * time.Second)
			for s.Ended.Load() != 1 {
				if time.Now().After(deadline) {
					t.Fatal("the aborted request was still open at the server 2s after the job")
				}
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
}

// TestJSFetchBodyReadEndsAtShutdown: the host shutting down (the job's context
// cancelled) ends a body read at once, not the backstop's 250 ms later, and the job
// logs no failure of the request it was reading (it did not fail: the host stopped).
func TestJSFetchBodyReadEndsAtShutdown(t *testing.T) {
	t.Parallel()
	s := newBodyServer(t)
	m := loadJS(t, httpEngine(t, nil), jsEval, fmt.Sprintf("timeout = \"10s\"\n[http]\nallow = [\"http://127.0.0.1:%s\"]\n", s.Port))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var cancelled time.Time
	time.AfterFunc(300*time.Millisecond, func() { cancelled = time.Now(); cancel() })
	x := m.Run(ctx, jobOf(m, `const r = await fetch("`+s.URL+`/stall"); return await r.text();`), nil)
	after := time.Since(cancelled)
	if x.Cause != host.CauseTimeout || x.Reason != "cancelled: the host is shutting down" {
		t.Fatalf("%s %q, want the shutdown's timeout", x.Ending(), x.Reason)
	}
	if after > 200*time.Millisecond {
		t.Errorf("the job ended %v after the shutdown, want at once", after)
	}
	for _, l := range x.Logs {
		if l.Level >= slog.LevelWarn {
			t.Errorf("logged %s %q", l.Level, l.Msg)
		}
	}
}

// TestJSFetchRefusesBeforeCopying: a fetch whose body passes max_request_body, or
// whose headers pass the 64 KiB of a request's headers, is refused (-3) by its
// length before the host copies it: forty refused fetches of a 2 MiB ArrayBuffer and
// eight of a 1 MiB string allocate next to nothing on the host (copied, they would
// take more than 96 MiB). Not parallel: it reads the process's allocation counter.
func TestJSFetchRefusesBeforeCopying(t *testing.T) {
	s := newBodyServer(t)
	m := loadJS(t, httpEngine(t, nil), jsEval, fmt.Sprintf("timeout = \"10s\"\nmemory = \"64MiB\"\n[http]\nallow = [\"http://127.0.0.1:%s\"]\nmax_request_body = \"1KiB\"\n", s.Port))
	// A job makes its big values first, then refused fetches of each kind: ab, str
	// and hdr of them.
	src := func(ab, str, hdr int) string {
		return fmt.Sprintf(`const big = "x".repeat(1 << 20), buf = new Uint8Array(2 << 20), header = "x".repeat(70 << 10), out = new Set();
			const kinds = [[%d, { method: "POST", body: buf }], [%d, { method: "POST", body: big }], [%d, { headers: { "X-Big": header } }]];
			for (const [n, init] of kinds) {
			  for (let i = 0; i < n; i++) {
			    try { await fetch("%s/drip", init); out.add("sent"); } catch (e) { out.add(e.code + " " + e.message); }
			  }
			}
			return [...out].join(",")`, ab, str, hdr, s.URL)
	}
	want := "-3 request too large: the body of 2097152 bytes passes max_request_body (1024 bytes)," +
		"-3 request too large: the body of 1048576 bytes passes max_request_body (1024 bytes)," +
		"-3 request too large: the headers take 71688 bytes, past 65536"
	// The first job grows the guest's memory, once, and shows the refusals.
	if x := run(m, src(1, 1, 1)); x.Outcome != worker.Ack || string(x.Output) != want {
		t.Fatalf("%s %s %q, want %q", x.Ending(), x.Reason, x.Output, want)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	x := run(m, src(40, 8, 0))
	runtime.ReadMemStats(&after)
	if x.Outcome != worker.Ack || !strings.HasPrefix(string(x.Output), "-3 ") || s.Hits.Load() != 0 {
		t.Fatalf("%s %s %q, %d requests at the server, want -3 and none", x.Ending(), x.Reason, x.Output, s.Hits.Load())
	}
	if d := after.TotalAlloc - before.TotalAlloc; d > 16<<20 {
		t.Fatalf("48 refused fetches allocated %d MiB on the host, want them refused before a copy", d>>20)
	}
}

// TestJSFetchRedirectOption: redirect "follow" (or none) follows; any other value
// rejects with a TypeError (-2) before anything is sent: the host always follows.
func TestJSFetchRedirectOption(t *testing.T) {
	t.Parallel()
	s := newFetchServer(t)
	m := loadJS(t, httpEngine(t, nil), jsEval, fetchManifest(s, "5s"))
	for _, c := range []struct{ redirect, want string }{
		{`"follow"`, "201 true"},
		{`undefined`, "201 true"},
		{`"manual"`, `TypeError -2 fetch: redirect "manual" is not supported: the host follows redirects (at most 5)`},
		{`"error"`, `TypeError -2 fetch: redirect "error" is not supported: the host follows redirects (at most 5)`},
		{`"bogus"`, `TypeError -2 fetch: redirect "bogus" is not supported: the host follows redirects (at most 5)`},
	} {
		t.Run(c.redirect, func(t *testing.T) {
			before := s.Hits.Load()
			x := run(m, `try { const r = await fetch("`+s.URL+`/redirect", { redirect: `+c.redirect+` }); return r.status + " " + r.redirected; }
				catch (e) { return [e.name, e.code, e.message].join(" "); }`)
			if x.Outcome != worker.Ack || string(x.Output) != c.want {
				t.Fatalf("%s %s %q, want %q", x.Ending(), x.Reason, x.Output, c.want)
			}
			if strings.HasPrefix(c.want, "TypeError") && s.Hits.Load() != before {
				t.Fatalf("a refused redirect option sent %d requests", s.Hits.Load()-before)
			}
		})
	}
}

// TestJSFetchAbortListenersDoNotPileUp: a signal that outlives its fetches (an
// AbortController in a global, used by every job of the VM) keeps no listener of a
// fetch whose body was read, nor of one its job left unread once the next job
// begins. The job counts the listeners fetch adds and removes on AbortSignal's
// prototype.
func TestJSFetchAbortListenersDoNotPileUp(t *testing.T) {
	t.Parallel()
	s := newFetchServer(t)
	m := loadJS(t, httpEngine(t, nil), jsEval, fetchManifest(s, "5s"))
	const setup = `if (!globalThis.ctl) {
		globalThis.ctl = new AbortController(); globalThis.live = 0;
		const P = AbortSignal.prototype, add = P.addEventListener, remove = P.removeEventListener, fns = new Set();
		P.addEventListener = function (t, fn, o) { if (!fns.has(fn)) { fns.add(fn); live++; } return add.call(this, t, fn, o); };
		P.removeEventListener = function (t, fn) { if (fns.delete(fn)) live--; return remove.call(this, t, fn); };
	}
	globalThis.jobs = (globalThis.jobs || 0) + 1;
	const signal = ctl.signal;`
	for _, c := range []struct{ name, src, want string }{
		{"bodies read", `for (let i = 0; i < 5; i++) await (await fetch("` + s.URL + `/json", { signal })).text(); return jobs + " " + live`, "1 0"},
		{"a failed head", `try { await fetch("http://127.0.0.2:1/", { signal }); } catch (e) {} return jobs + " " + live`, "2 0"},
		{"a body left unread", `await fetch("` + s.URL + `/json", { signal }); return jobs + " " + live`, "3 1"},
		{"the next job", `return jobs + " " + live`, "4 0"},
	} {
		x := run(m, setup+c.src)
		if x.Outcome != worker.Ack || string(x.Output) != c.want {
			t.Fatalf("%s: %s %s %q, want %q (jobs, listeners left)", c.name, x.Ending(), x.Reason, x.Output, c.want)
		}
	}
}
