package schedule_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/memory"
	"github.com/wasmjobs/wasmjobs/backend/pebble"
	"github.com/wasmjobs/wasmjobs/internal/schedule"
)

// start is the synctest bubble's clock at its start: 2000-01-01 00:00 UTC.
var start = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// host is one run of a scheduler over a backend: Stop ends it as a host's exit does.
type host struct {
	cancel context.CancelFunc
	done   chan struct{}
	s      *schedule.Scheduler
}

// recorder is the memory backend, recording every id the scheduler publishes: the
// backend drops a repeat of an id it still holds, so its queue alone would hide one.
type recorder struct {
	*memory.Backend
	store backend.ScheduleStore // the backend fired through: Backend unless set
	mu    sync.Mutex
	ids   []string
}

func (r *recorder) ScheduleTicks(ctx context.Context) (map[string]time.Time, error) {
	return r.target().ScheduleTicks(ctx)
}

func (r *recorder) PublishTick(ctx context.Context, schedule string, tick time.Time, env backend.Envelope) error {
	r.mu.Lock()
	r.ids = append(r.ids, env.ID)
	r.mu.Unlock()
	return r.target().PublishTick(ctx, schedule, tick, env)
}

func (r *recorder) target() backend.ScheduleStore {
	if r.store != nil {
		return r.store
	}
	return r.Backend
}

// startHost runs a scheduler of entries that fires through store.
func startHost(store backend.ScheduleStore, busy func(context.Context, string, time.Time, time.Duration) (bool, error), entries ...schedule.Entry) *host {
	s := schedule.New(schedule.Config{
		Acquire: func(context.Context) (backend.ScheduleStore, <-chan struct{}, error) { return store, nil, nil },
		Logger:  slog.New(slog.DiscardHandler),
		Busy:    busy,
	})
	s.Set(entries)
	ctx, cancel := context.WithCancel(context.Background())
	h := &host{cancel: cancel, done: make(chan struct{}), s: s}
	go func() {
		defer close(h.done)
		s.Run(ctx)
	}()
	return h
}

func (h *host) stop() {
	h.cancel()
	<-h.done
}

func newBackend(t *testing.T) *recorder {
	b := memory.New(memory.Config{})
	if err := b.Declare(t.Context(), backend.QueueConfig{Name: "reports"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close(context.Background()) })
	return &recorder{Backend: b}
}

func minutely(t *testing.T, catchUp bool) schedule.Entry {
	c, err := schedule.ParseCron("*/1 * * * *", "")
	if err != nil {
		t.Fatal(err)
	}
	return schedule.Entry{Module: "reports", Queue: "reports",
		Spec: schedule.Spec{Name: "minutely", Cron: c, Payload: []byte("go"), Overlap: schedule.OverlapAllow, CatchUp: catchUp}}
}

// fired returns the minutes (since start) of the ticks whose jobs are queued, checking
// that each job is the one its tick's id names, and that no id was published twice.
func fired(t *testing.T, b *recorder) []int {
	t.Helper()
	pending, err := b.Pending("reports")
	if err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	ids := slices.Clone(b.ids)
	b.mu.Unlock()
	if len(ids) != len(pending) {
		t.Errorf("%d publishes for %d jobs: a tick was published twice", len(ids), len(pending))
	}
	var out []int
	for _, env := range pending {
		found := false
		for m := range 1000 {
			if env.ID == backend.ScheduleID("reports/minutely", start.Add(time.Duration(m)*time.Minute)) {
				out = append(out, m)
				found = true
				break
			}
		}
		if !found {
			t.Errorf("job %s is no tick's job", env.ID)
		}
		if string(env.Payload) != "go" {
			t.Errorf("job %s has payload %q, want the schedule's", env.ID, env.Payload)
		}
	}
	slices.Sort(out)
	return out
}

// wantFired checks that the ticks of the minutes want fired, and no others; what says
// which run it was.
func wantFired(t *testing.T, b *recorder, want []int, what string) {
	t.Helper()
	if got := fired(t, b); !slices.Equal(got, want) {
		t.Errorf("%s: fired minutes %v, want %v", what, got, want)
	}
}

// advance moves the bubble's clock d on and waits until every goroutine in it is
// blocked: what was due by then (a tick, its publish) has happened.
func advance(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}

// minutes lists the minutes from to to, but for skip.
func minutes(from, to int, skip ...int) []int {
	var out []int
	for m := from; m <= to; m++ {
		if !slices.Contains(skip, m) {
			out = append(out, m)
		}
	}
	return out
}

