package pebble_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/internal/rig"
	pebblebackend "github.com/wasmjobs/wasmjobs/backend/pebble"
)

// settleKind is how a consumer settled a job.
type settleKind int

const (
	settleAck settleKind = iota
	settleRetry
	settleDead
)

// settlement is a settle that returned: of job id, at the delivery's attempt, with the
// dead letter's reason.
type settlement struct {
	id      string
	kind    settleKind
	attempt int
	reason  string
}

// laterJob is a job published with a delay (or deferred, when deferred), due no
// earlier than due. A far one is due in an hour: it must still wait in every clone.
type laterJob struct {
	id       string
	due      time.Time
	deferred bool
	far      bool
}

// uniqueJob is a job published holding key, for For after it finishes.
type uniqueJob struct {
	id, key string
	For     time.Duration
}

// crashSchedules are the schedules whose ticks the crash test fires; tick i of each
// is crashTick(i).
var crashSchedules = []string{"crash/a", "crash/b"}

func crashTick(i int) time.Time {
	return time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Minute)
}

// ledger is what the crash test's workload saw return, in order. The later, unique
// and tick jobs are each published by one goroutine, one at a time: their slices list
// every publish begun, and the counts say how many of them returned. Slices only grow
// and no element is written twice, so a snapshot shares them, cut to their length.
type ledger struct {
	mu       sync.Mutex
	returned []string // publishes to "parents" that returned
	settles  []settlement
	// durable counts the settles made durable: settles[:durable] had returned when a
	// publish began that returned since. Pebble writes its log in commit order, and a
	// synced commit returns once the log up to its record is synced (a log it rotated
	// away from is synced when closed), so these settles, committed without a sync of
	// their own, are on disk: the package comment promises it.
	durable int

	later         []laterJob
	laterReturned int
	unique        []uniqueJob
	uniqReturned  int
	ticksBegun    map[string]int // ticks 0..n-1 of a schedule were published or are in flight
	ticksReturned map[string]int
}

// crashSeen is a snapshot of a ledger: what had returned when a crash clone was taken.
type crashSeen struct {
	returned      []string
	durable       []settlement
	later, unique int
	ticks         map[string]int
}

func (l *ledger) snapshot() crashSeen {
	l.mu.Lock()
	defer l.mu.Unlock()
	ticks := make(map[string]int, len(l.ticksReturned))
	for s, n := range l.ticksReturned {
		ticks[s] = n
	}
	return crashSeen{
		returned: l.returned[:len(l.returned):len(l.returned)],
		durable:  l.settles[:l.durable:l.durable],
		later:    l.laterReturned, unique: l.uniqReturned, ticks: ticks,
	}
}

func (l *ledger) settled(s settlement) {
	l.mu.Lock()
	l.settles = append(l.settles, s)
	l.mu.Unlock()
}

// synced runs publish, which commits with a synced write, and once it returned marks
// every settle that had returned before it began as durable.
func (l *ledger) synced(publish func() error) error {
	l.mu.Lock()
	before := len(l.settles)
	l.mu.Unlock()
	err := publish()
	if err == nil {
		l.mu.Lock()
		l.durable = max(l.durable, before)
		l.mu.Unlock()
	}
	return err
}

// crashPoint is a copy of the filesystem as a power loss could leave it, with what had
// returned before it was taken.
type crashPoint struct {
	fs       *vfs.MemFS
	seen     crashSeen
	unsynced int
}

// crashTally counts what the checks of the clones compared, so that the test can tell
// that none of them checked nothing.
type crashTally struct {
	returned, durableSettles, deadLetters, farHeld, cameDue, keysHeld, keysFree, ticks int
}

