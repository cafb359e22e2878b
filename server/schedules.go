package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/rabbitmq"
	"github.com/wasmjobs/wasmjobs/host"
	"github.com/wasmjobs/wasmjobs/internal/app/inspect"
	"github.com/wasmjobs/wasmjobs/internal/schedule"
)

// The modules' [[schedule]]s: the scheduler keeps its set in step with the registry
// and decides which host fires.

// newScheduler returns the scheduler of backend b. On a backend that keeps schedule
// state (pebble, memory) this host fires at once; on RabbitMQ it fires while it holds
// the leadership token. Overlap "skip" asks the job records where the backend keeps
// them, and otherwise this host's memory of its jobs (recs, nil for none) together with
// the queue's counts.
func newScheduler(b backend.Backend, recs *inspect.Records, log *slog.Logger, tracer trace.Tracer) *schedule.Scheduler {
	var acquire schedule.Acquire
	switch sb := b.(type) {
	case *rabbitmq.Backend:
		acquire = func(ctx context.Context) (backend.ScheduleStore, <-chan struct{}, error) {
			l, err := sb.Lead(ctx)
			if err != nil {
				return nil, nil, err
			}
			return historyStore{l, recs}, l.Lost(), nil
		}
	case backend.ScheduleStore:
		acquire = func(context.Context) (backend.ScheduleStore, <-chan struct{}, error) {
			return historyStore{sb, recs}, nil, nil
		}
	default:
		// A backend of a test's own: schedules are listed but never fire.
		log.Warn("this backend keeps no schedule state: schedules will not fire", "backend", fmt.Sprintf("%T", b))
		acquire = func(ctx context.Context) (backend.ScheduleStore, <-chan struct{}, error) {
			<-ctx.Done()
			return nil, nil, ctx.Err()
		}
	}
	return schedule.New(schedule.Config{Acquire: acquire, Busy: busyFunc(b, recs), Logger: log, Tracer: tracer})
}

var _ backend.SchedulePruner = historyStore{}

// historyStore notes each fired job in the host's memory of its jobs (when there is
// one), so that GET /v1/jobs/{id} and overlap "skip" know it from its publish on.
type historyStore struct {
	backend.ScheduleStore
	recs *inspect.Records
}

// KeepSchedules passes the scheduler's current set on to a store that forgets the
// ticks of the others (the RabbitMQ lease's token): the embedded interface hides it.
func (h historyStore) KeepSchedules(schedules []string) {
	if p, ok := h.ScheduleStore.(backend.SchedulePruner); ok {
		p.KeepSchedules(schedules)
	}
}

func (h historyStore) PublishTick(ctx context.Context, schedule string, tick time.Time, env backend.Envelope) error {
	if err := h.ScheduleStore.PublishTick(ctx, schedule, tick, env); err != nil {
		return err
	}
	h.recs.Enqueued(env, false)
	return nil
}

// busyFunc tells whether a job is unfinished. With job records it is exact. Without
// them (memory, RabbitMQ) a job this host saw start and not finish is busy, and one it
// only published is busy while its queue holds pending or unacknowledged messages, but
// for one period after its tick at most (so it holds off the next tick only): on
// RabbitMQ another host may have run it, which this host cannot see, and a queue that
// is never empty would otherwise skip every tick for ever.
func busyFunc(b backend.Backend, recs *inspect.Records) func(context.Context, string, time.Time, time.Duration) (bool, error) {
	if rr, ok := b.(backend.JobRecordReader); ok {
		return func(ctx context.Context, id string, _ time.Time, _ time.Duration) (bool, error) {
			rec, err := rr.JobRecord(ctx, id)
			if errors.Is(err, backend.ErrNotFound) {
				return false, nil
			}
			if err != nil {
				return false, err
			}
			return !rec.State.Finished(), nil
		}
	}
	sr, _ := b.(backend.StatsReader)
	return func(ctx context.Context, id string, prev time.Time, period time.Duration) (bool, error) {
		st, err := recs.JobRecord(ctx, id)
		switch {
		case err != nil: // unknown: neither this host's to publish nor to run
			return false, nil
		case st.State == backend.JobRunning || st.State == backend.JobRetrying || st.State == backend.JobDeferred:
			return true, nil
		case st.State != backend.JobPending || sr == nil:
			return false, nil
		case time.Since(prev) >= 2*period:
			return false, nil // the one tick after prev was skipped already: a guess, not for ever
		}
		qs, err := sr.QueueStats(ctx, st.Queue)
		if err != nil {
			return false, err
		}
		return qs.Pending > 0 || qs.Unacked > 0, nil
	}
}

// specOf is the scheduler's spec of a module's schedule. The manifest checked the
// schedule as it was read, with the same parser, so an error here is a bug.
func specOf(s host.Schedule) (schedule.Spec, error) {
	c, err := schedule.ParseCron(s.Cron, s.Timezone)
	if err != nil {
		return schedule.Spec{}, fmt.Errorf("schedule %q: %w", s.Name, err)
	}
	overlap := schedule.OverlapSkip
	if s.Overlap == schedule.OverlapAllow.String() {
		overlap = schedule.OverlapAllow
	}
	return schedule.Spec{Name: s.Name, Cron: c, Payload: s.Payload, Headers: s.Headers, Overlap: overlap, CatchUp: s.CatchUp}, nil
}

// startSchedules runs s until ctx ends or stop is called, with the schedules of reg's
// serving modules, read again whenever kick receives (a module was loaded, swapped or
// removed). stop ends it and waits for it.
func startSchedules(ctx context.Context, s *schedule.Scheduler, reg *host.Registry, kick <-chan struct{}, log *slog.Logger) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	set := func() {
		var entries []schedule.Entry
		for _, m := range reg.Modules() {
			h := reg.Handler(m.Name)
			if !m.Serving() || h == nil {
				continue
			}
			mod := h.Module()
			for _, sch := range mod.Manifest().Schedules() {
				spec, err := specOf(sch)
				if err != nil {
					log.Error("a schedule the manifest took is refused", "module", m.Name, "schedule", sch.Name, "err", err)
					continue
				}
				entries = append(entries, schedule.Entry{Module: m.Name, Queue: mod.Queue(), Spec: spec})
			}
		}
		s.Set(entries)
	}
	set()
	done := make(chan struct{}, 2)
	go func() {
		defer func() { done <- struct{}{} }()
		s.Run(ctx)
	}()
	go func() {
		defer func() { done <- struct{}{} }()
		for {
			select {
			case <-ctx.Done():
				return
			case <-kick:
				set()
			}
		}
	}()
	return func() { cancel(); <-done; <-done }
}
