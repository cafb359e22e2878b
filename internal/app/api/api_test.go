package api_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/memory"
	"github.com/wasmjobs/wasmjobs/internal/app/api"
	"github.com/wasmjobs/wasmjobs/internal/app/inspect"
	"github.com/wasmjobs/wasmjobs/internal/app/inspect/inspecttest"
	"github.com/wasmjobs/wasmjobs/internal/schedule"
)

// apiRig is the API in front of a registry with the module "mail" (dead-letters every
// job) and "echo" (its payloads up to 16 bytes), with a started worker.
type apiRig struct {
	*inspecttest.Rig
	srv *httptest.Server
}

// rigConfig is what a test may change of its rig: the API's configuration, and the
// Inspector's (Inspect).
type rigConfig struct {
	api.Config
	Inspect inspect.Config
}

// newAPIRig is newRigOn on a memory backend.
func newAPIRig(t *testing.T, token string, opts ...func(*rigConfig)) *apiRig {
	t.Helper()
	return newRigOn(t, inspecttest.Options{}, token, opts...)
}

// newRigOn is the API on the rig of o (its modules, "mail" and "echo" before any of
// o's, and a started worker, are the API tests' own).
func newRigOn(t *testing.T, o inspecttest.Options, token string, opts ...func(*rigConfig)) *apiRig {
	t.Helper()
	rc := rigConfig{Config: api.Config{Token: token, MaxBody: 1 << 12}}
	o.Modules = append([]inspecttest.Module{{Name: "mail", Wasm: "abi/dead_letter"}, {Name: "echo", Wasm: "abi/echo", Manifest: "max_payload = 16"}}, o.Modules...)
	o.Run = true
	o.Inspect = func(c *inspect.Config) {
		rc.Inspect = *c
		for _, opt := range opts {
			opt(&rc)
		}
		*c = rc.Inspect
	}
	rig := inspecttest.New(t, o)
	rc.Inspector, rc.Metrics = rig.Inspector, rig.Metrics.Handler()
	srv := httptest.NewServer(api.New(rc.Config))
	t.Cleanup(srv.Close)
	return &apiRig{Rig: rig, srv: srv}
}

// on is the rig options of backend b.
func on(b backend.Backend) inspecttest.Options { return inspecttest.Options{Backend: b} }

// call sends a request and returns the status and decoded JSON body. A body is sent
// as application/json unless header says otherwise; header "Host" sets the Host.
func (r *apiRig) call(t *testing.T, method, path, body string, header ...string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, r.srv.URL+path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i] == "Host" {
			req.Host = header[i+1]
			continue
		}
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil && resp.Header.Get("Content-Type") == "application/json" {
		t.Fatalf("%s %s: not JSON: %s", method, path, b)
	}
	return resp.StatusCode, out
}

