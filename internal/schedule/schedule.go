package schedule

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/wasmjobs/wasmjobs/internal/telemetry"

	"github.com/wasmjobs/wasmjobs/backend"
)

// Overlap says whether a tick fires while the previous tick's job is not finished.
type Overlap int

const (
	// OverlapSkip, the default, skips a tick while the job of the schedule's last
	// fired tick is pending, delayed, running or retrying.
	OverlapSkip Overlap = iota
	// OverlapAllow fires every tick.
	OverlapAllow
)

// String returns "skip" or "allow".
func (o Overlap) String() string {
	if o == OverlapAllow {
		return "allow"
	}
	return "skip"
}

// Spec is one schedule of a module, as its manifest declares it.
type Spec struct {
	// Name tells the module's schedules apart; with the module's name it names the
	// schedule, its state and its jobs' ids. Default: the cron line.
	Name string
	// Cron says when it fires.
	Cron Cron
	// Payload and Headers are every job's.
	Payload []byte
	Headers map[string]string
	// Overlap is skip (default) or allow.
	Overlap Overlap
	// CatchUp fires once at start, for the newest tick missed while no host fired,
	// when true (the manifest's default); false skips missed ticks.
	CatchUp bool
}

// Entry is a schedule bound to its module and the queue its jobs go to.
type Entry struct {
	Module string
	Queue  string
	Spec
}

// Key is the schedule's name in stores, ids and listings: "module/name".
func (e Entry) Key() string { return e.Module + "/" + e.Name }

// Acquire waits until this host may fire, and returns the store to fire through and a
// channel closed when this host may fire no more (nil when it never stops being so).
type Acquire func(ctx context.Context) (store backend.ScheduleStore, lost <-chan struct{}, err error)

// Config configures a Scheduler.
type Config struct {
	// Acquire is called before firing, and again after leadership is lost. Required.
	Acquire Acquire
	// Busy reports whether the job with id id, of the tick prev, is pending, delayed,
	// running or retrying, for OverlapSkip; period is the schedule's period after prev
	// (the next tick's distance from it), for a Busy that can only guess and must not
	// guess "busy" for ever. Nil: never busy (skip then behaves as allow).
	Busy func(ctx context.Context, id string, prev time.Time, period time.Duration) (bool, error)
	// Logger receives fired and skipped ticks and failures. Nil discards them.
	Logger *slog.Logger
	// Retry is how long to wait after a failed acquire, read or publish before trying
	// again. Zero means DefaultRetry.
	Retry time.Duration
	// Tracer, when set, makes each tick's publish a send span, the root of a trace of
	// its own, whose context the tick's job carries; nil traces nothing.
	Tracer trace.Tracer
}

// DefaultRetry is Config.Retry's default.
const DefaultRetry = time.Second

// Status describes a schedule for listings.
type Status struct {
	Name     string `json:"name"`
	Module   string `json:"module"`
	Queue    string `json:"queue"`
	Cron     string `json:"cron"`
	Timezone string `json:"timezone"`
	Overlap  string `json:"overlap"`
	CatchUp  bool   `json:"catch_up"`
	// Next is the next tick after now.
	Next time.Time `json:"next,omitzero"`
	// Last is the last fired tick this host knows of, and LastID its job's id. A host
	// that does not fire (a follower on RabbitMQ) knows only what it fired itself.
	Last   time.Time `json:"last,omitzero"`
	LastID string    `json:"last_id,omitempty"`
	// Firing says whether this host fires the schedules now.
	Firing bool `json:"firing"`
}

// Scheduler fires the ticks of a changing set of schedules. Its methods are safe for
// concurrent use.
type Scheduler struct {
	cfg  Config
	log  *slog.Logger
	kick chan struct{}

	mu      sync.Mutex
	entries map[string]Entry     // by Key
	last    map[string]time.Time // last fired tick, by Key
	firing  bool
}