// TestEveryTickOnce: "*/1 * * * *" over ten minutes enqueues ten jobs, one per tick,
// each with its tick's id: run by one host, and by a host stopped just after a tick
// and started again at once, or stopped before a tick and started after it.
func TestEveryTickOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, b *recorder) *host // returns the host running at the end
	}{
		{"ten minutes ten jobs", func(t *testing.T, b *recorder) *host {
			h := startHost(b, nil, minutely(t, true))
			advance(10*time.Minute + 30*time.Second)
			return h
		}},
		{"restart neither repeats nor loses", func(t *testing.T, b *recorder) *host {
			h := startHost(b, nil, minutely(t, true))
			advance(5 * time.Minute) // the tick at minute 5 fires at this instant
			h.stop()
			h = startHost(b, nil, minutely(t, true)) // at minute 5, after its tick fired
			time.Sleep(2*time.Minute + 50*time.Second)
			h.stop()
			time.Sleep(20 * time.Second) // down from 7:50 to 8:10: the tick at 8 fires at start
			h = startHost(b, nil, minutely(t, true))
			advance(2*time.Minute + 20*time.Second)
			return h
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				b := newBackend(t)
				tc.run(t, b).stop()
				wantFired(t, b, minutes(1, 10), tc.name)
			})
		})
	}
}

// TestRestartOnPebble: the embedded backend keeps the last fired tick on disk: a host
// whose store is closed and opened again (as at a restart) after the tick at minute 5,
// and again across the tick at minute 8, fires each of the ten ticks once.
func TestRestartOnPebble(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		cfg := pebble.Config{Dir: "/data", FS: vfs.NewMem()}
		rec := &recorder{}
		var b *pebble.Backend
		openStore := func() {
			var err error
			if b, err = pebble.Open(ctx, cfg); err != nil {
				t.Fatal(err)
			}
			if err := b.Declare(ctx, backend.QueueConfig{Name: "reports"}); err != nil {
				t.Fatal(err)
			}
			rec.store = b
		}
		restart := func(h *host, down time.Duration) *host {
			h.stop()
			if err := b.Close(ctx); err != nil {
				t.Fatal(err)
			}
			time.Sleep(down)
			openStore()
			return startHost(rec, nil, minutely(t, true))
		}
		openStore()
		h := startHost(rec, nil, minutely(t, true))
		advance(5 * time.Minute)
		h = restart(h, 0)
		time.Sleep(2*time.Minute + 50*time.Second)
		h = restart(h, 20*time.Second) // 7:50 to 8:10
		advance(2*time.Minute + 20*time.Second)
		h.stop()
		defer b.Close(ctx)
		if len(rec.ids) != 10 {
			t.Errorf("%d publishes, want 10: %v", len(rec.ids), rec.ids)
		}
		for m := 1; m <= 10; m++ {
			id := backend.ScheduleID("reports/minutely", start.Add(time.Duration(m)*time.Minute))
			if r, err := b.JobRecord(ctx, id); err != nil || r.State != backend.JobPending {
				t.Errorf("the job of minute %d: %+v, %v", m, r, err)
			}
		}
		if st, err := b.QueueStats(ctx, "reports"); err != nil || st.Pending != 10 {
			t.Errorf("pending %+v, %v: want 10", st, err)
		}
	})
}

// TestMissedTicks: ticks missed while no host fired run once at start with catch_up
// (the newest of them), and not at all without.
func TestMissedTicks(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		catchUp bool
		want    []int
	}{
		{true, minutes(1, 10, 3, 4, 5, 6)}, // down 2:30 to 7:30: 7 runs at start
		{false, minutes(1, 10, 3, 4, 5, 6, 7)},
	} {
		synctest.Test(t, func(t *testing.T) {
			b := newBackend(t)
			h := startHost(b, nil, minutely(t, c.catchUp))
			time.Sleep(2*time.Minute + 30*time.Second)
			h.stop()
			time.Sleep(5 * time.Minute)
			h = startHost(b, nil, minutely(t, c.catchUp))
			synctest.Wait()
			if c.catchUp {
				wantFired(t, b, []int{1, 2, 7}, "catch_up, at the start at 7:30")
			}
			advance(3 * time.Minute)
			h.stop()
			wantFired(t, b, c.want, fmt.Sprintf("catch_up = %v", c.catchUp))
		})
	}
}

// TestOverlapSkip: with overlap = "skip" a tick is skipped while the previous tick's
// job is still queued; "allow" fires it.
func TestOverlapSkip(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		overlap schedule.Overlap
		want    []int
	}{
		{schedule.OverlapSkip, []int{1, 3}}, // 2 skipped while 1 waits; 4 skipped while 3 waits
		{schedule.OverlapAllow, []int{1, 2, 3, 4}},
	} {
		synctest.Test(t, func(t *testing.T) {
			b := newBackend(t)
			var mu sync.Mutex
			taken := map[string]bool{} // jobs a consumer took and finished
			busy := func(_ context.Context, id string, _ time.Time, _ time.Duration) (bool, error) {
				mu.Lock()
				defer mu.Unlock()
				pending, err := b.Pending("reports")
				return !taken[id] && slices.ContainsFunc(pending, func(e backend.Envelope) bool { return e.ID == id }), err
			}
			e := minutely(t, true)
			e.Overlap = c.overlap
			h := startHost(b, busy, e)
			advance(2*time.Minute + 30*time.Second)
			// The job of minute 1 finishes now: minute 3 fires, 4 finds 3 pending.
			mu.Lock()
			taken[backend.ScheduleID("reports/minutely", start.Add(time.Minute))] = true
			mu.Unlock()
			advance(2 * time.Minute)
			h.stop()
			wantFired(t, b, c.want, fmt.Sprintf("overlap %v", c.overlap))
		})
	}
}