// TestCrashLosesNoReturnedPublish runs publishers, a consumer that acks with children,
// retries and dead-letters, a consumer of the children, publishers of delayed,
// deferred and unique jobs (each with its consumer) and of schedule ticks, and takes
// crash clones of the filesystem (everything synced, and a random part of what was
// not) while they run. On every clone:
//   - each job whose publish returned is there (waiting, or settled with its record);
//     no job is both settled and waiting, none waits twice; no ack is kept without its
//     children, and no child without its parent's ack;
//   - a settle that returned before a synced publish began, that returned too, is
//     kept (settles are not synced themselves: a later sync carries them);
//   - each dead letter is the job's record's, with the reason its DeadLetter call
//     gave, and does not wait; a job whose record is dead is a dead letter;
//   - each delayed or deferred job whose publish returned is held: one due in an hour
//     waits (counted as delayed or deferred, its envelope readable) and is not
//     delivered; one due already is delivered, not before it was due;
//   - the unique keys are held as the jobs are: a publish of the key of a job that
//     waits, or finished holding its key for an hour, is a duplicate; of a key freed by
//     its job's ack, or of a job the clone lacks, is not;
//   - each schedule's remembered tick is at least the last one whose publish returned,
//     the jobs of its ticks up to it are there and of none after it.
func TestCrashLosesNoReturnedPublish(t *testing.T) {
	t.Parallel()
	crashes := 40
	if testing.Short() {
		crashes = 10
	}
	ctx := context.Background()
	fs := vfs.NewCrashableMem()
	b := open(t, pebblebackend.Config{Dir: "/data", FS: fs})
	parents := backend.QueueConfig{Name: "parents", Prefetch: 16}
	kids := backend.QueueConfig{Name: "kids", Prefetch: 16}
	later := backend.QueueConfig{Name: "later", Prefetch: 16}
	uniq := backend.QueueConfig{Name: "uniq", Prefetch: 16}
	for _, q := range []backend.QueueConfig{parents, kids, later, uniq, {Name: "ticks"}} {
		rig.Must(t, b.Declare(ctx, q))
	}

	lg := &ledger{ticksBegun: map[string]int{}, ticksReturned: map[string]int{}}
	run, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for p := range 4 {
		wg.Go(func() {
			for i := 0; run.Err() == nil && i < 1500; i++ {
				env := backend.NewEnvelope("parents", []byte(fmt.Sprintf("p%d-%d", p, i)))
				if p == 0 && i%2 == 0 { // some through the batch path
					batch := []backend.Publication{{Envelope: env}, {Envelope: backend.NewEnvelope("parents", []byte("batched"))}}
					if err := lg.synced(func() error { return b.PublishBatch(ctx, batch) }); err != nil {
						t.Errorf("PublishBatch: %v", err)
						return
					}
					lg.mu.Lock()
					lg.returned = append(lg.returned, batch[0].Envelope.ID, batch[1].Envelope.ID)
					lg.mu.Unlock()
					continue
				}
				if err := lg.synced(func() error { return b.Publish(ctx, env, 0) }); err != nil {
					t.Errorf("Publish: %v", err)
					return
				}
				lg.mu.Lock()
				lg.returned = append(lg.returned, env.ID)
				lg.mu.Unlock()
			}
		})
	}
	ps, err := b.Consume(run, parents)
	rig.Must(t, err)
	wg.Go(func() {
		for d := range ps.Deliveries() {
			env, _ := d.Envelope()
			ad := d.(backend.AtomicDelivery)
			s := settlement{id: env.ID, attempt: env.Attempt}
			var err error
			switch n := rand.IntN(10); {
			case n < 7:
				err = ad.AckWith(ctx, []backend.Publication{
					{Envelope: backend.Envelope{ID: env.ID + ".1", Queue: "kids", Attempt: 1}},
					{Envelope: backend.Envelope{ID: env.ID + ".2", Queue: "kids", Attempt: 1}},
				}, &backend.JobRecord{Output: []byte("ok")})
			case n < 9 && env.Attempt < 3:
				next := env
				next.Attempt++
				s.kind = settleRetry
				err = ad.RetryWith(ctx, next, 0, nil)
			default:
				s.kind, s.reason = settleDead, fmt.Sprintf("crash test, attempt %d", env.Attempt)
				err = ad.DeadLetterWith(ctx, s.reason, nil)
			}
			if err == nil {
				lg.settled(s)
			} else if run.Err() == nil {
				t.Errorf("settle: %v", err)
			}
		}
	})
	ks, err := b.Consume(run, kids)
	rig.Must(t, err)
	wg.Go(func() {
		for d := range ks.Deliveries() {
			if err := d.Ack(ctx); err != nil && run.Err() == nil {
				t.Errorf("Ack of a child: %v", err)
			}
		}
	})
	wg.Go(func() { // delayed and deferred jobs: due in 1-50 ms, or in an hour
		for i := 0; run.Err() == nil && i < 400; i++ {
			env := backend.NewEnvelope("later", nil)
			j := laterJob{id: env.ID, deferred: i%2 == 1, far: i%4 >= 2}
			delay := time.Hour
			if !j.far {
				delay = time.Duration(1+rand.IntN(50)) * time.Millisecond
			}
			j.due = time.Now().Add(delay)
			lg.mu.Lock()
			lg.later = append(lg.later, j)
			lg.mu.Unlock()
			publish := b.Publish
			if j.deferred {
				publish = b.Defer
			}
			if err := lg.synced(func() error { return publish(ctx, env, delay) }); err != nil {
				t.Errorf("publishing a delayed job (deferred %t): %v", j.deferred, err)
				return
			}
			lg.mu.Lock()
			lg.laterReturned++
			lg.mu.Unlock()
		}
	})
	wg.Go(func() { // unique jobs, each with a key of its own, held for 0 or an hour
		for i := 0; run.Err() == nil && i < 400; i++ {
			env := backend.NewEnvelope("uniq", nil)
			u := uniqueJob{id: env.ID, key: fmt.Sprintf("k%d", i)}
			if i%2 == 1 {
				u.For = time.Hour
			}
			lg.mu.Lock()
			lg.unique = append(lg.unique, u)
			lg.mu.Unlock()
			var res []backend.UniqueResult
			err := lg.synced(func() (err error) {
				res, err = b.PublishUnique(ctx, []backend.UniquePublication{{Publication: backend.Publication{Envelope: env}, Key: u.key, For: u.For}})
				return err
			})
			if err != nil || res[0].Duplicate {
				t.Errorf("PublishUnique of the fresh key %s = %+v, %v", u.key, res, err)
				return
			}
			lg.mu.Lock()
			lg.uniqReturned++
			lg.mu.Unlock()
		}
	})
	for _, q := range []backend.QueueConfig{later, uniq} {
		s, err := b.Consume(run, q)
		rig.Must(t, err)
		wg.Go(func() {
			for d := range s.Deliveries() {
				env, _ := d.Envelope()
				if err := d.Ack(ctx); err == nil {
					lg.settled(settlement{id: env.ID, kind: settleAck, attempt: env.Attempt})
				} else if run.Err() == nil {
					t.Errorf("Ack of a %s job: %v", q.Name, err)
				}
			}
		})
	}
	wg.Go(func() { // schedule ticks, as the scheduler fires them; their jobs wait
		for i := 0; run.Err() == nil && i < 300; i++ {
			for _, s := range crashSchedules {
				env := backend.Envelope{ID: backend.ScheduleID(s, crashTick(i)), Queue: "ticks", Attempt: 1, EnqueuedAt: time.Now()}
				lg.mu.Lock()
				lg.ticksBegun[s] = i + 1
				lg.mu.Unlock()
				if err := lg.synced(func() error { return b.PublishTick(ctx, s, crashTick(i), env) }); err != nil {
					t.Errorf("PublishTick(%s, tick %d): %v", s, i, err)
					return
				}
				lg.mu.Lock()
				lg.ticksReturned[s] = i + 1
				lg.mu.Unlock()
			}
		}
	})

	rng := rand.New(rand.NewPCG(1, 2))
	var points []crashPoint
	for range crashes {
		time.Sleep(time.Duration(1+rng.IntN(20)) * time.Millisecond)
		seen := lg.snapshot()
		pct := rng.IntN(101)
		clone := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: pct, RNG: rand.New(rand.NewPCG(rng.Uint64(), 0))})
		points = append(points, crashPoint{fs: clone, seen: seen, unsynced: pct})
	}
	stop()
	wg.Wait()
	rig.Close(t, b)
	var tally crashTally
	for i, p := range points {
		t.Run(fmt.Sprintf("crash%02d-unsynced%d%%", i, p.unsynced), func(t *testing.T) { checkCrashPoint(t, p, lg, &tally) })
	}
	t.Logf("%d crash points: %+v", len(points), tally)
	for what, n := range map[string]int{
		"returned publishes": tally.returned, "durable settles": tally.durableSettles, "dead letters": tally.deadLetters,
		"jobs due in an hour": tally.farHeld, "jobs come due": tally.cameDue, "unique keys held": tally.keysHeld,
		"unique keys free": tally.keysFree, "schedule ticks": tally.ticks,
	} {
		if n == 0 {
			t.Errorf("no crash point checked any %s: the test checked nothing of them", what)
		}
	}
}

