package main

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// tlsServer is a loopback https server with a self-signed certificate, written to a
// PEM file for --http-ca.
func tlsServer(t *testing.T, h http.HandlerFunc) (srv *httptest.Server, certFile string) {
	t.Helper()
	dir := t.TempDir()
	certFile, key := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	writeSelfSigned(t, certFile, key)
	pair, err := tls.LoadX509KeyPair(certFile, key)
	if err != nil {
		t.Fatal(err)
	}
	srv = httptest.NewUnstartedServer(h)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv, certFile
}

func portOf(srv *httptest.Server) string {
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	return port
}

// TestInvokeMakesRealRequestsUnderTheGrant: `wasmjobs invoke` runs a module's requests
// for real, under its manifest's grant, against loopback servers: plain http, https
// trusted through --http-ca (and a TLS failure without it), a denied URL that the
// server never receives; --json and the text report list each call, without its query
// string.
func TestInvokeMakesRealRequestsUnderTheGrant(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "plain") }))
	t.Cleanup(plain.Close)
	denied := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	t.Cleanup(denied.Close)
	secure, cert := tlsServer(t, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "secure") })
	dir := t.TempDir()
	path := filepath.Join(dir, "fetch.wasm")
	installModule(t, dir, "abi/http_get", "fetch", "v1")
	manifest := fmt.Sprintf("[http]\nallow = [\"http://127.0.0.1:%s\", \"https://127.0.0.1:%s\"]\n", portOf(plain), portOf(secure))
	writeManifest(t, dir, "fetch", manifest)
	for _, tc := range []struct {
		name, url string
		flags     []string
		output    string // the output's start
		call      reportCall
	}{
		{"http", plain.URL + "/p/q?token=query-secret", nil, "200\n",
			reportCall{Method: "GET", Target: "http://127.0.0.1:" + portOf(plain), Path: "/p/q", Status: 200, Bytes: 5}},
		{"https through --http-ca", secure.URL + "/s", []string{"--http-ca", cert}, "200\n",
			reportCall{Method: "GET", Target: "https://127.0.0.1:" + portOf(secure), Path: "/s", Status: 200, Bytes: 6}},
		{"https without --http-ca", secure.URL + "/s", nil, "-14\nTLS failure: ",
			reportCall{Method: "GET", Target: "https://127.0.0.1:" + portOf(secure), Path: "/s", Error: "tls"}},
		{"denied", denied.URL + "/d?k=query-secret", nil, "-10\ndenied: ",
			reportCall{Method: "GET", Target: "http://127.0.0.1:" + portOf(denied), Path: "/d", Error: "denied"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := wasmjobs(t, "", append([]string{"invoke", path, "--json", "--payload", tc.url}, tc.flags...)...)
			var rep invokeReport
			if err := json.Unmarshal([]byte(r.stdout), &rep); r.code != 0 || err != nil {
				t.Fatalf("exit %d, %v: %s %s", r.code, err, r.stdout, r.stderr)
			}
			if !strings.HasPrefix(rep.Output, tc.output) || len(rep.Calls) != 1 {
				t.Fatalf("output %q, calls %+v; want output %q and one call", rep.Output, rep.Calls, tc.output)
			}
			got := rep.Calls[0]
			if got.DurationMs <= 0 {
				t.Errorf("call %+v has no duration", got)
			}
			got.DurationMs = 0
			if got != tc.call {
				t.Errorf("call %+v, want %+v", got, tc.call)
			}
			text := wasmjobs(t, "", append([]string{"invoke", path, "--payload", tc.url}, tc.flags...)...)
			line := fmt.Sprintf("  GET %s%s: ", tc.call.Target, tc.call.Path)
			if !strings.Contains(text.stdout, "calls     (1)\n"+line) {
				t.Errorf("the text report lacks the call %q:\n%s", line, text.stdout)
			}
			if _, after, _ := strings.Cut(text.stdout, "calls     (1)\n"); strings.Contains(after, "secret") {
				t.Errorf("the text report's calls show the query:\n%s", after)
			}
		})
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the denied server received %d requests", n)
	}
}

// TestInvokeShowsTheHostsDefer: invoke prints what the worker would do, the host's
// own step included: a module that retries after its request opened its
// destination's breaker (breaker_failures = 1, a 500) is shown deferred to wait out
// the outage, with the defer's delay, not retried.
func TestInvokeShowsTheHostsDefer(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusInternalServerError) }))
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	path := filepath.Join(dir, "post.wasm")
	installModule(t, dir, "abi/http_post_retry", "post", "v1")
	manifest := fmt.Sprintf("[http]\nallow = [\"http://127.0.0.1:%s\"]\nbreaker_failures = 1\nbreaker_cooldown = \"40s\"\n", portOf(srv))
	writeManifest(t, dir, "post", manifest)
	r := wasmjobs(t, "", "invoke", path, "--json", "--payload", srv.URL+"/hook")
	var rep invokeReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); r.code != 0 || err != nil {
		t.Fatalf("exit %d, %v: %s %s", r.code, err, r.stdout, r.stderr)
	}
	// The breaker calls again in 40s; the jitter adds up to a quarter of that.
	if rep.Settle != "defer" || !strings.HasPrefix(rep.Reason, "waiting out an outage") || rep.DelayMs == nil || *rep.DelayMs < 39_000 || *rep.DelayMs > 50_000 {
		t.Fatalf("settle %s, reason %q, delay_ms %v; want the outage's defer of 40s to 50s", rep.Settle, rep.Reason, rep.DelayMs)
	}
	text := wasmjobs(t, "", "invoke", path, "--payload", srv.URL+"/hook")
	if !strings.Contains(text.stdout, "settle    defer\nreason    waiting out an outage") {
		t.Errorf("the text report lacks the defer:\n%s", text.stdout)
	}
}

