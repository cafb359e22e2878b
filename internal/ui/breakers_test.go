package ui_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/memory"
	"github.com/wasmjobs/wasmjobs/host"
	"github.com/wasmjobs/wasmjobs/internal/api"
	"github.com/wasmjobs/wasmjobs/internal/ui"
	"github.com/wasmjobs/wasmjobs/worker"
)

// The modules page lists each destination's circuit breaker of a module that calls
// out: state, consecutive failures, and when it lets calls through again.
func TestModulesPageShowsCircuitBreakers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(503) }))
	t.Cleanup(down.Close)
	dir := t.TempDir()
	wasm, err := os.ReadFile("../../testdata/abi/http_post_retry.wasm")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "caller.wasm"), wasm, 0o644)
	os.WriteFile(filepath.Join(dir, "caller.toml"), []byte("[http]\nallow = [\"http://127.0.0.1:1-65535\"]\nbreaker_failures = 3\n"), 0o644)
	e, err := host.NewEngine(ctx, host.Config{NoCache: true})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := host.NewRegistry(host.RegistryConfig{Dir: dir, Engine: e, Queues: noQueues{}})
	if err != nil {
		t.Fatal(err)
	}
	reg.Sync(ctx)
	b := memory.New(memory.Config{})
	t.Cleanup(func() {
		reg.Close()
		reg.Retire()
		b.Close(ctx)
		e.Close(ctx)
	})
	h := ui.New(ui.Config{Backend: b, Registry: reg, Loopback: true, History: api.NewHistory(10)})
	page := func() string {
		return serve(h, httptest.NewRequest("GET", "http://localhost/ui/modules", nil)).Body.String()
	}
	if strings.Contains(page(), `id="breakers-caller"`) {
		t.Fatal("breakers shown before any call")
	}
	run := func() {
		reg.Handler("caller").Handle(ctx, &worker.Job{Envelope: backend.NewEnvelope("caller", []byte(down.URL+"/")), Attempt: 1, MaxAttempts: 3})
	}
	dest := "http://" + down.Listener.Addr().String()
	row := regexp.MustCompile(`<tr><td><code>` + regexp.QuoteMeta(dest) + `</code></td><td><span class="state ([a-z-]+)">[a-z-]+</span></td><td>(\d+)</td><td>(.*?)</td></tr>`)
	run()
	m := row.FindStringSubmatch(page())
	if m == nil || m[1] != "closed" || m[2] != "1" || m[3] != "—" {
		t.Fatalf("after one failure: row %q, want closed, 1 failure, no time", m)
	}
	run()
	run()
	m = row.FindStringSubmatch(page())
	if m == nil || m[1] != "open" || m[2] != "0" || !strings.HasPrefix(m[3], "<time datetime=") {
		t.Fatalf("after three failures: row %q, want open with when calls go again", m)
	}
}