// checkCrashPoint opens the clone of p and holds it to what had returned before it
// was taken (p.seen) and to what the workload began at all (all, read once every
// goroutine of the workload ended).
func checkCrashPoint(t *testing.T, p crashPoint, all *ledger, tally *crashTally) {
	ctx := context.Background()
	b := open(t, pebblebackend.Config{Dir: "/data", FS: p.fs})
	defer rig.Close(t, b)
	waiting := func(queue string) map[string]int {
		st, err := b.QueueStats(ctx, queue)
		rig.Must(t, err)
		s, err := b.Consume(ctx, backend.QueueConfig{Name: queue, Prefetch: st.Pending + 1})
		rig.Must(t, err)
		defer s.Drop()
		ids := make(map[string]int)
		for range st.Pending {
			d := <-s.Deliveries()
			env, err := d.Envelope()
			rig.Must(t, err)
			ids[env.ID]++
			if ids[env.ID] > 1 {
				t.Errorf("job %s waits twice", env.ID)
			}
		}
		return ids
	}
	parents, kids := waiting("parents"), waiting("kids")
	record := func(id string) (backend.JobRecord, bool) {
		rec, err := b.JobRecord(ctx, id)
		if err != nil {
			if !errors.Is(err, backend.ErrNotFound) {
				t.Errorf("JobRecord(%s): %v", id, err)
			}
			return rec, false
		}
		return rec, true
	}

	// The dead letters, each with the reason its DeadLetter call gave.
	reasons := make(map[string]string)
	for _, s := range all.settles {
		if s.kind == settleDead {
			reasons[s.id] = s.reason
		}
	}
	dls, err := b.DeadLetters(ctx, "parents", 0)
	rig.Must(t, err)
	dead := make(map[string]string, len(dls))
	for _, dl := range dls {
		id := dl.Envelope.ID
		if _, twice := dead[id]; twice {
			t.Errorf("job %s is a dead letter twice", id)
		}
		dead[id] = dl.Reason
		if want, ok := reasons[id]; !ok || dl.Reason != want {
			t.Errorf("dead letter %s has the reason %q; its DeadLetter call gave %q (made: %t)", id, dl.Reason, want, ok)
		}
		if parents[id] != 0 {
			t.Errorf("job %s is a dead letter and waits", id)
		}
		if rec, ok := record(id); !ok || rec.State != backend.JobDead {
			t.Errorf("dead letter %s has the record %+v, not a dead one", id, rec)
		}
	}
	if st, err := b.QueueStats(ctx, "parents"); err != nil || st.Dead != len(dls) {
		t.Errorf("QueueStats(parents) = %+v, %v: %d dead letters listed", st, err, len(dls))
	}
	tally.deadLetters += len(dls)

	tally.returned += len(p.seen.returned)
	for _, id := range p.seen.returned {
		rec, ok := record(id)
		if !ok {
			t.Errorf("job %s: publish returned, no record after the crash", id)
			continue
		}
		switch rec.State {
		case backend.JobPending, backend.JobRetrying:
			if parents[id] == 0 {
				t.Errorf("job %s: record %s but not waiting: lost", id, rec.State)
			}
		case backend.JobSucceeded, backend.JobDead:
			if parents[id] != 0 {
				t.Errorf("job %s: %s and still waiting", id, rec.State)
			}
			if rec.State == backend.JobDead {
				if _, ok := dead[id]; !ok {
					t.Errorf("job %s: record dead, not in the dead letters after the crash", id)
				}
				continue
			}
			for _, c := range []string{id + ".1", id + ".2"} {
				if _, ok := record(c); !ok {
					t.Errorf("job %s acked without its child %s", id, c)
				}
			}
		default:
			t.Errorf("job %s: unexpected state %s", id, rec.State)
		}
	}
	for kid := range kids {
		parent := kid[:strings.LastIndexByte(kid, '.')]
		if rec, ok := record(parent); !ok || rec.State != backend.JobSucceeded {
			t.Errorf("child %s waits without its parent's ack (parent record %+v)", kid, rec)
		}
	}

	// Settles a later synced publish carried to the disk.
	tally.durableSettles += len(p.seen.durable)
	for _, s := range p.seen.durable {
		rec, ok := record(s.id)
		switch s.kind {
		case settleAck:
			if !ok || rec.State != backend.JobSucceeded {
				t.Errorf("job %s: acked before a synced publish, its record after the crash is %+v", s.id, rec)
			}
		case settleRetry:
			if !ok || rec.Attempt < s.attempt || rec.Attempt == s.attempt && rec.State == backend.JobPending {
				t.Errorf("job %s: attempt %d retried before a synced publish, its record after the crash is %+v", s.id, s.attempt, rec)
			}
		case settleDead:
			if reason, in := dead[s.id]; !ok || rec.State != backend.JobDead || !in || reason != s.reason {
				t.Errorf("job %s: dead-lettered (%q) before a synced publish; after the crash its record is %s, dead letter: %t", s.id, s.reason, rec.State, in)
			}
		}
	}

	checkCrashLater(t, b, p, all, record, tally)
	checkCrashTicks(t, b, p, all, tally)

	// Unique keys last: the probe publishes.
	uniq := waiting("uniq")
	var probe []backend.UniquePublication
	var holder []string // the id that must hold each probed key, or "" for a free key
	for i, u := range all.unique {
		rec, ok := record(u.id)
		held := false
		switch {
		case !ok && i < p.seen.unique:
			t.Errorf("unique job %s (key %s): publish returned, no record after the crash", u.id, u.key)
			continue
		case !ok: // its publish did not land: its key must not have either
		case rec.State == backend.JobPending:
			held = true
			if uniq[u.id] == 0 {
				t.Errorf("unique job %s (key %s): record pending but not waiting: lost", u.id, u.key)
			}
		case rec.State == backend.JobSucceeded:
			held = u.For > 0
		default:
			t.Errorf("unique job %s (key %s): unexpected state %s", u.id, u.key, rec.State)
			continue
		}
		h := ""
		if held {
			h = u.id
		}
		holder = append(holder, h)
		probe = append(probe, backend.UniquePublication{Publication: backend.Publication{Envelope: backend.NewEnvelope("uniq", nil)}, Key: u.key})
	}
	if len(probe) == 0 {
		return
	}
	res, err := b.PublishUnique(ctx, probe)
	rig.Must(t, err)
	for i, r := range res {
		key, want := probe[i].Key, holder[i]
		switch {
		case want != "" && (!r.Duplicate || r.ID != want):
			t.Errorf("unique key %s of job %s: a second publish after the crash = %+v, not a duplicate of it", key, want, r)
		case want == "" && r.Duplicate:
			t.Errorf("unique key %s: free before the crash (its job acked or not published), a duplicate of %s after it", key, r.ID)
		case want != "":
			tally.keysHeld++
		default:
			tally.keysFree++
		}
	}
}

