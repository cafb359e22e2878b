package server

import (
	"reflect"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/host"
	"github.com/wasmjobs/wasmjobs/internal/schedule"
)

// TestSpecOfAManifestsSchedule: the scheduler's spec of a manifest's schedule (host's
// own test reads the same manifest), made from host.Schedule, fires when it says: the same line in the same zone,
// with the same payload, headers, overlap and catch-up, defaults included.
func TestSpecOfAManifestsSchedule(t *testing.T) {
	m, err := host.ReadManifest("../testdata/manifests/reports.wasm") // its manifest, reports.toml
	if err != nil {
		t.Fatal(err)
	}
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Skip("no zone data:", err)
	}
	want := []schedule.Spec{
		{Name: "nightly", Payload: []byte(`{"kind": "daily"}`), Headers: map[string]string{"source": "cron"}, Overlap: schedule.OverlapAllow},
		{Name: "@every 10m", Overlap: schedule.OverlapSkip, CatchUp: true},
	}
	zones := []*time.Location{berlin, time.UTC}
	lines := []string{"30 2 * * *", "@every 10m"}
	got := m.Schedules()
	if len(got) != len(want) {
		t.Fatalf("%d schedules, want %d", len(got), len(want))
	}
	from := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	for i, s := range got {
		spec, err := specOf(s)
		if err != nil {
			t.Fatalf("schedule %d: %v", i, err)
		}
		if spec.Cron.String() != lines[i] || spec.Cron.Location().String() != zones[i].String() {
			t.Errorf("schedule %d: cron %q in %v, want %q in %v", i, spec.Cron, spec.Cron.Location(), lines[i], zones[i])
		}
		if c, _ := schedule.ParseCron(lines[i], zones[i].String()); !spec.Cron.Next(from).Equal(c.Next(from)) {
			t.Errorf("schedule %d: next tick %v, want %v", i, spec.Cron.Next(from), c.Next(from))
		}
		spec.Cron = schedule.Cron{}
		if !reflect.DeepEqual(spec, want[i]) {
			t.Errorf("schedule %d: %+v, want %+v", i, spec, want[i])
		}
	}
	if _, err := specOf(host.Schedule{Name: "bad", Cron: "0 0 30 2 *"}); err == nil {
		t.Error("a schedule that never fires: no error")
	}
}
