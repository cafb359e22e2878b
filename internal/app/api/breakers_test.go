package api_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/internal/app/api"
	"github.com/wasmjobs/wasmjobs/internal/app/inspect/inspecttest"
)

// GET /v1/modules shows each destination's circuit breaker of a module that calls
// out: its state, consecutive failures and when it lets calls through again.
func TestModulesShowCircuitBreakers(t *testing.T) {
	t.Parallel()
	rig := inspecttest.New(t, inspecttest.Options{Modules: []inspecttest.Module{inspecttest.Caller("breaker_failures = 2\nbreaker_cooldown = \"1h\"\n")}})
	srv := httptest.NewServer(api.New(api.Config{Inspector: rig.Inspector}))
	t.Cleanup(srv.Close)
	dest, call := rig.CallDown(t)
	for range 2 {
		call()
	}
	resp, err := http.Get(srv.URL + "/v1/modules")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Modules []struct {
			Name     string
			Breakers []struct {
				Destination         string
				State               string
				ConsecutiveFailures int `json:"consecutive_failures"`
				Until               time.Time
			}
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	if len(out.Modules) != 1 || len(out.Modules[0].Breakers) != 1 {
		t.Fatalf("modules %+v, want caller with one breaker", out.Modules)
	}
	br := out.Modules[0].Breakers[0]
	if br.Destination != dest || br.State != "open" || time.Until(br.Until) < 59*time.Minute {
		t.Fatalf("breaker %+v, want %s open for an hour", br, dest)
	}
}
