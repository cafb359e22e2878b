package backend_test

import (
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
)

func TestScheduleID(t *testing.T) {
	t.Parallel()
	tick := time.Date(2026, 11, 30, 14, 5, 0, 0, time.UTC)
	id := backend.ScheduleID("reports/nightly", tick)
	if len(id) != 26 || id[:10] != backend.ScheduleID("", tick)[:10] || id[:10] == backend.ScheduleID("", tick.Add(time.Millisecond))[:10] {
		t.Errorf("ScheduleID = %q: not an id whose timestamp is the tick's", id)
	}
	if backend.ScheduleID("reports/nightly", tick) != id {
		t.Error("ScheduleID is not the same for the same schedule and tick")
	}
	for _, other := range []string{backend.ScheduleID("reports/nightly", tick.Add(time.Second)), backend.ScheduleID("reports/nightly2", tick),
		backend.ScheduleID("reports/nightl", tick.Add(time.Nanosecond))} {
		if other == id {
			t.Errorf("ScheduleID repeats %q for another schedule or tick", id)
		}
	}
}
