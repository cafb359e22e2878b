package api_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/internal/schedule"
)

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