// New returns a Scheduler with no schedules; Run fires them.
func New(cfg Config) *Scheduler {
	if cfg.Retry <= 0 {
		cfg.Retry = DefaultRetry
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Scheduler{cfg: cfg, log: log, kick: make(chan struct{}, 1),
		entries: map[string]Entry{}, last: map[string]time.Time{}}
}

// Set replaces the schedules (after a module was loaded, swapped or removed). A
// schedule that stays keeps its state; one that is new starts from now, or catches
// up from the tick its store kept.
func (s *Scheduler) Set(entries []Entry) {
	m := make(map[string]Entry, len(entries))
	for _, e := range entries {
		m[e.Key()] = e
	}
	s.mu.Lock()
	s.entries = m
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// List describes the schedules, sorted by name, with their next tick after now.
func (s *Scheduler) List() []Status {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Status, 0, len(s.entries))
	for key, e := range s.entries {
		st := Status{Name: key, Module: e.Module, Queue: e.Queue, Cron: e.Cron.String(),
			Timezone: e.Cron.Location().String(), Overlap: e.Overlap.String(), CatchUp: e.CatchUp,
			Next: e.Cron.Next(now), Firing: s.firing}
		if last, ok := s.last[key]; ok {
			st.Last, st.LastID = last, backend.ScheduleID(key, last)
		}
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b Status) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Run acquires the right to fire, fires until it is lost, and acquires it again,
// until ctx ends; then it returns nil. It asks for the right only while there are
// schedules, and gives it up (ends the context it passed to Acquire) when the last one
// goes, so that a host without schedules never stands in the way of one with them.
func (s *Scheduler) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		if !s.hasEntries() {
			select {
			case <-ctx.Done():
			case <-s.kick:
			}
			continue
		}
		leadCtx, cancel := context.WithCancel(ctx)
		store, lost, err := s.cfg.Acquire(leadCtx)
		if err != nil {
			cancel()
			if ctx.Err() != nil {
				break
			}
			s.log.Warn("schedules: cannot take the right to fire; trying again", "error", err, "retry", s.cfg.Retry)
			s.wait(ctx, s.cfg.Retry)
			continue
		}
		s.lead(leadCtx, store, lost)
		cancel()
	}
	return nil
}

func (s *Scheduler) hasEntries() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.entries) > 0
}

