package ui_test

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/internal/app/inspect/inspecttest"
	"github.com/wasmjobs/wasmjobs/internal/app/ui"
	"github.com/wasmjobs/wasmjobs/worker"
)

// TestJobPageShowsEachAttemptsCalls: the job page lists an attempt's calls (method,
// target, path, status or error, duration, bytes) and counts those not kept.
func TestJobPageShowsEachAttemptsCalls(t *testing.T) {
	t.Parallel()
	h, rg := rig(t, nil, ui.Config{})
	job := &worker.Job{Envelope: backend.Envelope{ID: "01CALLS", Queue: "echo"}, Attempt: 1}
	rg.Records.Observe(worker.Event{Kind: worker.EventSettled, Settle: worker.Retry, Job: job, Result: worker.Result{Handler: "echo",
		Calls: []worker.Call{
			{Method: "POST", Target: "https://api.test:443", Path: "/v1/charges", Status: 503, Duration: 12 * time.Millisecond, Bytes: 42},
			{Method: "GET", Target: "http://10.0.0.1:80", Path: "/meta", Error: "denied", Duration: time.Microsecond},
		}, CallsDropped: 7}})
	w := serve(h, httptest.NewRequest("GET", "http://localhost/ui/jobs/01CALLS", nil))
	_, table, _ := strings.Cut(w.Body.String(), `id="calls-0"`)
	table, rest, _ := strings.Cut(table, "</table>")
	for _, want := range []string{"POST", "<code>https://api.test:443</code>", "<code>/v1/charges</code>", "503", "12ms", "42",
		"<code>http://10.0.0.1:80</code>", `<span class="state dead">denied</span>`} {
		if !strings.Contains(table, want) {
			t.Errorf("the calls table lacks %q:\n%s", want, table)
		}
	}
	if !strings.Contains(rest, "And 7 more calls") {
		t.Errorf("the page does not count the calls not kept")
	}
}

// TestModulesPageShowsTheGrantWithoutHeaderValues: the modules page shows a module's
// [http] grant: its entries, the names of the headers the host adds (never their
// values), its limits and bounds, its circuit breakers' settings and outage_wait;
// /v1/modules carries the same.
func TestModulesPageShowsTheGrantWithoutHeaderValues(t *testing.T) {
	t.Parallel()
	h, rg := rigWith(t, inspecttest.Options{Modules: []inspecttest.Module{{Name: "echo", Wasm: "abi/echo", Manifest: `[http]
allow = ["https://api.test", "http://127.0.0.1:9000"]
timeout = "7s"
breaker_failures = 7
breaker_cooldown = "45s"
outage_wait = "2h"
[http.headers."https://api.test"]
Authorization = "Bearer sk-very-secret"
[http.limits."https://api.test"]
rate = "5/s"
burst = 2
concurrency = 3
`}}}, ui.Config{})
	body := serve(h, httptest.NewRequest("GET", "http://localhost/ui/modules", nil)).Body.String()
	_, grant, _ := strings.Cut(body, `id="grant-echo"`)
	grant, _, _ = strings.Cut(grant, "</div>")
	for _, want := range []string{"<code>https://api.test:443</code>, the host adds <code>Authorization</code>, at most 5/s (burst 2), 3 at once",
		"<code>http://127.0.0.1:9000</code></li>", "timeout 7s",
		"a destination's breaker opens after 7 consecutive failures, for 45s; an outage defers a job for at most 2h0m0s in all"} {
		if !strings.Contains(grant, want) {
			t.Errorf("the grant lacks %q:\n%s", want, grant)
		}
	}
	if strings.Contains(body, "secret") {
		t.Errorf("the modules page shows a header's value")
	}
	mods := rg.Registry.Modules()
	if len(mods) != 1 || mods[0].HTTP == nil || len(mods[0].HTTP.Allow) != 2 || mods[0].HTTP.Allow[0].Headers[0] != "Authorization" {
		t.Fatalf("Modules() = %+v, want echo's grant", mods)
	}
	if g := mods[0].HTTP; g.BreakerFailures != 7 || g.BreakerCooldown != "45s" || g.OutageWait != "2h0m0s" {
		t.Errorf("Modules() grant: breaker_failures %d, breaker_cooldown %q, outage_wait %q; want 7, 45s, 2h0m0s", g.BreakerFailures, g.BreakerCooldown, g.OutageWait)
	}
}