// TestHTTPCAFailsWhenTheSystemRootsCannotBeRead: --http-ca adds to the system's roots;
// when those cannot be read, run and invoke fail saying so, rather than trusting only
// the file's certificates and failing every public https call later.
func TestHTTPCAFailsWhenTheSystemRootsCannotBeRead(t *testing.T) {
	t.Parallel()
	certDir := t.TempDir()
	cert := filepath.Join(certDir, "cert.pem")
	writeSelfSigned(t, cert, filepath.Join(certDir, "key.pem"))
	dir := t.TempDir()
	installModule(t, dir, "abi/http_get", "fetch", "v1")
	// A directory where a file is expected is a read error, which Go's loader reports
	// (a missing file it skips); the empty directory adds no roots.
	env := []string{"SSL_CERT_FILE=" + t.TempDir(), "SSL_CERT_DIR=" + t.TempDir()}
	for _, args := range [][]string{
		// A data directory that cannot be made ends the run right after the roots
		// were read, should they be read.
		{"run", "--modules", dir, "--data-dir", filepath.Join(cert, "data"), "--listen", "127.0.0.1:0", "--http-ca", cert},
		{"invoke", filepath.Join(dir, "fetch.wasm"), "--payload", "x", "--http-ca", cert},
	} {
		t.Run(args[0], func(t *testing.T) {
			t.Parallel()
			r := wasmjobsEnv(t, env, "", args...)
			if r.code != 2 || !strings.Contains(r.stderr, "the system's trusted roots, which it adds to, cannot be read") {
				t.Fatalf("exit %d, stderr %q; want exit 2 saying the system's roots cannot be read", r.code, r.stderr)
			}
		})
	}
}

// TestRunRecordsAndMeasuresCalls: under `wasmjobs run`, on the default backend (job
// records) and on memory (the host's attempt log), a job's calls show in GET
// /v1/jobs/{id} and `jobs get` under its attempt, without the query string or any
// header; /metrics counts them by module, grant and outcome with their durations; and
// /v1/modules shows the grant, naming the host-added header but never its value.
func TestRunRecordsAndMeasuresCalls(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(502)
		fmt.Fprint(w, "bad gateway")
	}))
	t.Cleanup(srv.Close)
	entry := "http://127.0.0.1:" + portOf(srv)
	for _, tc := range []struct {
		name  string
		flags []string
	}{
		{"pebble", nil},
		{"memory", []string{"--backend", "memory"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			man := fmt.Sprintf("[http]\nallow = [%q]\n[http.headers.%q]\nAuthorization = \"Bearer header-secret\"\n", entry, entry)
			writeManifest(t, dir, "fetch", man)
			installModule(t, dir, "abi/http_get", "fetch", "v1")
			h := startHost(t, dir, tc.flags...)
			ok := h.enqueueJSON(`{"queue":"fetch","payload":"` + entry + `/hook?token=query-secret"}`)
			denied := h.enqueueJSON(`{"queue":"fetch","payload":"http://127.0.0.2:9/x"}`)
			var calls []json.RawMessage
			for _, id := range []string{ok, denied} {
				waitFor(t, "job "+id+" to succeed", func() bool { return h.job(id).State == "succeeded" })
				var st struct {
					Attempts []struct {
						Calls []json.RawMessage
					}
				}
				h.get("/v1/jobs/"+id, &st)
				if len(st.Attempts) != 1 || len(st.Attempts[0].Calls) != 1 {
					t.Fatalf("job %s: attempts %+v, want one with one call", id, st.Attempts)
				}
				calls = append(calls, st.Attempts[0].Calls[0])
			}
			for i, want := range []string{
				`{"method":"GET","target":"` + entry + `","path":"/hook","status":502,"duration_ns":`,
				`{"method":"GET","target":"http://127.0.0.2:9","path":"/x","error":"denied","duration_ns":`,
			} {
				if !strings.HasPrefix(string(calls[i]), want) || strings.Contains(string(calls[i]), "secret") {
					t.Errorf("call %d: %s, want it to start %s and hold no secret", i, calls[i], want)
				}
			}
			if !strings.HasSuffix(string(calls[0]), `,"bytes":11}`) {
				t.Errorf("call 0: %s, want the 11 bytes read", calls[0])
			}
			r := wasmjobs(t, "", "jobs", "get", ok, "--server", h.url)
			if r.code != 0 || !strings.Contains(r.stdout, `"target": "`+entry+`"`) || !strings.Contains(r.stdout, `"path": "/hook"`) {
				t.Fatalf("jobs get: %d %s %s", r.code, r.stdout, r.stderr)
			}

			metrics := h.metrics()
			for _, want := range []string{
				`wasmjobs_http_requests_total{grant="` + entry + `",module="fetch",outcome="5xx"} 1`,
				`wasmjobs_http_requests_total{grant="",module="fetch",outcome="denied"} 1`,
				`wasmjobs_http_request_duration_seconds_count{grant="` + entry + `",module="fetch"} 1`,
				`wasmjobs_http_request_duration_seconds_count{grant="",module="fetch"} 1`,
			} {
				if !strings.Contains(metrics, want) {
					t.Errorf("metrics lack %q", want)
				}
			}

			resp, err := http.Get(h.url + "/v1/modules")
			if err != nil {
				t.Fatal(err)
			}
			mods, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if !strings.Contains(string(mods), `"http":{"allow":[{"entry":"`+entry+`","headers":["Authorization"]}]`) || strings.Contains(string(mods), "secret") {
				t.Errorf("/v1/modules: %s; want the grant naming Authorization, without its value", mods)
			}
		})
	}
}