func (s *Scheduler) wait(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// lead fires through store until ctx ends or lost closes.
func (s *Scheduler) lead(ctx context.Context, store backend.ScheduleStore, lost <-chan struct{}) {
	ticks, err := store.ScheduleTicks(ctx)
	if err != nil {
		s.log.Warn("schedules: cannot read the last fired ticks; trying again", "error", err, "retry", s.cfg.Retry)
		s.wait(ctx, s.cfg.Retry)
		return
	}
	s.mu.Lock()
	s.last = maps.Clone(ticks)
	if s.last == nil {
		s.last = map[string]time.Time{}
	}
	s.firing = true
	s.mu.Unlock()
	s.log.Info("schedules: this host fires them", "known_ticks", len(ticks))
	defer func() {
		s.mu.Lock()
		s.firing = false
		s.mu.Unlock()
	}()

	// cursor holds, for each schedule, the time up to which its ticks are handled
	// (fired, skipped or caught up) in this run of lead.
	cursor := map[string]time.Time{}
	// kept is the set of schedules the store was last told to keep (a pruning store's).
	pruner, _ := store.(backend.SchedulePruner)
	var kept map[string]bool
	for {
		now := time.Now()
		s.mu.Lock()
		entries := slices.Collect(maps.Values(s.entries))
		s.mu.Unlock()
		if len(entries) == 0 {
			s.log.Info("schedules: none left; this host gives up firing them")
			return
		}
		slices.SortFunc(entries, func(a, b Entry) int { return strings.Compare(a.Key(), b.Key()) })
		wanted := make(map[string]bool, len(entries))
		for _, e := range entries {
			wanted[e.Key()] = true
		}
		// Told before this iteration fires: a pruning store writes what it keeps with
		// each fired tick (the RabbitMQ lease re-publishes its token), and a tick fired
		// first would write a removed schedule's tick once more.
		if pruner != nil && !maps.Equal(wanted, kept) {
			pruner.KeepSchedules(slices.Collect(maps.Keys(wanted)))
			kept = wanted
		}
		var wake time.Time
		for _, e := range entries {
			key := e.Key()
			c, seen := cursor[key]
			done := true
			switch {
			case !seen:
				// First sight in this run: ticks since the stored one were missed while
				// no host fired. Without a stored tick the schedule starts now.
				if last, ok := ticks[key]; ok {
					if t, missed := e.Cron.Latest(last, now); missed {
						if e.CatchUp {
							done = s.fire(ctx, store, e, t, "catch-up")
						} else {
							s.log.Info("schedule: skipping the ticks missed while no host fired (catch_up = false)",
								"schedule", key, "last_fired", last, "newest_missed", t)
						}
					}
				}
			default:
				if t, due := e.Cron.Latest(c, now); due {
					done = s.fire(ctx, store, e, t, "tick")
				}
			}
			if done {
				cursor[key] = now
			} else if !seen {
				cursor[key] = ticks[key] // try the catch-up again
			}
			next := e.Cron.Next(cursor[key])
			if !done {
				next = now.Add(s.cfg.Retry)
			}
			if !next.IsZero() && (wake.IsZero() || next.Before(wake)) {
				wake = next
			}
		}
		for key := range cursor {
			if !wanted[key] {
				delete(cursor, key)
			}
		}
		if !s.sleep(ctx, lost, now, wake) {
			return
		}
	}
}

// sleep waits until wake (for ever when zero), a change of the schedules, the end of
// ctx or the loss of the right to fire; it reports false for the last two.
func (s *Scheduler) sleep(ctx context.Context, lost <-chan struct{}, now, wake time.Time) bool {
	var timer <-chan time.Time
	if !wake.IsZero() {
		t := time.NewTimer(wake.Sub(now))
		defer t.Stop()
		timer = t.C
	}
	select {
	case <-ctx.Done():
		return false
	case <-lost:
		s.log.Warn("schedules: this host no longer fires them (leadership lost)")
		return false
	case <-s.kick:
	case <-timer:
	}
	return true
}

// fire publishes the job of e's tick t, unless OverlapSkip finds the previous tick's
// job unfinished. It reports false when the publish failed and should be tried again.
func (s *Scheduler) fire(ctx context.Context, store backend.ScheduleStore, e Entry, t time.Time, why string) bool {
	key := e.Key()
	s.mu.Lock()
	prev, fired := s.last[key]
	s.mu.Unlock()
	if fired && !prev.Before(t) {
		return true // fired already (a repeated wake)
	}
	if fired && e.Overlap == OverlapSkip && s.cfg.Busy != nil {
		prevID := backend.ScheduleID(key, prev)
		period := time.Duration(0)
		if next := e.Cron.Next(prev); !next.IsZero() {
			period = next.Sub(prev)
		}
		busy, err := s.cfg.Busy(ctx, prevID, prev, period)
		if err != nil {
			s.log.Warn("schedule: cannot tell whether the previous tick's job finished; firing anyway", "schedule", key, "previous", prevID, "error", err)
		}
		if busy {
			s.log.Info("schedule: tick skipped: the previous tick's job is not finished (overlap = \"skip\")",
				"schedule", key, "tick", t, "previous", prevID)
			return true
		}
	}
	env := backend.Envelope{
		ID:         backend.ScheduleID(key, t),
		Queue:      e.Queue,
		Payload:    slices.Clone(e.Payload),
		Headers:    maps.Clone(e.Headers),
		Attempt:    1,
		EnqueuedAt: time.Now(),
	}
	var span trace.Span
	if s.cfg.Tracer != nil {
		var sctx context.Context
		sctx, span = s.cfg.Tracer.Start(ctx, "send "+e.Queue, trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindProducer),
			trace.WithAttributes(append(telemetry.Messaging(telemetry.OpSend, "send", e.Queue), telemetry.MessageID(env.ID),
				attribute.String("wasmjobs.schedule", key))...))
		env.Headers = telemetry.Inject(sctx, env.Headers)
	}
	err := store.PublishTick(ctx, key, t, env)
	if span != nil {
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("schedule: publishing a tick's job failed; trying again", "schedule", key, "tick", t, "id", env.ID, "error", err)
		}
		return false
	}
	s.mu.Lock()
	s.last[key] = t
	s.mu.Unlock()
	s.log.Info("schedule fired", "schedule", key, "tick", t, "id", env.ID, "queue", e.Queue, "why", why)
	return true
}

// String describes an entry for messages.
func (e Entry) String() string { return fmt.Sprintf("%s (%s)", e.Key(), e.Cron) }
