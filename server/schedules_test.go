package server

import (
	"slices"
	"testing"

	"github.com/wasmjobs/wasmjobs/backend"
)

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
