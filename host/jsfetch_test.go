package host_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/host"
	"github.com/wasmjobs/wasmjobs/internal/outbound/outboundtest"
	"github.com/wasmjobs/wasmjobs/internal/rigs/abitest"
	"github.com/wasmjobs/wasmjobs/internal/tools/jsbuild"
	"github.com/wasmjobs/wasmjobs/worker"
)

// jsEval is a handler that evaluates its payload as an async function body and
// outputs what it returns as a string: the web APIs' tests are one line of JS each.
const jsEval = `var __wasmjobs_handler = { default: async function (job) {
  const f = new Function("job", "return (async () => {" + job.text + "})()");
  job.output(String(await f(job)));
} };`

// TestJSWebAPIs: the prelude's TextEncoder/TextDecoder, Headers, URL, DOMException,
// AbortController/AbortSignal and timers behave as the web platform's do, in the
// parts a handler calling an API needs.
func TestJSWebAPIs(t *testing.T) {
	t.Parallel()
	m := loadJS(t, newEngine(t), jsEval, "timeout = \"5s\"\n")
	for _, c := range []struct{ name, src, want string }{
		{"encode", `return Array.from(new TextEncoder().encode("h\u00e9\u20ac\ud83d\ude00")).join(",")`, "104,195,169,226,130,172,240,159,152,128"},
		{"encode a lone surrogate", `return Array.from(new TextEncoder().encode("\ud800")).join(",")`, "239,191,189"},
		{"decode", `return new TextDecoder().decode(new Uint8Array([104, 195, 169, 0xff]))`, "h\u00e9\ufffd"},
		{"decode a view", `return new TextDecoder().decode(new Uint8Array([0, 104, 105, 0]).subarray(1, 3))`, "hi"},
		{"decode drops the BOM", `return new TextDecoder().decode(new Uint8Array([0xef, 0xbb, 0xbf, 104])).length`, "1"},
		{"decode fatal", `try { new TextDecoder("utf-8", { fatal: true }).decode(new Uint8Array([0xff])); return "no"; } catch (e) { return e.name; }`, "TypeError"},
		{"decode another label", `try { new TextDecoder("latin1"); return "no"; } catch (e) { return e.name; }`, "RangeError"},
		{"headers", `const h = new Headers({ "X-A": "1" }); h.append("x-a", " 2 "); h.append("Set-Cookie", "a"); h.append("set-cookie", "b");
			return [h.get("x-a"), h.has("X-A"), String(h.get("nope")), h.getSetCookie().join("|"), [...h].map(e => e.join("=")).join(";")].join(" ")`,
			"1, 2 true null a|b set-cookie=a;set-cookie=b;x-a=1, 2"},
		{"headers from pairs and set", `const h = new Headers([["B", "1"], ["a", "2"], ["b", "3"]]); h.set("b", "4"); h.delete("A");
			return [...new Headers(h).entries()].map(e => e.join("=")).join(";")`, "b=4"},
		{"a bad header value", `try { new Headers({ "X": "a\r\nB: c" }); return "no"; } catch (e) { return e.name; }`, "TypeError"},
		{"a bad header name", `try { new Headers({ "X Y": "a" }); return "no"; } catch (e) { return e.name; }`, "TypeError"},
		{"url", `const u = new URL("HTTPS://user:pw@Api.Example.com:443/a/./b/../c?x=1#f");
			return [u.protocol, u.username, u.hostname, u.port, u.host, u.pathname, u.search, u.hash, u.origin, u.href].join(" ")`,
			"https: user api.example.com  api.example.com /a/c ?x=1 #f https://api.example.com https://user:pw@api.example.com/a/c?x=1#f"},
		{"url with a port and ipv6", `const u = new URL("http://[::1]:8080"); return u.host + " " + u.href`, "[::1]:8080 http://[::1]:8080/"},
		{"url against a base", `return [new URL("/x?y", "http://h/a/b"), new URL("c", "http://h/a/b"), new URL("?q", "http://h/a")].join(" ")`, "http://h/x?y http://h/a/c http://h/a?q"},
		{"url invalid", `return [URL.canParse("not a url"), URL.canParse("http://"), URL.canParse("http://h:99999/")].join(" ")`, "false false false"},
		{"dom exception", `const e = new DOMException("m", "AbortError"); return [e.name, e.message, e.code, e instanceof Error].join(" ")`, "AbortError m 20 true"},
		{"abort controller", `const c = new AbortController(); let seen = 0; c.signal.addEventListener("abort", () => seen++); c.signal.onabort = () => seen++;
			c.abort(); c.abort(); return [c.signal.aborted, c.signal.reason.name, seen].join(" ")`, "true AbortError 2"},
		{"abort with a reason", `const c = new AbortController(); c.abort("why"); try { c.signal.throwIfAborted(); } catch (e) { return e; }`, "why"},
		{"abort signal timeout", `const s = AbortSignal.timeout(30); const t0 = Date.now(); await new Promise(r => s.addEventListener("abort", r));
			return s.reason.name + " " + (Date.now() - t0 >= 25)`, "TimeoutError true"},
		{"abort signal any", `const c = new AbortController(); const s = AbortSignal.any([AbortSignal.timeout(10000), c.signal]); c.abort(); return s.aborted`, "true"},
		{"timers in order", `const out = []; await new Promise(r => { setTimeout(() => out.push("b"), 20); setTimeout(() => out.push("a"), 5);
			setTimeout(() => out.push("c"), 20); const x = setTimeout(() => out.push("cleared"), 10); clearTimeout(x); setTimeout(r, 40, "done"); });
			return out.join("")`, "abc"},
		{"timer arguments", `return await new Promise(r => setTimeout(r, 0, "arg"))`, "arg"},
		{"an HTTP date", `return Date.parse("Wed, 21 Oct 2015 07:28:00 GMT")`, "1445412480000"},
	} {
		t.Run(c.name, func(t *testing.T) {
			x := run(m, c.src)
			if x.Outcome != worker.Ack || string(x.Output) != c.want {
				t.Fatalf("%s %s %q, want %q", x.Ending(), x.Reason, x.Output, c.want)
			}
		})
	}
}

