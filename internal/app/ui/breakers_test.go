package ui_test

import (
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/wasmjobs/wasmjobs/internal/app/inspect/inspecttest"
	"github.com/wasmjobs/wasmjobs/internal/app/ui"
)

// The modules page lists each destination's circuit breaker of a module that calls
// out: state, consecutive failures, and when it lets calls through again.
func TestModulesPageShowsCircuitBreakers(t *testing.T) {
	t.Parallel()
	h, rig := rigWith(t, inspecttest.Options{Modules: []inspecttest.Module{inspecttest.Caller("breaker_failures = 3\n")}}, ui.Config{Loopback: true})
	page := func() string {
		return serve(h, httptest.NewRequest("GET", "http://localhost/ui/modules", nil)).Body.String()
	}
	if strings.Contains(page(), `id="breakers-caller"`) {
		t.Fatal("breakers shown before any call")
	}
	dest, run := rig.CallDown(t)
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
