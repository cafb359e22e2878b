package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/rabbitmq"
	"github.com/wasmjobs/wasmjobs/host"
	"github.com/wasmjobs/wasmjobs/internal/api"
	"github.com/wasmjobs/wasmjobs/internal/schedule"
)

// schedules runs the serving modules' [[schedule]]s: it keeps the scheduler's set in
// step with the registry and decides which host fires (see newScheduler).
type schedules struct {
	s    *schedule.Scheduler
	kick chan struct{}
	done chan struct{}
}

// newScheduler returns the scheduler of backend b. On a backend that keeps schedule
// state (pebble, memory) this host fires at once; on RabbitMQ it fires while it holds
// the leadership token. Overlap "skip" asks the job records where the backend keeps
// them, and otherwise this host's history together with the queue's counts.
func newScheduler(b backend.Backend, hist *api.History, log *slog.Logger) *schedule.Scheduler {
	var acquire schedule.Acquire
	switch sb := b.(type) {
	case *rabbitmq.Backend:
		acquire = func(ctx context.Context) (backend.ScheduleStore, <-chan struct{}, error) {
			l, err := sb.Lead(ctx)
			if err != nil {
				return nil, nil, err
			}
			return historyStore{l, hist}, l.Lost(), nil
		}
	case backend.ScheduleStore:
		acquire = func(context.Context) (backend.ScheduleStore, <-chan struct{}, error) {
			return historyStore{sb, hist}, nil, nil
		}
	default:
		// A backend of a test's own: schedules are listed but never fire.
		log.Warn("this backend keeps no schedule state: schedules will not fire", "backend", fmt.Sprintf("%T", b))
		acquire = func(ctx context.Context) (backend.ScheduleStore, <-chan struct{}, error) {
			<-ctx.Done()
			return nil, nil, ctx.Err()
		}
	}
	return schedule.New(schedule.Config{Acquire: acquire, Busy: busyFunc(b, hist), Logger: log})
}

var _ backend.SchedulePruner = historyStore{}

// historyStore notes each fired job in the history (when there is one), so that GET
// /v1/jobs/{id} and overlap "skip" know it from its publish on.
type historyStore struct {
	backend.ScheduleStore
	hist *api.History
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
	if h.hist != nil {
		h.hist.Enqueued(env, false)
	}
	return nil
}

// busyFunc tells whether a job is unfinished. With job records it is exact. Without
// them (memory, RabbitMQ) a job this host saw start and not finish is busy, and one it
// only published is busy while its queue holds pending or unacknowledged messages, but
// for one period after its tick at most (so it holds off the next tick only): on
// RabbitMQ another host may have run it, which this host cannot see, and a queue that
// is never empty would otherwise skip every tick for ever.
func busyFunc(b backend.Backend, hist *api.History) func(context.Context, string, time.Time, time.Duration) (bool, error) {
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
		if hist == nil {
			return false, nil
		}
		st, ok := hist.Get(id)
		switch {
		case !ok:
			return false, nil
		case st.State == "running" || st.State == "retrying" || st.State == "deferred":
			return true, nil
		case st.State != "pending" || sr == nil:
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

// startSchedules runs s until ctx ends or stop is called, with the schedules of reg's
// serving modules, read again whenever kick receives (a module was loaded, swapped or
// removed). stop ends it and waits for it.
func startSchedules(ctx context.Context, s *schedule.Scheduler, reg *host.Registry, kick <-chan struct{}) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	set := func() {
		var entries []schedule.Entry
		for _, m := range reg.Modules() {
			h := reg.Handler(m.Name)
			if m.Status != "serving" || h == nil {
				continue
			}
			mod := h.Module()
			for _, spec := range mod.Manifest().Schedules() {
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

func newSchedulesCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "schedules",
		Short: "Inspect the modules' periodic schedules",
	}
	f := &apiFlags{}
	list := &cobra.Command{
		Use:   "list",
		Short: "List a running host's schedules with their next and last runs",
		Long: `list shows the [[schedule]]s of a running host's modules: the cron line and zone, the
next tick, and the last fired tick with its job's id. FIRING says whether this host
fires them: on RabbitMQ one host leads at a time, and the others know only the ticks
they fired themselves.`,
		Args: argsBetween(0, 0),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.client(cmd)
			if err != nil {
				return err
			}
			var raw json.RawMessage
			if err := c.do(cmd.Context(), "GET", "/v1/schedules", nil, nil, &raw); err != nil {
				return err
			}
			if f.json {
				return printJSON(cmd.OutOrStdout(), raw)
			}
			var out api.SchedulesResponse
			if err := json.Unmarshal(raw, &out); err != nil {
				return err
			}
			tw := table(cmd.OutOrStdout())
			fmt.Fprintln(tw, "SCHEDULE\tCRON\tTIMEZONE\tQUEUE\tNEXT\tLAST\tLAST-ID\tFIRING")
			stamp := func(t time.Time) string {
				if t.IsZero() {
					return "-"
				}
				return t.Local().Format(time.DateTime)
			}
			for _, s := range out.Schedules {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%v\n", s.Name, s.Cron, s.Timezone, s.Queue,
					stamp(s.Next), stamp(s.Last), orDash(s.LastID), s.Firing)
			}
			return tw.Flush()
		},
	}
	f.add(list)
	f.addJSON(list)
	cmd.AddCommand(list)
	return cmd
}