// TestList shows the next tick and the last fired one.
func TestList(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		h := startHost(b, nil, minutely(t, true))
		advance(90 * time.Second)
		list := h.s.List()
		h.stop()
		if len(list) != 1 {
			t.Fatalf("List = %+v, want one schedule", list)
		}
		st := list[0]
		if st.Name != "reports/minutely" || !st.Next.Equal(start.Add(2*time.Minute)) || !st.Last.Equal(start.Add(time.Minute)) ||
			st.LastID != backend.ScheduleID("reports/minutely", start.Add(time.Minute)) || !st.Firing || st.Cron != "*/1 * * * *" {
			t.Errorf("List = %+v", st)
		}
	})
}

// pruner is a recorder whose store forgets schedules (backend.SchedulePruner), as the
// RabbitMQ lease does: it records each set it was told to keep.
type pruner struct {
	*recorder
	kept [][]string
}

func (p *pruner) KeepSchedules(schedules []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.kept = append(p.kept, slices.Sorted(slices.Values(schedules)))
}

// TestSchedulerTellsAPruningStoreTheSet: while it fires through a store that forgets
// schedules, the scheduler tells it the current set at the start and after each change,
// so that a removed schedule's tick does not stay in the store for ever.
func TestSchedulerTellsAPruningStoreTheSet(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		p := &pruner{recorder: newBackend(t)}
		a := minutely(t, true)
		b := a
		b.Name = "other"
		h := startHost(p, nil, a, b)
		advance(90 * time.Second) // a tick fires in between: the set did not change
		h.s.Set([]schedule.Entry{a})
		synctest.Wait()
		h.stop()
		p.mu.Lock()
		defer p.mu.Unlock()
		want := [][]string{{a.Key(), b.Key()}, {a.Key()}}
		if !slices.EqualFunc(p.kept, want, slices.Equal) {
			t.Errorf("the store was told to keep %v, want %v", p.kept, want)
		}
	})
}

// orderedPruner is a pruning store that logs, in order, each set it is told to keep and
// each tick published through it; a publish of hold's ticks waits for gate.
type orderedPruner struct {
	*recorder
	hold string
	gate chan struct{}
	log  []string
}

func (p *orderedPruner) KeepSchedules(schedules []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.log = append(p.log, fmt.Sprintf("keep %v", slices.Sorted(slices.Values(schedules))))
}

func (p *orderedPruner) PublishTick(ctx context.Context, schedule string, tick time.Time, env backend.Envelope) error {
	if schedule == p.hold {
		select {
		case <-p.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	p.mu.Lock()
	p.log = append(p.log, fmt.Sprintf("publish %s %s", schedule, tick.Format("15:04")))
	p.mu.Unlock()
	return p.recorder.PublishTick(ctx, schedule, tick, env)
}

// TestPruneComesBeforeTheNextFire: a store that forgets schedules writes the set it
// keeps with each fired tick (the RabbitMQ lease re-publishes its token), so the
// scheduler must tell it the new set before it fires again. Here the set changes while
// a fire is under way and the next tick is due by the time it returns: the iteration the
// change wakes fires that tick, and told the store only afterwards (the token then
// carried the removed schedule's tick once more).
func TestPruneComesBeforeTheNextFire(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		a := minutely(t, true)
		b := a
		b.Name = "other" // sorted after a: fired second of each tick
		p := &orderedPruner{recorder: newBackend(t), hold: b.Key(), gate: make(chan struct{})}
		h := startHost(p, nil, a, b)
		advance(61 * time.Second) // 00:01 fired a; b's publish waits for the gate
		h.s.Set([]schedule.Entry{a})
		time.Sleep(time.Minute) // 00:02 is due when b's publish returns
		close(p.gate)
		synctest.Wait()
		h.stop()
		p.mu.Lock()
		defer p.mu.Unlock()
		want := []string{
			fmt.Sprintf("keep %v", []string{a.Key(), b.Key()}),
			"publish " + a.Key() + " 00:01",
			"publish " + b.Key() + " 00:01",
			fmt.Sprintf("keep %v", []string{a.Key()}),
			"publish " + a.Key() + " 00:02",
		}
		if !slices.Equal(p.log, want) {
			t.Errorf("the store saw\n  %q\nwant\n  %q", p.log, want)
		}
	})
}