// checkCrashLater checks the delayed and deferred jobs of the clone: every one whose
// publish returned is held, one due in an hour still waits, and every one due comes,
// not before it was due.
func checkCrashLater(t *testing.T, b *pebblebackend.Backend, p crashPoint, all *ledger,
	record func(string) (backend.JobRecord, bool), tally *crashTally) {
	ctx := context.Background()
	byID := make(map[string]laterJob, len(all.later))
	due := make(map[string]bool) // jobs the clone holds that must come due
	farDelayed, farDeferred := 0, 0
	for i, j := range all.later {
		byID[j.id] = j
		rec, ok := record(j.id)
		if !ok {
			if i < p.seen.later {
				t.Errorf("job %s (deferred %t, far %t): publish returned, no record after the crash", j.id, j.deferred, j.far)
			}
			continue
		}
		want := backend.JobDelayed
		if j.deferred {
			want = backend.JobDeferred
		}
		switch {
		case j.far && rec.State == want:
			if j.deferred {
				farDeferred++
			} else {
				farDelayed++
			}
			if _, err := b.JobEnvelope(ctx, j.id); err != nil {
				t.Errorf("job %s: %s for an hour after the crash, its envelope: %v", j.id, rec.State, err)
			}
		case j.far:
			t.Errorf("job %s: %s for an hour, %s after the crash", j.id, want, rec.State)
		case rec.State == want, rec.State == backend.JobPending:
			due[j.id] = true
		case rec.State != backend.JobSucceeded:
			t.Errorf("job %s: %s for 50 ms at most, %s after the crash", j.id, want, rec.State)
		}
	}
	tally.farHeld += farDelayed + farDeferred
	s, err := b.Consume(ctx, backend.QueueConfig{Name: "later", Prefetch: len(all.later) + 1})
	rig.Must(t, err)
	defer s.Drop()
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	got := make(map[string]bool)
	// Receive every job that must come due, and then whatever else is ready: none.
	ready := func() int {
		st, err := b.QueueStats(ctx, "later")
		rig.Must(t, err)
		return st.Pending
	}
	for len(got) < len(due) || ready() > 0 {
		select {
		case d, ok := <-s.Deliveries():
			if !ok {
				t.Fatalf("the stream of later ended: %v", s.Err())
			}
			at := time.Now()
			env, err := d.Envelope()
			rig.Must(t, err)
			j, known := byID[env.ID]
			switch {
			case known && j.far:
				t.Errorf("job %s delivered after the crash, due in an hour (at %v): early", env.ID, j.due)
			case !known || !due[env.ID]:
				t.Errorf("job %s delivered after the crash (due %v, far %t, known %t): not one that was due", env.ID, j.due, j.far, known)
			case got[env.ID]:
				t.Errorf("job %s delivered twice after the crash", env.ID)
			case at.Before(j.due):
				t.Errorf("job %s delivered at %v, before it was due at %v", env.ID, at, j.due)
			}
			got[env.ID] = true
		case <-timeout.C:
			t.Errorf("%d of the %d delayed or deferred jobs that were due came within 10 s after the crash (%d more ready)", len(got), len(due), ready())
			return
		}
	}
	tally.cameDue += len(due)
	if st, err := b.QueueStats(ctx, "later"); err != nil || st.Delayed != farDelayed || st.Deferred != farDeferred {
		t.Errorf("QueueStats(later) = %+v, %v; want %d delayed and %d deferred (the jobs due in an hour)", st, err, farDelayed, farDeferred)
	}
}