func TestBadInputGetsAClearError(t *testing.T) {
	t.Parallel()
	r := newAPIRig(t, "")
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
		want                     string
	}{
		{"malformed JSON", "POST", "/v1/jobs", `{"queue": "echo",`, 400, "invalid JSON: the body ends early"},
		{"JSON syntax", "POST", "/v1/jobs", `{"queue" "echo"}`, 400, "invalid JSON at byte 10"},
		{"empty body", "POST", "/v1/jobs", ``, 400, "empty body: want a JSON object"},
		{"two values", "POST", "/v1/jobs", `{"queue":"echo"} {}`, 400, "more than one value"},
		{"wrong type", "POST", "/v1/jobs", `{"queue": "echo", "priority": "high"}`, 400, "field priority: want int, got string"},
		{"unknown field", "POST", "/v1/jobs", `{"queue": "echo", "colour": "red"}`, 400, `invalid request: unknown field "colour"`},
		{"no queue", "POST", "/v1/jobs", `{"payload": "x"}`, 400, "queue is required"},
		{"unknown queue", "POST", "/v1/jobs", `{"queue": "nope"}`, 404, `unknown queue "nope": no module serves it (served: echo, mail)`},
		{"both payloads", "POST", "/v1/jobs", `{"queue": "echo", "payload": "a", "payload_base64": "YQ=="}`, 400, "give payload or payload_base64, not both"},
		{"bad base64", "POST", "/v1/jobs", `{"queue": "echo", "payload_base64": "%%%"}`, 400, "payload_base64: illegal base64 data at input byte 0"},
		{"bad duration", "POST", "/v1/jobs", `{"queue": "echo", "delay": "soon"}`, 400, `delay: want a duration such as "90s" or "1h30m", got "soon"`},
		{"negative delay", "POST", "/v1/jobs", `{"queue": "echo", "delay": "-1s"}`, 400, `delay -1s is negative`},
		{"priority out of range", "POST", "/v1/jobs", `{"queue": "echo", "priority": 7}`, 400, "priority 7: want 0 to 1"},
		{"negative max attempts", "POST", "/v1/jobs", `{"queue": "echo", "max_attempts": -2}`, 400, "max_attempts -2: want 0 (the queue's) or more"},
		{"reserved header", "POST", "/v1/jobs", `{"queue": "echo", "headers": {"wasmjobs-priority": "1"}}`, 400, `"wasmjobs-priority": the prefix wasmjobs- is reserved`},
		{"empty header key", "POST", "/v1/jobs", `{"queue": "echo", "headers": {"": "1"}}`, 400, "headers: empty key"},
		{"payload over the module's limit", "POST", "/v1/jobs", `{"queue": "echo", "payload": "0123456789abcdefg"}`, 413, "payload of 17 bytes passes queue echo's limit of 16 bytes"},
		{"huge body", "POST", "/v1/jobs", `{"queue": "echo", "payload": "` + strings.Repeat("x", 5000) + `"}`, 413, "request body passes the limit of 4096 bytes"},
		{"empty batch", "POST", "/v1/jobs/batch", `{"jobs": []}`, 400, "jobs: want 1 to 1000 jobs, got 0"},
		{"bad job in a batch", "POST", "/v1/jobs/batch", `{"jobs": [{"queue": "echo"}, {"queue": "nope"}]}`, 404, `jobs[1]: unknown queue "nope"`},
		{"unknown job", "GET", "/v1/jobs/01NOPE", ``, 404, `job "01NOPE" is not in this host's recent history`},
		{"dead letters without queue", "GET", "/v1/dead-letters", ``, 400, "the query parameter queue is required"},
		{"dead letters of an unknown queue", "GET", "/v1/dead-letters?queue=nope", ``, 404, `unknown queue "nope"`},
		{"bad limit", "GET", "/v1/dead-letters?queue=echo&limit=-1", ``, 400, `limit "-1": want a positive number`},
		{"replay of an unknown dead letter", "POST", "/v1/dead-letters/01NOPE/replay", ``, 404, `no dead letter "01NOPE" in queues echo, mail`},
		{"replay in an unknown queue", "POST", "/v1/dead-letters/01NOPE/replay?queue=nope", ``, 404, `unknown queue "nope"`},
		{"purge without queue", "DELETE", "/v1/dead-letters", ``, 400, "the query parameter queue is required"},
		{"no such endpoint", "GET", "/v2/things", ``, 404, "no such endpoint: GET /v2/things"},
		{"history of a path", "GET", "/v1/modules/..%2F..%2Fx/history", ``, 404, `no such module: "../../x" is not a module name`},
		{"history of an unknown module", "GET", "/v1/modules/nope/history", ``, 404, `no such module: "nope"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := r.call(t, tc.method, tc.path, tc.body)
			msg, _ := body["error"].(string)
			if status != tc.status || !strings.Contains(msg, tc.want) {
				t.Fatalf("%d %q, want %d and an error containing %q", status, msg, tc.status, tc.want)
			}
		})
	}
	if st, _ := r.Backend.(*memory.Backend).Stats("echo"); st.Pending+st.Acked != 0 {
		t.Fatalf("a refused request published something: %+v", st)
	}
}

func TestEnqueueFollowAndDeadLetters(t *testing.T) {
	t.Parallel()
	r := newAPIRig(t, "")
	status, body := r.call(t, "POST", "/v1/jobs", `{"queue": "echo", "payload_base64": "aGk=", "headers": {"k": "v"}, "max_attempts": 2}`)
	if status != 202 {
		t.Fatalf("%d %v", status, body)
	}
	id := body["id"].(string)
	var job map[string]any
	deadline := time.Now().Add(10 * time.Second)
	for job["state"] != "succeeded" && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		_, job = r.call(t, "GET", "/v1/jobs/"+id, "")
	}
	if job["output"] != "hi" || job["max_attempts"] != 2.0 || job["module"].(map[string]any)["name"] != "echo" {
		t.Fatalf("job %v", job)
	}
	// A delayed job is deferred until it runs.
	status, body = r.call(t, "POST", "/v1/jobs", `{"queue": "echo", "delay": "1h", "priority": 1}`)
	if _, job = r.call(t, "GET", "/v1/jobs/"+body["id"].(string), ""); status != 202 || job["state"] != "deferred" {
		t.Fatalf("delayed job %d %v", status, job)
	}
	// mail (dead_letter.wasm) dead-letters everything.
	status, body = r.call(t, "POST", "/v1/jobs/batch", `{"jobs": [{"queue": "mail", "payload": "a"}, {"queue": "mail", "payload": "b"}]}`)
	if status != 202 || len(body["ids"].([]any)) != 2 {
		t.Fatalf("batch %d %v", status, body)
	}
	var dead map[string]any
	for time.Now().Before(deadline) {
		_, dead = r.call(t, "GET", "/v1/dead-letters?queue=mail", "")
		if len(dead["dead_letters"].([]any)) == 2 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The worker ran the two concurrently: find the one with payload a.
	var first map[string]any
	for _, d := range dead["dead_letters"].([]any) {
		if d.(map[string]any)["payload"] == "a" {
			first = d.(map[string]any)
		}
	}
	if first["reason"] != "bad input" || first["payload"] != "a" || first["payload_base64"] != "YQ==" {
		t.Fatalf("dead letter %v", first)
	}
	if status, body := r.call(t, "POST", "/v1/dead-letters/"+first["id"].(string)+"/replay", ""); status != 200 || body["queue"] != "mail" {
		t.Fatalf("replay %d %v", status, body)
	}
	_, q := r.call(t, "GET", "/v1/queues", "")
	if len(q["queues"].([]any)) != 2 {
		t.Fatalf("queues %v", q)
	}
	// The replayed job dies again; then purge.
	for time.Now().Before(deadline) {
		if _, dead = r.call(t, "GET", "/v1/dead-letters?queue=mail", ""); len(dead["dead_letters"].([]any)) == 2 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if status, body := r.call(t, "DELETE", "/v1/dead-letters?queue=mail", ""); status != 200 || body["purged"] != 2.0 {
		t.Fatalf("purge %d %v", status, body)
	}
	if status, body := r.call(t, "GET", "/v1/modules", ""); status != 200 || len(body["modules"].([]any)) != 2 {
		t.Fatalf("modules %d %v", status, body)
	}
}

func TestTokenIsRequiredWhenSet(t *testing.T) {
	t.Parallel()
	r := newAPIRig(t, "s3cret")
	if status, body := r.call(t, "GET", "/v1/queues", ""); status != 401 || body["error"] != "missing or wrong bearer token" {
		t.Fatalf("no token: %d %v", status, body)
	}
	if status, _ := r.call(t, "GET", "/v1/queues", "", "Authorization", "Bearer wrong"); status != 401 {
		t.Fatalf("wrong token: %d", status)
	}
	if status, _ := r.call(t, "GET", "/metrics", "", "Authorization", "Bearer wrong"); status != 401 {
		t.Fatalf("metrics with a wrong token: %d", status)
	}
	if status, _ := r.call(t, "GET", "/v1/queues", "", "Authorization", "Bearer s3cret"); status != 200 {
		t.Fatalf("right token: %d", status)
	}
	for _, p := range []string{"/healthz", "/readyz"} {
		if status, _ := r.call(t, "GET", p, ""); status != 200 {
			t.Fatalf("%s without a token: %d", p, status)
		}
	}
}

// TestEnqueueIsRefusedWhileDraining: from the moment the host stops accepting (the
// first signal), every way of enqueueing answers 503 and publishes nothing, while the
// reads go on answering.
func TestEnqueueIsRefusedWhileDraining(t *testing.T) {
	t.Parallel()
	var ready atomic.Bool
	ready.Store(true)
	r := newAPIRig(t, "", func(c *rigConfig) { c.Ready, c.Inspect.Refusal = ready.Load, inspecttest.Refusal(ready.Load) })
	status, body := r.call(t, "POST", "/v1/jobs", `{"queue": "echo", "delay": "1h"}`)
	if status != 202 {
		t.Fatalf("before the drain: %d %v", status, body)
	}
	id := body["id"].(string)
	ready.Store(false)
	for _, tc := range []struct{ path, body string }{
		{"/v1/jobs", `{"queue": "echo", "payload": "x"}`},
		{"/v1/jobs/batch", `{"jobs": [{"queue": "echo"}, {"queue": "mail"}]}`},
		{"/v1/dead-letters/" + id + "/replay?queue=echo", ""},
	} {
		status, body := r.call(t, "POST", tc.path, tc.body)
		if msg, _ := body["error"].(string); status != 503 || !strings.Contains(msg, "the host is draining") {
			t.Errorf("POST %s while draining: %d %v, want 503 saying the host is draining", tc.path, status, body)
		}
	}
	st, _ := r.Backend.(*memory.Backend).Stats("echo")
	if st.Pending+st.Delayed+st.Acked != 1 {
		t.Fatalf("a refused enqueue was published: %+v", st)
	}
	for path, want := range map[string]int{"/v1/jobs/" + id: 200, "/v1/queues": 200, "/v1/modules": 200, "/healthz": 200, "/readyz": 503} {
		if status, body := r.call(t, "GET", path, ""); status != want {
			t.Errorf("GET %s while draining: %d %v, want %d", path, status, body, want)
		}
	}
}

// TestAcceptingIsItsOwnSwitch: a host may stay ready while it takes no jobs.
func TestAcceptingIsItsOwnSwitch(t *testing.T) {
	t.Parallel()
	r := newAPIRig(t, "", func(c *rigConfig) { c.Inspect.Refusal = inspecttest.Refusal(func() bool { return false }) })
	if status, _ := r.call(t, "POST", "/v1/jobs", `{"queue": "echo"}`); status != 503 {
		t.Fatalf("not accepting: %d", status)
	}
	if status, _ := r.call(t, "GET", "/readyz", ""); status != 200 {
		t.Fatalf("readyz: %d", status)
	}
}

// TestCrossSiteRequestsAreRefused: a web page the user visits cannot drive a loopback
// API: not with a form or text/plain POST (no CORS preflight), not with a cross-origin
// state change, not through a DNS name rebound to 127.0.0.1. What a client of its own
// sends (no Origin, a loopback Host, JSON) goes through.
func TestCrossSiteRequestsAreRefused(t *testing.T) {
	t.Parallel()
	r := newAPIRig(t, "", func(c *rigConfig) { c.Loopback = true })
	job := `{"queue": "echo", "delay": "1h"}`
	for _, tc := range []struct {
		name, method, path, body string
		header                   []string
		status                   int
		want                     string
	}{
		{"text/plain from another site", "POST", "/v1/jobs", job,
			[]string{"Content-Type", "text/plain", "Origin", "http://evil.example"}, 403, "cross-origin request refused"},
		{"a form from another site", "POST", "/v1/jobs", "queue=echo",
			[]string{"Content-Type", "application/x-www-form-urlencoded", "Origin", "http://evil.example", "Sec-Fetch-Site", "cross-site"}, 403, "cross-origin request refused"},
		{"JSON from another site", "POST", "/v1/jobs/batch", `{"jobs": [` + job + `]}`,
			[]string{"Origin", "https://evil.example"}, 403, "cross-origin request refused"},
		{"a purge from another site", "DELETE", "/v1/dead-letters?queue=mail", "",
			[]string{"Sec-Fetch-Site", "cross-site"}, 403, "cross-origin request refused"},
		{"text/plain without an origin", "POST", "/v1/jobs", job,
			[]string{"Content-Type", "text/plain"}, 415, `Content-Type "text/plain": a request body must be application/json`},
		{"no content type", "POST", "/v1/jobs", job,
			[]string{"Content-Type", ""}, 415, "a request body must be application/json"},
		{"a rebound DNS name", "GET", "/v1/queues", "", []string{"Host", "rebind.evil.example"}, 403, `Host "rebind.evil.example" refused`},
		{"a rebound DNS name with a port", "POST", "/v1/jobs", job, []string{"Host", "evil.example:8080"}, 403, "this API listens on loopback"},
		{"a LAN address", "GET", "/healthz", "", []string{"Host", "192.168.1.2:8080"}, 403, "refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := r.call(t, tc.method, tc.path, tc.body, tc.header...)
			if msg, _ := body["error"].(string); status != tc.status || !strings.Contains(msg, tc.want) {
				t.Fatalf("%d %v, want %d and an error containing %q", status, body, tc.status, tc.want)
			}
		})
	}
	if st, _ := r.Backend.(*memory.Backend).Stats("echo"); st.Pending+st.Delayed+st.Acked != 0 {
		t.Fatalf("a refused request published something: %+v", st)
	}
	for _, tc := range []struct {
		name, method, path, body string
		header                   []string
		status                   int
	}{
		{"a client of its own", "POST", "/v1/jobs", job, nil, 202},
		{"JSON with a charset", "POST", "/v1/jobs", job, []string{"Content-Type", "application/json; charset=utf-8"}, 202},
		{"the same origin", "POST", "/v1/jobs", job, []string{"Origin", r.srv.URL, "Sec-Fetch-Site", "same-origin"}, 202},
		{"localhost", "GET", "/v1/queues", "", []string{"Host", "localhost:8080"}, 200},
		{"LOCALHOST without a port", "GET", "/v1/queues", "", []string{"Host", "LOCALHOST"}, 200},
		{"127.0.0.0/8", "GET", "/v1/queues", "", []string{"Host", "127.1.2.3:80"}, 200},
		{"IPv6 loopback", "GET", "/v1/queues", "", []string{"Host", "[::1]:8080"}, 200},
		{"IPv6 loopback without a port", "GET", "/v1/queues", "", []string{"Host", "[::1]"}, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if status, body := r.call(t, tc.method, tc.path, tc.body, tc.header...); status != tc.status {
				t.Fatalf("%d %v, want %d", status, body, tc.status)
			}
		})
	}
}

// TestForeignHostIsFineBeyondLoopback: a host listening beyond loopback is reached by
// names of its own; there the token guards it.
func TestForeignHostIsFineBeyondLoopback(t *testing.T) {
	t.Parallel()
	r := newAPIRig(t, "")
	if status, body := r.call(t, "GET", "/v1/queues", "", "Host", "jobs.internal:8080"); status != 200 {
		t.Fatalf("%d %v", status, body)
	}
}

// noStats is a backend that cannot count: it hides memory's StatsReader.
type noStats struct{ backend.Backend }

// TestQueueCountsTellUnknownFromFailed: a backend that cannot count shows -1 and no
// error; a count that fails is logged and shown in the queue's error, with no counts.
func TestQueueCountsTellUnknownFromFailed(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	var mu sync.Mutex
	r := newAPIRig(t, "", func(c *rigConfig) {
		c.Inspect.Logger = slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &mu}, nil))
	})
	_, body := r.call(t, "GET", "/v1/queues", "")
	q := body["queues"].([]any)[0].(map[string]any)
	if q["pending"] != 0.0 || q["error"] != nil {
		t.Fatalf("counted: %v", q)
	}
	r.Backend.Close(context.Background()) // every count now fails with backend.ErrShutDown
	_, body = r.call(t, "GET", "/v1/queues", "")
	for _, q := range body["queues"].([]any) {
		q := q.(map[string]any)
		msg, _ := q["error"].(string)
		if _, counted := q["pending"]; counted || !strings.Contains(msg, "counting the messages of queue "+q["name"].(string)+": backend shut down") {
			t.Fatalf("failed count: %v", q)
		}
	}
	mu.Lock()
	logged := logs.String()
	mu.Unlock()
	if !strings.Contains(logged, `level=ERROR msg="counting a queue's messages failed" queue=echo error="backend shut down"`) {
		t.Fatalf("log: %s", logged)
	}

	u := newAPIRig(t, "", func(c *rigConfig) { c.Inspect.Backend = noStats{c.Inspect.Backend} })
	_, body = u.call(t, "GET", "/v1/queues", "")
	q = body["queues"].([]any)[0].(map[string]any)
	if q["pending"] != -1.0 || q["dead"] != -1.0 || q["key_waiting"] != -1.0 || q["error"] != nil {
		t.Fatalf("unknown counts: %v", q)
	}
}

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// drainsOnPublish is a memory backend whose first publish starts the drain (the host's
// first signal comes while the job is published).
type drainsOnPublish struct {
	*memory.Backend
	draining atomic.Bool
}

func (b *drainsOnPublish) Publish(ctx context.Context, env backend.Envelope, delay time.Duration) error {
	defer b.draining.Store(true)
	return b.Backend.Publish(ctx, env, delay)
}

// TestEnqueueOvertakenByTheDrainIsNot202: a job whose publish the first signal
// overtook may be dropped at exit, so it is not answered 202.
func TestEnqueueOvertakenByTheDrainIsNot202(t *testing.T) {
	t.Parallel()
	for _, path := range []string{"/v1/jobs", "/v1/jobs/batch"} {
		t.Run(path, func(t *testing.T) {
			// Accepting when the request arrives, draining by the time its publish is done.
			b := &drainsOnPublish{Backend: memory.New(memory.Config{})}
			r := newRigOn(t, on(b), "", func(c *rigConfig) { c.Inspect.Refusal = inspecttest.Refusal(func() bool { return !b.draining.Load() }) })
			body := `{"queue": "echo", "delay": "1h"}`
			if path == "/v1/jobs/batch" {
				body = `{"jobs": [` + body + `]}`
			}
			status, got := r.call(t, "POST", path, body)
			msg, _ := got["error"].(string)
			ids, _ := got["ids"].([]any)
			if status != 503 || !strings.Contains(msg, "the host is draining (shutting down): it began while job") || len(ids) != 0 || got["id"] != nil {
				t.Fatalf("%d %v, want 503 and no id", status, got)
			}
			// The client was told the job was refused: its history does not show it pending.
			if n := r.Records.Len(); n != 0 {
				t.Fatalf("the history holds %d jobs after the 503, want none", n)
			}
		})
	}
}

func TestIsLoopbackHost(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		host string
		want bool
	}{
		{"localhost", true},
		{"LOCALHOST", true},
		{"localhost:8080", true},
		{"localhost.", true},
		{"localhost.:8080", true},
		{"LocalHost.:80", true},
		{"127.0.0.1", true},
		{"127.1.2.3:80", true},
		{"[::1]", true},
		{"[::1]:8080", true},
		{"", false},
		{"localhost..", false},
		{"localhost.evil.example", false},
		{"evil.localhost", false},
		{"127.0.0.1.", false},
		{"192.168.1.2:8080", false},
		{"[::2]:8080", false},
		{"rebind.evil.example", false},
	} {
		if got := inspect.IsLoopbackHost(tc.host); got != tc.want {
			t.Errorf("IsLoopbackHost(%q) = %v, want %v", tc.host, got, tc.want)
		}
	}
}

// TestLoopbackAnswersRequestsWithoutHost: on loopback, a request that names no Host
// (HTTP/1.0, as a load balancer's default health check sends it) is answered: a
// browser always sends a Host, so it cannot be a rebinding. A foreign Host is still
// refused over HTTP/1.0.
func TestLoopbackAnswersRequestsWithoutHost(t *testing.T) {
	t.Parallel()
	r := newAPIRig(t, "", func(c *rigConfig) { c.Loopback = true })
	for _, tc := range []struct {
		name, request string
		status        int
	}{
		{"HTTP/1.0 without Host", "GET /healthz HTTP/1.0\r\n\r\n", 200},
		{"HTTP/1.0 without Host, an API read", "GET /v1/queues HTTP/1.0\r\n\r\n", 200},
		{"HTTP/1.0 with localhost.", "GET /healthz HTTP/1.0\r\nHost: localhost.\r\n\r\n", 200},
		{"HTTP/1.0 with a foreign Host", "GET /healthz HTTP/1.0\r\nHost: rebind.evil.example\r\n\r\n", 403},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", r.srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := io.WriteString(conn, tc.request); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status {
				t.Fatalf("%d %s, want %d", resp.StatusCode, body, tc.status)
			}
		})
	}
}

// shortDelays is a memory backend whose delays end sooner than backend.MaxDelay, as
// RabbitMQ's delay chain does: a fault injector for the API's answer.
type shortDelays struct{ *memory.Backend }

func (b shortDelays) Publish(ctx context.Context, env backend.Envelope, delay time.Duration) error {
	if delay > time.Hour {
		return fmt.Errorf("delay %v past this backend's 1h: %w", delay, backend.ErrDelayTooLong)
	}
	return b.Backend.Publish(ctx, env, delay)
}

func TestDelayPastTheBackendsLimitIsTheClientsToFix(t *testing.T) {
	t.Parallel()
	r := newRigOn(t, on(shortDelays{memory.New(memory.Config{})}), "")
	status, body := r.call(t, "POST", "/v1/jobs", `{"queue":"echo","payload":"x","delay":"2h"}`)
	if status != http.StatusBadRequest || !strings.Contains(fmt.Sprint(body["error"]), "1h") {
		t.Fatalf("enqueue with a delay past the backend's limit: %d %v, want 400 naming the limit", status, body)
	}
	if status, body := r.call(t, "POST", "/v1/jobs", `{"queue":"echo","payload":"x","delay":"2s"}`); status != http.StatusAccepted {
		t.Fatalf("enqueue with a short delay: %d %v, want 202", status, body)
	}
}

func TestSchedules(t *testing.T) {
	t.Parallel()
	next := time.Date(2026, 11, 30, 15, 0, 0, 0, time.UTC)
	list := []schedule.Status{{Name: "echo/hourly", Module: "echo", Queue: "echo", Cron: "@hourly", Timezone: "UTC",
		Overlap: "skip", CatchUp: true, Next: next, Last: next.Add(-time.Hour), LastID: "ID", Firing: true}}
	r := newAPIRig(t, "", func(c *rigConfig) { c.Inspect.Schedules = func() []schedule.Status { return list } })
	status, body := r.call(t, "GET", "/v1/schedules", "")
	got, _ := body["schedules"].([]any)
	if status != http.StatusOK || len(got) != 1 {
		t.Fatalf("GET /v1/schedules: %d %v", status, body)
	}
	s := got[0].(map[string]any)
	if s["name"] != "echo/hourly" || s["next"] != "2026-11-30T15:00:00Z" || s["last"] != "2026-11-30T14:00:00Z" ||
		s["last_id"] != "ID" || s["firing"] != true || s["cron"] != "@hourly" || s["catch_up"] != true {
		t.Errorf("schedule %v", s)
	}
	// Without schedules: an empty list, not null.
	status, body = newAPIRig(t, "").call(t, "GET", "/v1/schedules", "")
	if got, ok := body["schedules"].([]any); status != http.StatusOK || !ok || len(got) != 0 {
		t.Errorf("GET /v1/schedules with none: %d %v", status, body)
	}
}
