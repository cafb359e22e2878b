package server

import (
	"context"
	"errors"
	"os"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/memory"
	"github.com/wasmjobs/wasmjobs/host"
	"github.com/wasmjobs/wasmjobs/internal/app/inspect"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// An upload is checked without running its code: a module that traps in _initialize
// (which Load, running it, refuses) passes the check; one without the ABI marker does not.
func TestUploadValidatorRunsNoGuestCode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, err := host.NewEngine(ctx, host.Config{NoCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	validate := uploadValidator(e)
	trap, err := os.ReadFile("../testdata/hostile/init_trap.wasm")
	if err != nil {
		t.Fatal(err)
	}
	if v, err := validate(ctx, "init_trap", trap); err != nil || v != host.Version(trap) {
		t.Errorf("validating a module whose _initialize traps: %q, %v; want its version (its code must not run)", v, err)
	}
	bad, err := os.ReadFile("../testdata/hostile/no_marker.wasm")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := validate(ctx, "no_marker", bad); !errors.Is(err, host.ErrInvalidModule) {
		t.Errorf("validating a module without the ABI marker: %v, want ErrInvalidModule", err)
	}
}

// TestBusyGuessIsBounded checks overlap "skip" without job records: a job this host
// only published, in a queue that is not empty, holds off the one tick after its own
// and no more (the queue may never empty on a busy multi-host queue).
func TestBusyGuessIsBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := memory.New(memory.Config{})
	defer b.Close(ctx)
	q := backend.QueueConfig{Name: "q", Prefetch: 1}
	if err := b.Declare(ctx, q); err != nil {
		t.Fatal(err)
	}
	if err := b.Publish(ctx, backend.NewEnvelope("q", []byte("other")), 0); err != nil {
		t.Fatal(err) // the queue is not empty
	}
	hist := inspect.NewRecords(10)
	busy := busyFunc(b, hist)
	const period = time.Minute
	for _, tc := range []struct {
		name string
		ago  time.Duration // of the previous tick
		want bool
	}{
		{"the next tick", period + time.Second, true},
		{"the tick after", 2*period + time.Second, false},
		{"hours later", 3 * time.Hour, false},
	} {
		prev := time.Now().Add(-tc.ago).Truncate(time.Second)
		id := backend.ScheduleID("m/s", prev)
		hist.Enqueued(backend.Envelope{ID: id, Queue: "q", Attempt: 1, EnqueuedAt: prev}, false)
		got, err := busy(ctx, id, prev, period)
		if err != nil || got != tc.want {
			t.Errorf("%s: busy %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
}

// pruningStore is a schedule store that forgets schedules, as the RabbitMQ lease does.
type pruningStore struct {
	backend.ScheduleStore
	kept []string
}

func (p *pruningStore) KeepSchedules(schedules []string) { p.kept = schedules }

// TestHistoryStorePassesTheScheduleSetOn: the scheduler tells a pruning store (the
// RabbitMQ lease) which schedules exist through the historyStore around it, whose
// embedded interface would otherwise hide KeepSchedules: the token then kept a removed
// schedule's tick for ever.
func TestHistoryStorePassesTheScheduleSetOn(t *testing.T) {
	t.Parallel()
	inner := &pruningStore{}
	var store backend.ScheduleStore = historyStore{ScheduleStore: inner}
	p, ok := store.(backend.SchedulePruner)
	if !ok {
		t.Fatal("the historyStore around a pruning store is no backend.SchedulePruner")
	}
	p.KeepSchedules([]string{"m/a"})
	if !slices.Equal(inner.kept, []string{"m/a"}) {
		t.Fatalf("the store was told to keep %v, want [m/a]", inner.kept)
	}
}