// TestJSTimers: a timer callback that throws fails the job; more than 1,000 timers
// waiting at once are refused; a sleep past the job's timeout ends at it.
func TestJSTimers(t *testing.T) {
	t.Parallel()
	m := loadJS(t, newEngine(t), jsEval, "timeout = \"2s\"\n")
	for _, c := range []struct {
		name, src string
		cause     host.Cause
		reason    string
	}{
		{"a throwing callback", `setTimeout(() => { throw new Error("from a timer"); }, 1); await new Promise(r => setTimeout(r, 50));`, host.CauseTrap, "trap: from a timer"},
		{"too many timers", `for (let i = 0; i < 1001; i++) setTimeout(() => {}, 100000);`, host.CauseTrap, "trap: RangeError: setTimeout: too many timers waiting (at most 1000)"},
		{"a sleep past the deadline", `await new Promise(r => setTimeout(r, 60000));`, host.CauseTimeout, "timeout after 2s"},
	} {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			x := run(m, c.src)
			if x.Cause != c.cause || x.Reason != c.reason {
				t.Fatalf("%s %q, want %s %q", x.Ending(), x.Reason, c.cause, c.reason)
			}
			if d := time.Since(start); d > 4*time.Second {
				t.Fatalf("took %v", d)
			}
		})
	}
}

// fetchServer is the loopback server of the fetch tests:
//   - /echo answers 201 with X-Reply twice and the body "METHOD PATH CONTENT-TYPE
//     X-TEST [BODY]";
//   - /json answers {"n": 1};
//   - /redirect redirects to /echo;
//   - /slow answers after 300 ms, counting how many it holds at once (most);
//   - /never answers nothing until the request ends;
//   - /ended answers how many /never requests have ended.
type fetchServer struct {
	*outboundtest.Server
	held, most, ended atomic.Int64
}