// checkCrashTicks checks each schedule's last fired tick in the clone: at least the
// last whose PublishTick returned, with the jobs of every tick up to it and of none
// after it (a tick and its job are one write, and the log keeps a prefix).
func checkCrashTicks(t *testing.T, b *pebblebackend.Backend, p crashPoint, all *ledger, tally *crashTally) {
	ctx := context.Background()
	ticks, err := b.ScheduleTicks(ctx)
	rig.Must(t, err)
	for _, s := range crashSchedules {
		last := -1 // the index of the tick the clone remembers
		if tick, ok := ticks[s]; ok {
			last = int(tick.Sub(crashTick(0)) / time.Minute)
			if !tick.Equal(crashTick(last)) || last >= all.ticksBegun[s] {
				t.Errorf("schedule %s: the clone remembers the tick %v, which was never fired", s, tick)
				continue
			}
		}
		if returned := p.seen.ticks[s]; last < returned-1 {
			t.Errorf("schedule %s: tick %d (%v) returned before the crash, the clone remembers tick %d: it would fire again", s, returned-1, crashTick(returned-1), last)
		}
		tally.ticks += p.seen.ticks[s]
		for i := range all.ticksBegun[s] {
			_, err := b.JobRecord(ctx, backend.ScheduleID(s, crashTick(i)))
			if err != nil && !errors.Is(err, backend.ErrNotFound) {
				t.Errorf("JobRecord of tick %d of %s: %v", i, s, err)
				continue
			}
			switch kept := err == nil; {
			case i <= last && !kept:
				t.Errorf("schedule %s: tick %d remembered, its job not kept", s, i)
			case i > last && kept:
				t.Errorf("schedule %s: the job of tick %d kept, the tick not (the clone remembers %d): it would fire twice", s, i, last)
			}
		}
	}
}
