package pebble_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/internal/rig"
	pebblebackend "github.com/wasmjobs/wasmjobs/backend/pebble"
)

// TestScheduleTicksSurviveReopen: a tick's job and the tick are written together and
// both are there after a reopen; a tick whose job the store still holds records the
// tick without a second job.
func TestScheduleTicksSurviveReopen(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		cfg := pebblebackend.Config{Dir: "/data", FS: vfs.NewMem()}
		b := open(t, cfg)
		rig.Must(t, b.Declare(ctx, backend.QueueConfig{Name: "reports"}))
		tick := time.Now().Add(time.Minute)
		env := backend.Envelope{ID: backend.ScheduleID("reports/daily", tick), Queue: "reports", Payload: []byte("p"), Attempt: 1}
		rig.Must(t, b.PublishTick(ctx, "reports/daily", tick, env))
		rig.Must(t, b.PublishTick(ctx, "reports/daily", tick.Add(time.Hour), env)) // same id: held
		rig.Close(t, b)

		b = open(t, cfg)
		defer rig.Close(t, b)
		ticks, err := b.ScheduleTicks(ctx)
		rig.Must(t, err)
		if got := ticks["reports/daily"]; len(ticks) != 1 || !got.Equal(tick.Add(time.Hour)) {
			t.Errorf("ticks after reopen = %v, want reports/daily at %v", ticks, tick.Add(time.Hour))
		}
		st, err := b.QueueStats(ctx, "reports")
		rig.Must(t, err)
		if st.Pending != 1 {
			t.Errorf("%d jobs pending, want the one tick's job", st.Pending)
		}
		rec, err := b.JobRecord(ctx, env.ID)
		rig.Must(t, err)
		if rec.State != backend.JobPending {
			t.Errorf("record of the tick's job: %+v", rec)
		}
		if err := b.PublishTick(ctx, "reports/daily", tick, backend.Envelope{ID: "x", Queue: "nope"}); err == nil {
			t.Error("PublishTick to an undeclared queue succeeded")
		}
	})
}