func newFetchServer(t *testing.T) *fetchServer {
	s := &fetchServer{}
	s.Server = outboundtest.NewServer(t, false, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/echo":
			body, _ := io.ReadAll(r.Body)
			w.Header().Add("X-Reply", "a")
			w.Header().Add("X-Reply", "b")
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, "%s %s %s %s [%s]", r.Method, r.URL.Path, r.Header.Get("Content-Type"), strings.Join(r.Header.Values("X-Test"), ","), body)
		case "/json":
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"n": 1}`)
		case "/redirect":
			http.Redirect(w, r, "/echo", http.StatusFound)
		case "/slow":
			n := s.held.Add(1)
			for m := s.most.Load(); n > m && !s.most.CompareAndSwap(m, n); m = s.most.Load() {
			}
			select {
			case <-time.After(300 * time.Millisecond):
			case <-r.Context().Done():
			}
			s.held.Add(-1)
			io.WriteString(w, "slow")
		case "/never":
			<-r.Context().Done()
			s.ended.Add(1)
		case "/ended":
			fmt.Fprint(w, s.ended.Load())
		default:
			http.NotFound(w, r)
		}
	})
	return s
}

// fetchManifest grants the test server's port on 127.0.0.1.
func fetchManifest(s *fetchServer, timeout string) string {
	return fmt.Sprintf("timeout = %q\n[http]\nallow = [\"http://127.0.0.1:%s\"]\n", timeout, s.Port)
}

// jsWaitEnded is JS that polls the server's /ended until it reports n, for at most a
// second: a request the host closed ends at the server at once, one it did not only
// when its job ends.
const jsWaitEnded = `async function waitEnded(base, n) {
  for (let i = 0; i < 40; i++) {
    if (await (await fetch(base + "/ended")).text() === String(n)) return "ended";
    await new Promise(r => setTimeout(r, 25));
  }
  return "not ended";
}
`

// TestJSFetch: fetch sends the method, headers (an object, pairs or a Headers) and a
// body (a string, a Uint8Array or an ArrayBuffer), and its Response gives status,
// statusText, ok, repeated headers, the final URL, redirected, text, json and
// arrayBuffer; a refusal rejects with a TypeError carrying the ABI's status, its kind
// and the host's message.
func TestJSFetch(t *testing.T) {
	t.Parallel()
	s := newFetchServer(t)
	m := loadJS(t, httpEngine(t, nil), jsEval, fetchManifest(s, "5s"))
	base := s.URL
	show := `const show = async (r) => [r.status, r.statusText, r.ok, r.headers.get("x-reply"), r.url === "` + base + `/echo", r.redirected, await r.text()].join("|");`
	for _, c := range []struct{ name, src, want string }{
		{"get", show + `return show(await fetch("` + base + `/echo", { headers: { "X-Test": "1" } }))`, "201|Created|true|a, b|true|false|GET /echo  1 []"},
		{"post a string", show + `return show(await fetch(new URL("` + base + `/echo"), { method: "post", body: "h\u00e9", headers: [["X-Test", "1"], ["x-test", "2"]] }))`,
			"201|Created|true|a, b|true|false|POST /echo text/plain;charset=UTF-8 1,2 [h\u00e9]"},
		{"put a Uint8Array", show + `const h = new Headers(); h.set("content-type", "application/octet-stream");
			return show(await fetch("` + base + `/echo", { method: "PUT", body: new Uint8Array([0, 104, 105, 0]).subarray(1, 3), headers: h }))`,
			"201|Created|true|a, b|true|false|PUT /echo application/octet-stream  [hi]"},
		{"an ArrayBuffer", show + `return show(await fetch({ url: "` + base + `/echo" }, { method: "PATCH", body: new TextEncoder().encode("ab").buffer }))`,
			"201|Created|true|a, b|true|false|PATCH /echo   [ab]"},
		{"a redirect", show + `return show(await fetch("` + base + `/redirect"))`, "201|Created|true|a, b|true|true|GET /echo   []"},
		{"json", `const r = await fetch("` + base + `/json"); return [r.headers.get("Content-Type"), (await r.json()).n, r.bodyUsed].join(" ")`, "application/json 1 true"},
		{"arrayBuffer", `const b = await (await fetch("` + base + `/json")).arrayBuffer(); return b instanceof ArrayBuffer && b.byteLength`, "8"},
		{"a body read twice", `const r = await fetch("` + base + `/json"); await r.text(); try { await r.text(); } catch (e) { return e.name; }`, "TypeError"},
		{"a 404", `const r = await fetch("` + base + `/nope"); return r.status + " " + r.ok + " " + r.statusText`, "404 false Not Found"},
		{"an ungranted URL", `try { await fetch("http://127.0.0.2:1/"); } catch (e) { return [e instanceof TypeError, e.code, e.kind, e.message.startsWith("denied: ")].join(" "); }`, "true -10 denied true"},
		{"an ungranted name", `try { await fetch("https://api.example.com/"); } catch (e) { return e.code + " " + e.kind; }`, "-10 denied"},
		{"not a URL", `try { await fetch("/relative"); } catch (e) { return e.code + " " + e.kind + " " + (e instanceof TypeError); }`, "-2 bad_argument true"},
		{"not http", `try { await fetch("ftp://127.0.0.1/"); } catch (e) { return e.code + " " + e.message; }`, "-2 fetch: ftp://127.0.0.1/ is not an http or https URL"},
		{"a header the transport owns", `try { await fetch("` + base + `/echo", { headers: { Connection: "close" } }); } catch (e) { return e.code + " " + e.kind; }`, "-2 bad_argument"},
		{"a GET with a body", `try { await fetch("` + base + `/echo", { body: "x" }); } catch (e) { return e.name; }`, "TypeError"},
	} {
		t.Run(c.name, func(t *testing.T) {
			x := run(m, c.src)
			if x.Outcome != worker.Ack || string(x.Output) != c.want {
				t.Fatalf("%s %s %q, want %q", x.Ending(), x.Reason, x.Output, c.want)
			}
		})
	}
	t.Run("no grant", func(t *testing.T) {
		m := loadJS(t, httpEngine(t, nil), jsEval, "timeout = \"5s\"\n")
		x := run(m, `try { await fetch("`+base+`/echo"); } catch (e) { return e.code + " " + e.kind; }`)
		if string(x.Output) != "-4 not_permitted" {
			t.Fatalf("%s %s %q", x.Ending(), x.Reason, x.Output)
		}
	})
}

// TestJSFetchRunsRequestsAtOnce: Promise.all of two fetches to a server that holds
// each answer 300 ms takes well under 600 ms: both are in flight at once on the host
// while the drive loop waits on them.
func TestJSFetchRunsRequestsAtOnce(t *testing.T) {
	t.Parallel()
	s := newFetchServer(t)
	m := loadJS(t, httpEngine(t, nil), jsEval, fetchManifest(s, "5s"))
	x := run(m, `const rs = await Promise.all([fetch("`+s.URL+`/slow"), fetch("`+s.URL+`/slow?b")]);
		return (await Promise.all(rs.map(r => r.text()))).join(",")`)
	if x.Outcome != worker.Ack || string(x.Output) != "slow,slow" {
		t.Fatalf("%s %s %q", x.Ending(), x.Reason, x.Output)
	}
	if x.Duration >= 550*time.Millisecond || s.most.Load() != 2 {
		t.Fatalf("took %v with at most %d requests held at once by the server, want < 550ms and 2", x.Duration, s.most.Load())
	}
}

// TestJSFetchAbort: AbortSignal.timeout(200) against a server that never answers
// rejects with a TimeoutError near 200 ms, and an AbortController's abort with an
// AbortError; either closes the request on the host (the server sees it end while
// the job still runs); a signal aborted before fetch sends nothing.
func TestJSFetchAbort(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, abort, want string }{
		{"AbortSignal.timeout", `const signal = AbortSignal.timeout(200);`, "TimeoutError 23 ended"},
		{"AbortController", `const c = new AbortController(); const signal = c.signal; setTimeout(() => c.abort(), 100);`, "AbortError 20 ended"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := newFetchServer(t)
			m := loadJS(t, httpEngine(t, nil), jsEval, fetchManifest(s, "10s"))
			x := run(m, jsWaitEnded+c.abort+`const t0 = Date.now();
				try { await fetch("`+s.URL+`/never", { signal }); return "answered"; }
				catch (e) { return [e.name, e.code, await waitEnded("`+s.URL+`", 1), Date.now() - t0].join(" "); }`)
			// The output ends with the milliseconds from the fetch to the end's report.
			parts := strings.Fields(string(x.Output))
			if x.Outcome != worker.Ack || len(parts) != 4 || strings.Join(parts[:3], " ") != c.want {
				t.Fatalf("%s %s %q, want %q and the milliseconds it took", x.Ending(), x.Reason, x.Output, c.want)
			}
			if x.Duration > 3*time.Second {
				t.Fatalf("the job took %v", x.Duration)
			}
		})
	}
	t.Run("TimeoutError near 200 ms", func(t *testing.T) {
		t.Parallel()
		s := newFetchServer(t)
		m := loadJS(t, httpEngine(t, nil), jsEval, fetchManifest(s, "10s"))
		x := run(m, `try { await fetch("`+s.URL+`/never", { signal: AbortSignal.timeout(200) }); } catch (e) { return e.name; }`)
		if x.Outcome != worker.Ack || string(x.Output) != "TimeoutError" || x.Duration < 190*time.Millisecond || x.Duration > 700*time.Millisecond {
			t.Fatalf("%s %s %q after %v, want TimeoutError near 200ms", x.Ending(), x.Reason, x.Output, x.Duration)
		}
	})
	t.Run("aborted before", func(t *testing.T) {
		t.Parallel()
		s := newFetchServer(t)
		m := loadJS(t, httpEngine(t, nil), jsEval, fetchManifest(s, "10s"))
		x := run(m, `try { await fetch("`+s.URL+`/never", { signal: AbortSignal.abort() }); } catch (e) { return e.name; }`)
		if string(x.Output) != "AbortError" || s.Hits.Load() != 0 {
			t.Fatalf("%s %s %q; the server had %d requests, want AbortError and none", x.Ending(), x.Reason, x.Output, s.Hits.Load())
		}
	})
}

// TestJSFetchNotAwaitedStaysInItsJob: a handler that fires a fetch and a timer and
// returns without awaiting them leaves nothing to the VM's next job: the request is
// closed when the job settles (the server sees it end) and the timer, due while the
// next job of the same VM runs (a counter in a global tells it is the same VM), never
// fires there.
func TestJSFetchNotAwaitedStaysInItsJob(t *testing.T) {
	t.Parallel()
	s := newFetchServer(t)
	m := loadJS(t, httpEngine(t, nil), jsEval, fetchManifest(s, "5s"))
	// The handler waits for a timer before it returns, so that the request it does
	// not await has reached the server. Its other timer is due 400 ms after it began:
	// inside the next job, which runs for 800 ms.
	const count = `globalThis.jobs = (globalThis.jobs || 0) + 1;`
	x := run(m, count+`globalThis.late = "no"; fetch("`+s.URL+`/never").then(() => { globalThis.late = "fetch"; });
		setTimeout(() => { globalThis.late = "timer"; }, 400); await new Promise(r => setTimeout(r, 100)); return "fired"`)
	if x.Outcome != worker.Ack || string(x.Output) != "fired" || s.Hits.Load() != 1 {
		t.Fatalf("%s %s %q, %d requests at the server", x.Ending(), x.Reason, x.Output, s.Hits.Load())
	}
	deadline := time.Now().Add(2 * time.Second)
	for s.ended.Load() != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the request the job did not await was still open at the server 2s after the job")
		}
		time.Sleep(5 * time.Millisecond)
	}
	x = run(m, count+`await new Promise(r => setTimeout(r, 800)); return [globalThis.jobs, globalThis.late, (await fetch("`+s.URL+`/ended")).status].join(" ")`)
	if x.Outcome != worker.Ack || string(x.Output) != "2 no 200" {
		t.Fatalf("the next job: %s %s %q, want \"2 no 200\" (the same VM, the timer not fired)", x.Ending(), x.Reason, x.Output)
	}
	// The host dropped the first job's timer: a promise that never settles is a trap
	// at once.
	x = run(m, count+`return new Promise(() => {})`)
	if x.Cause != host.CauseTrap || x.Reason != "trap: the handler's promise never settled" || x.Duration > 500*time.Millisecond {
		t.Fatalf("a job that never settles: %s %s after %v, want its trap at once", x.Ending(), x.Reason, x.Duration)
	}
}

// jsSDKModule bundles a handler that imports the SDK (guest-sdk/javascript) as sdk,
// with esbuild, as wasmjobs build does.
func jsSDKModule(t *testing.T, src string) []byte {
	t.Helper()
	sdk := filepath.Join(abitest.Dir(), "..", "guest-sdk", "javascript", "wasmjobs.js")
	entry := filepath.Join(t.TempDir(), "handler.js")
	if err := os.WriteFile(entry, []byte(fmt.Sprintf("import * as sdk from %q;\n%s", sdk, src)), 0o644); err != nil {
		t.Fatal(err)
	}
	bundle, err := jsbuild.Bundle(entry)
	if err != nil {
		t.Fatal(err)
	}
	return jsModule(t, string(bundle))
}

// TestJSRetryAfter: throw retryAfter(res) defers by a Retry-After of seconds or of an
// HTTP date, with no attempt spent, and retries with the queue's backoff (no delay)
// without one.
func TestJSRetryAfter(t *testing.T) {
	t.Parallel()
	var sent atomic.Pointer[string] // the HTTP date /date sent last
	srv := outboundtest.NewServer(t, false, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/seconds":
			w.Header().Set("Retry-After", "2")
			w.WriteHeader(http.StatusTooManyRequests)
		case "/date":
			at := time.Now().Add(4 * time.Second).UTC().Format(http.TimeFormat)
			sent.Store(&at)
			w.Header().Set("Retry-After", at)
			w.WriteHeader(http.StatusServiceUnavailable)
		case "/garbled":
			w.Header().Set("Retry-After", "soon")
			w.WriteHeader(http.StatusServiceUnavailable)
		default:
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	e := httpEngine(t, nil)
	man, err := host.ParseManifest("js.toml", []byte(fmt.Sprintf("timeout = \"5s\"\n[http]\nallow = [\"http://127.0.0.1:%s\"]\n", srv.Port)))
	if err != nil {
		t.Fatal(err)
	}
	wasm := jsSDKModule(t, `export default async function (job) { throw sdk.retryAfter(await fetch(job.text)); }`)
	m, err := e.Load(context.Background(), "retry-after", wasm, man)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Retire)
	for _, c := range []struct {
		path, kind, reason string
		delay, slack       time.Duration // -1: none staged
	}{
		{"/seconds", "defer", "http 429: Retry-After 2", 2 * time.Second, 0},
		{"/date", "defer", "http 503: Retry-After DATE", 4 * time.Second, 1500 * time.Millisecond},
		{"/none", "retry", "http 503", -1, 0},
		{"/garbled", "retry", "http 503", -1, 0},
	} {
		x := run(m, srv.URL+c.path)
		if at := sent.Load(); at != nil {
			c.reason = strings.Replace(c.reason, "DATE", *at, 1)
		}
		if x.Ending() != c.kind || x.Reason != c.reason {
			t.Errorf("%s: %s %q, want %s %q", c.path, x.Ending(), x.Reason, c.kind, c.reason)
			continue
		}
		switch {
		case c.delay < 0 && x.Delay != nil:
			t.Errorf("%s: a delay of %v staged, want none (the queue's backoff)", c.path, *x.Delay)
		case c.delay >= 0 && (x.Delay == nil || *x.Delay > c.delay || *x.Delay < c.delay-c.slack):
			t.Errorf("%s: delay %v, want %v (less at most %v)", c.path, deref(x.Delay), c.delay, c.slack)
		}
	}
}

// TestJSFetchBounds: the grant's bounds reach fetch as FetchErrors (a body past
// max_response when it is read, the grant's timeout), and a fetch that hangs ends at
// the job's deadline as a timeout while the host waits on it.
func TestJSFetchBounds(t *testing.T) {
	t.Parallel()
	s := outboundtest.NewServer(t, false, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/big" {
			io.WriteString(w, strings.Repeat("x", 2048))
			return
		}
		<-r.Context().Done()
	})
	m := loadJS(t, httpEngine(t, nil), jsEval, fmt.Sprintf("timeout = \"1s\"\n[http]\nallow = [\"http://127.0.0.1:%s\"]\nmax_response = \"1KiB\"\ntimeout = \"300ms\"\n", s.Port))
	hang := loadJS(t, httpEngine(t, nil), jsEval, fmt.Sprintf("timeout = \"1s\"\n[http]\nallow = [\"http://127.0.0.1:%s\"]\ntimeout = \"1h\"\n", s.Port))
	for _, c := range []struct {
		name   string
		m      *host.Module
		src    string
		kind   string // Execution.Ending
		output string
		reason string
	}{
		{"past max_response", m, `const r = await fetch("` + s.URL + `/big"); try { await r.text(); } catch (e) { return e.code + " " + e.kind + " " + e.message; }`,
			"ack", "-16 too_large response too large: the body passes max_response (1024 bytes)", ""},
		{"the grant's timeout", m, `try { await fetch("` + s.URL + `/never"); } catch (e) { return e.code + " " + e.kind; }`, "ack", "-15 timeout", ""},
		{"the job's deadline", hang, `await fetch("` + s.URL + `/never"); return "answered"`, "timeout", "", "timeout after 1s"},
	} {
		t.Run(c.name, func(t *testing.T) {
			x := run(c.m, c.src)
			if x.Ending() != c.kind || string(x.Output) != c.output || x.Reason != c.reason || x.Duration > 2*time.Second {
				t.Fatalf("%s %q %q after %v, want %s %q %q", x.Ending(), x.Reason, x.Output, x.Duration, c.kind, c.reason, c.output)
			}
		})
	}
}

// TestJSFetchBodyBoundedByMemory: with max_response above what the JS handler's memory
// can take (the default 64 MiB and max_response = "100MiB"), a body past the host's cap
// (a fifth of the QuickJS heap) fails its read as too_large (-16), a FetchError the
// handler catches, saying why, whether or not the server announced its length, where
// it used to end the job as a trap (InternalError: out of memory). A body of exactly
// the cap reads whole, as text and as bytes; the default max_response (10 MiB) fits
// under it; the module serves on.
func TestJSFetchBodyBoundedByMemory(t *testing.T) {
	t.Parallel()
	s := outboundtest.NewServer(t, false, func(w http.ResponseWriter, r *http.Request) {
		path, announced := strings.CutPrefix(r.URL.Path, "/cl")
		n, err := strconv.Atoi(strings.TrimPrefix(path, "/"))
		if err != nil {
			http.NotFound(w, r)
			return
		}
		if announced {
			w.Header().Set("Content-Length", strconv.Itoa(n))
		}
		chunk := []byte(strings.Repeat("x", 64<<10))
		for ; n > 0; n -= len(chunk) {
			if _, err := w.Write(chunk[:min(n, len(chunk))]); err != nil {
				return
			}
		}
	})
	m := loadJS(t, httpEngine(t, nil), jsEval, fmt.Sprintf("timeout = \"20s\"\n[http]\nallow = [\"http://127.0.0.1:%s\"]\nmax_response = \"100MiB\"\ntimeout = \"20s\"\n", s.Port))
	read := func(path, op string) host.Execution {
		return run(m, `const r = await fetch("`+s.URL+path+`");
			try { const b = await r.`+op+`(); return "read " + (b.length ?? b.byteLength); } catch (e) { return e.code + " " + e.kind + " " + e.message; }`)
	}
	// The cap, from the refusal of a 40 MiB body.
	x := read("/cl/"+strconv.Itoa(40<<20), "text")
	var most int
	if _, err := fmt.Sscanf(string(x.Output), "-16 too_large response too large: the body passes %d bytes", &most); err != nil || x.Outcome != worker.Ack {
		t.Fatalf("a 40 MiB body: %s %q %q, want a caught -16 too_large saying the cap", x.Ending(), x.Reason, x.Output)
	}
	if most < 10<<20 || most >= 20<<20 {
		t.Fatalf("the cap is %d bytes, want at least the default max_response (10 MiB) and under 20 MiB", most)
	}
	t.Logf("the cap: %d bytes", most)
	for _, c := range []struct {
		name, path, op string
		want           string // the output's start
	}{
		{"40 MiB as bytes", "/cl/" + strconv.Itoa(40<<20), "arrayBuffer", "-16 too_large response too large: the body passes"},
		{"20 MiB, its length unannounced", "/" + strconv.Itoa(20<<20), "text", "-16 too_large response too large: the body passes"},
		{"one byte past the cap, unannounced", "/" + strconv.Itoa(most+1), "text", "-16 too_large"},
		{"one byte past the cap, announced", "/cl/" + strconv.Itoa(most+1), "arrayBuffer", "-16 too_large"},
		{"the cap as text", "/" + strconv.Itoa(most), "text", "read " + strconv.Itoa(most)},
		{"the cap as bytes", "/cl/" + strconv.Itoa(most), "arrayBuffer", "read " + strconv.Itoa(most)},
		{"the default max_response", "/" + strconv.Itoa(10<<20), "text", "read " + strconv.Itoa(10<<20)},
	} {
		t.Run(c.name, func(t *testing.T) {
			x := read(c.path, c.op)
			if x.Outcome != worker.Ack || !strings.HasPrefix(string(x.Output), c.want) {
				t.Fatalf("%s %q %q, want output %q...", x.Ending(), x.Reason, x.Output, c.want)
			}
		})
	}
	if x := run(m, `return "ok"`); x.Outcome != worker.Ack || string(x.Output) != "ok" {
		t.Fatalf("the next job: %s %q %q", x.Ending(), x.Reason, x.Output)
	}
}
