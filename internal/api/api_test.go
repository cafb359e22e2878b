package api_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/memory"
	"github.com/wasmjobs/wasmjobs/host"
	"github.com/wasmjobs/wasmjobs/internal/abitest"
	"github.com/wasmjobs/wasmjobs/internal/api"
	"github.com/wasmjobs/wasmjobs/internal/metrics"
	"github.com/wasmjobs/wasmjobs/worker"
)

// apiRig is the API in front of a registry with the module "mail" (dead-letters every
// job) and "echo", on a memory backend, with a started worker.
type apiRig struct {
	srv  *httptest.Server
	b    *memory.Backend
	hist *api.History
}

func newAPIRig(t *testing.T, token string) *apiRig {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	for name, rel := range map[string]string{"mail": "abi/dead_letter", "echo": "abi/echo"} {
		wasm, err := os.ReadFile(filepath.Join(abitest.Dir(), rel+".wasm"))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, name+".wasm"), wasm, 0o644)
	}
	os.WriteFile(filepath.Join(dir, "echo.toml"), []byte("max_payload = 16"), 0o644)
	e, err := host.NewEngine(ctx, host.Config{NoCache: true})
	if err != nil {
		t.Fatal(err)
	}
	b := memory.New(memory.Config{})
	hist := api.NewHistory(100)
	met := metrics.New()
	w := worker.New(b, worker.Config{Observer: worker.Observers(hist, met)})
	reg, err := host.NewRegistry(host.RegistryConfig{Dir: dir, Engine: e, Queues: w, Rescan: time.Hour, OnEvent: met.ModuleEvent})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.New(api.Config{Backend: b, Registry: reg, Running: w.Running, History: hist,
		Metrics: met.Handler(), Token: token, MaxBody: 1 << 12}))
	t.Cleanup(func() {
		srv.Close()
		reg.Close()
		w.Stop(ctx)
		reg.Retire()
		b.Close(ctx)
		e.Close(ctx)
	})
	return &apiRig{srv: srv, b: b, hist: hist}
}

// call sends a request and returns the status and decoded JSON body.
func (r *apiRig) call(t *testing.T, method, path, body string, header ...string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, r.srv.URL+path, strings.NewReader(body))
	for i := 0; i+1 < len(header); i += 2 {
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
		{"negative delay", "POST", "/v1/jobs", `{"queue": "echo", "delay": "-1s"}`, 400, `delay "-1s" is negative`},
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
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := r.call(t, tc.method, tc.path, tc.body)
			msg, _ := body["error"].(string)
			if status != tc.status || !strings.Contains(msg, tc.want) {
				t.Fatalf("%d %q, want %d and an error containing %q", status, msg, tc.status, tc.want)
			}
		})
	}
	if st, _ := r.b.Stats("echo"); st.Pending+st.Acked != 0 {
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

func TestHistoryForgetsTheOldest(t *testing.T) {
	t.Parallel()
	h := api.NewHistory(3)
	var ids []string
	for range 5 {
		env := backend.NewEnvelope("q", nil)
		ids = append(ids, env.ID)
		h.Enqueued(env, false)
	}
	if h.Len() != 3 {
		t.Fatalf("len %d", h.Len())
	}
	if _, ok := h.Get(ids[1]); ok {
		t.Fatal("the second oldest is still there")
	}
	if st, ok := h.Get(ids[4]); !ok || st.State != "pending" {
		t.Fatalf("newest %+v %v", st, ok)
	}
	h.Forget(ids[4])
	if _, ok := h.Get(ids[4]); ok || h.Len() != 2 {
		t.Fatal("Forget kept the job")
	}
}
