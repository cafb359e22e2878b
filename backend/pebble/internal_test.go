package pebble

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	pebbledb "github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/internal/rig"
)

// openMem opens a backend with cfg on fs (nil: a fresh memory filesystem), in the
// directory /data; the caller closes it.
func openMem(t *testing.T, fs vfs.FS, cfg Config) *Backend {
	t.Helper()
	if fs == nil {
		fs = vfs.NewMem()
	}
	cfg.Dir, cfg.FS = "/data", fs
	b, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return b
}

// withJob is openMem with the queue "q" declared and the job "j" published to it after
// delay.
func withJob(t *testing.T, fs vfs.FS, cfg Config, delay time.Duration) *Backend {
	t.Helper()
	b := openMem(t, fs, cfg)
	rig.Must(t, b.Declare(context.Background(), backend.QueueConfig{Name: "q"}))
	rig.Must(t, b.Publish(context.Background(), backend.Envelope{ID: "j", Queue: "q"}, delay))
	return b
}

// A job whose value cannot be read is never handed out (before the fix it was handed out
// with an empty envelope and a decode error, and the worker dead-lettered it: the job's
// key was deleted and the dead letter held no payload). The store fails instead, every
// stream ends with ErrStoreFailed, and the job is still on the index and on disk.
func TestUnreadableJobIsNotHandedOut(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := openMem(t, nil, Config{})
	rig.Must(t, b.Declare(ctx, backend.QueueConfig{Name: "q"}))
	// A second stream on another queue, idle: it must end too.
	rig.Must(t, b.Declare(ctx, backend.QueueConfig{Name: "other"}))
	idle, err := b.Consume(ctx, backend.QueueConfig{Name: "other"})
	rig.Must(t, err)
	rig.Must(t, b.Publish(ctx, backend.Envelope{ID: "j1", Queue: "q", Payload: []byte("x")}, 0))
	q, _ := b.queues.Lookup("q")
	key := q.keyOf("j1")
	// The read fails: here the key is gone underneath the index, and the value its
	// publish kept in memory is forgotten, as past the budget for them.
	rig.Must(t, b.db.Delete(key, pebbledb.Sync))
	q.Lock()
	for it := range q.All() {
		b.hot.take(it)
	}
	q.Unlock()
	s, err := b.Consume(ctx, backend.QueueConfig{Name: "q"})
	rig.Must(t, err)
	for d := range s.Deliveries() {
		env, derr := d.Envelope()
		t.Fatalf("a job whose value was not read was handed out: %+v, %v", env, derr)
	}
	if err := s.Err(); !errors.Is(err, ErrStoreFailed) || !errors.Is(err, ErrCorrupt) {
		t.Fatalf("stream ended with %v, want ErrStoreFailed and ErrCorrupt", err)
	}
	for range idle.Deliveries() {
	}
	if err := idle.Err(); !errors.Is(err, ErrStoreFailed) {
		t.Fatalf("idle stream ended with %v, want ErrStoreFailed", err)
	}
	if _, err := b.Consume(ctx, backend.QueueConfig{Name: "q"}); !errors.Is(err, ErrStoreFailed) {
		t.Fatalf("Consume after the failure = %v, want ErrStoreFailed", err)
	}
	if st, _ := b.QueueStats(ctx, "q"); st.Pending != 1 || st.Unacked != 0 || st.Dead != 0 {
		t.Fatalf("stats after the failure %+v, want the job pending", st)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := b.Close(cctx); !errors.Is(err, ErrStoreFailed) {
		t.Fatalf("Close of a failed store = %v, want ErrStoreFailed", err)
	}
}

// Concurrent declarations of one queue with different levels: one wins, the others get
// the conflict error, and the store reopens with the winner's levels (before the fix
// every declaration committed its own levels, memory kept the first, and a job at a
// priority above the levels on disk made the next Open fail).
func TestConcurrentDeclaresCommitOnlyTheWinner(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fs := vfs.NewMem()
	for round := range 20 {
		name := fmt.Sprintf("q%d", round)
		b := openMem(t, fs, Config{})
		errs := make([]error, 10)
		var wg sync.WaitGroup
		for i := range errs {
			wg.Go(func() { errs[i] = b.Declare(ctx, backend.QueueConfig{Name: name, PriorityLevels: i}) })
		}
		wg.Wait()
		won := -1
		for i, err := range errs {
			if err == nil {
				if won >= 0 {
					t.Fatalf("round %d: declarations with %d and %d levels both succeeded", round, won, i)
				}
				won = i
			}
		}
		q, err := b.queues.Lookup(name)
		rig.Must(t, err)
		if won < 0 || q.Levels() != won {
			t.Fatalf("round %d: winner %d, queue has %d levels; errors %v", round, won, q.Levels(), errs)
		}
		rig.Must(t, b.Publish(ctx, backend.Envelope{ID: name, Queue: name, Priority: 9}, 0))
		rig.Must(t, b.Close(ctx))
		b = openMem(t, fs, Config{})
		q, err = b.queues.Lookup(name)
		rig.Must(t, err)
		if q.Levels() != won {
			t.Fatalf("round %d: reopened with %d levels, the winner declared %d", round, q.Levels(), won)
		}
		rig.Must(t, b.Close(ctx))
	}
}

// A delay near the largest Duration overflowed the rounding and became negative: the job
// was released at once. Delays past backend.MaxDelay are refused; MaxDelay itself holds.
func TestDelayPastMaxDelayIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := openMem(t, nil, Config{})
	defer b.Close(ctx)
	rig.Must(t, b.Declare(ctx, backend.QueueConfig{Name: "q"}))
	for _, d := range []time.Duration{math.MaxInt64 - 5, backend.MaxDelay + 1} {
		err := b.Publish(ctx, backend.Envelope{ID: fmt.Sprint(d), Queue: "q"}, d)
		if !errors.Is(err, backend.ErrDelayTooLong) {
			t.Errorf("Publish with delay %v = %v, want ErrDelayTooLong", d, err)
		}
		err = b.PublishBatch(ctx, []backend.Publication{{Envelope: backend.Envelope{ID: "b" + fmt.Sprint(d), Queue: "q"}, Delay: d}})
		if !errors.Is(err, backend.ErrDelayTooLong) {
			t.Errorf("PublishBatch with delay %v = %v, want ErrDelayTooLong", d, err)
		}
	}
	rig.Must(t, b.Publish(ctx, backend.Envelope{ID: "max", Queue: "q"}, backend.MaxDelay))
	if st, _ := b.QueueStats(ctx, "q"); st.Pending != 0 || st.Delayed != 1 {
		t.Fatalf("stats %+v, want only the job delayed by MaxDelay, delayed", st)
	}
}

// A second Close returned nil at once while the first was still waiting for a write.
func TestSecondCloseWaitsForTheStore(t *testing.T) {
	t.Parallel()
	b := openMem(t, nil, Config{})
	rig.Must(t, b.enter()) // a write in progress
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := b.Close(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("first Close = %v, want its deadline", err)
	}
	if err := b.Close(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second Close while a write is in progress = %v, want its deadline", err)
	}
	b.ops.Done()
	if err := b.Close(context.Background()); err != nil {
		t.Fatalf("Close once the write finished = %v", err)
	}
	select {
	case <-b.storeClosed:
	default:
		t.Fatal("Close returned before the store was closed")
	}
}

// A settle whose ctx ends while its write is in flight says the outcome is unknown
// (before, a plain ctx error that read like "nothing was written", so the worker settled
// the delivery again and got ErrAlreadySettled); the write then lands.
func TestSettleWhoseContextEndsIsUnknown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := withJob(t, nil, Config{}, 0)
	defer b.Close(ctx)
	gate := make(chan struct{})
	var open sync.Once
	defer open.Do(func() { close(gate) }) // before Close, which waits for the write
	b.beforeCommit = func(op string) {
		if op == "ack" {
			<-gate
		}
	}
	s, err := b.Consume(ctx, backend.QueueConfig{Name: "q"})
	rig.Must(t, err)
	defer s.Drop()
	d := (<-s.Deliveries()).(*delivery)
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := d.AckWith(short, nil, nil); !errors.Is(err, backend.ErrSettleUnknown) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ack whose ctx ended in flight = %v, want ErrSettleUnknown", err)
	}
	if err := d.Ack(ctx); !errors.Is(err, backend.ErrAlreadySettled) {
		t.Fatalf("second settle = %v, want ErrAlreadySettled", err)
	}
	open.Do(func() { close(gate) })
	for {
		st, _ := b.QueueStats(ctx, "q")
		if st.Unacked == 0 {
			if st.Pending != 0 {
				t.Fatalf("stats %+v after the ack landed", st)
			}
			break
		}
		time.Sleep(time.Millisecond)
	}
	if rec, err := b.JobRecord(ctx, "j"); err != nil || rec.State != backend.JobSucceeded {
		t.Fatalf("record %+v, %v: want succeeded", rec, err)
	}
}

// Concurrent replays of one dead letter counted it off q.dead once each.
func TestConcurrentReplaysCountTheDeadLetterOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := withJob(t, nil, Config{}, 0)
	defer b.Close(ctx)
	s, err := b.Consume(ctx, backend.QueueConfig{Name: "q"})
	rig.Must(t, err)
	rig.Must(t, (<-s.Deliveries()).DeadLetter(ctx, "boom"))
	s.Drop()
	gate := make(chan struct{})
	var first sync.Once
	b.beforeCommit = func(op string) {
		if op == "replay" {
			first.Do(func() { <-gate })
		}
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { b.ReplayDeadLetter(ctx, "q", "j") })
	}
	time.Sleep(50 * time.Millisecond) // let every replay find the dead letter
	close(gate)
	wg.Wait()
	if st, _ := b.QueueStats(ctx, "q"); st.Dead != 0 || st.Pending != 1 {
		t.Fatalf("stats after concurrent replays %+v, want 0 dead, 1 pending", st)
	}
}

// A delayed job whose value cannot be read when it falls due was dropped from the index
// and left on disk; the store fails instead and the job stays counted as delayed.
func TestUnreadableDelayedJobFailsTheStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := withJob(t, nil, Config{}, time.Hour)
	b.delays.mu.Lock()
	dl := b.delays.h[0]
	dl.due = time.Now().Add(-time.Second) // due now
	b.delays.mu.Unlock()
	rig.Must(t, b.db.Delete(dl.key, pebbledb.Sync))
	b.delays.fire()
	if err := b.failure(); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("store failed with %v, want ErrCorrupt", err)
	}
	if st, _ := b.QueueStats(ctx, "q"); st.Delayed != 1 {
		t.Fatalf("stats %+v, want the job still delayed", st)
	}
	b.Close(ctx)
}

// A replay of a dead letter racing the prune of the dead job's record lost the fresh
// record: the prune chose the record (finished, its by-time key due) and its batch,
// committed after the replay's, deleted the record the replay had just written. The
// replay here commits between the prune's choice and the prune's commit; synctest.Wait
// lets it run as far as it can before the prune commits.
func TestPruneRacingAReplayKeepsTheFreshRecord(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		b := oneRecordedJob(t, func(_ *Backend, next func() backend.Delivery) {
			rig.Must(t, next().DeadLetter(ctx, "boom"))
		})
		replayed := make(chan error, 1)
		b.beforeCommit = func(op string) {
			if op == "prune records" {
				go func() { replayed <- b.ReplayDeadLetter(ctx, "q", "j") }()
				synctest.Wait()
			}
		}
		rig.Must(t, b.prune(time.Now().Add(time.Hour)))
		rig.Must(t, <-replayed)
		b.beforeCommit = nil
		rec, err := b.JobRecord(ctx, "j")
		if err != nil || rec.State != backend.JobPending {
			t.Fatalf("record after the replay = %+v, %v; want the replay's fresh record, pending", rec, err)
		}
		// The prune's next pass leaves the live job's record alone too.
		rig.Must(t, b.prune(time.Now().Add(time.Hour)))
		if rec, err := b.JobRecord(ctx, "j"); err != nil || rec.State != backend.JobPending {
			t.Fatalf("record after a second prune = %+v, %v; want it pending", rec, err)
		}
	})
}

// A purge reports exactly the dead letters it removed. It counted them, then range-
// deleted the queue's dead letters: one written in between was deleted and not counted,
// one replayed in between was counted and not deleted (the replay had taken it).
func TestPurgeCountsWhatItRemoved(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// during runs between the purge's count and its write; it returns how many
		// dead letters it added and how many it took off the queue.
		during func(t *testing.T, b *Backend, held backend.Delivery) (added, taken int)
	}{
		{"a job dead-lettered meanwhile", func(t *testing.T, b *Backend, held backend.Delivery) (int, int) {
			rig.Must(t, held.DeadLetter(context.Background(), "boom"))
			return 1, 0
		}},
		{"a dead letter replayed meanwhile", func(t *testing.T, b *Backend, held backend.Delivery) (int, int) {
			if err := b.ReplayDeadLetter(context.Background(), "q", "a"); err != nil {
				return 0, 0 // the purge has it
			}
			return 0, 1
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := openMem(t, nil, Config{})
			defer b.Close(ctx)
			rig.Must(t, b.Declare(ctx, backend.QueueConfig{Name: "q", Prefetch: 2}))
			rig.Must(t, b.Publish(ctx, backend.Envelope{ID: "a", Queue: "q"}, 0))
			rig.Must(t, b.Publish(ctx, backend.Envelope{ID: "b", Queue: "q"}, 0))
			s, err := b.Consume(ctx, backend.QueueConfig{Name: "q", Prefetch: 2})
			rig.Must(t, err)
			defer s.Drop()
			da, db := <-s.Deliveries(), <-s.Deliveries()
			if env, _ := da.Envelope(); env.ID != "a" {
				da, db = db, da
			}
			rig.Must(t, da.DeadLetter(ctx, "boom"))
			var once sync.Once
			added, taken := 0, 0
			b.beforeCommit = func(op string) {
				if op == "purge dead letters" {
					once.Do(func() { added, taken = tc.during(t, b, db) })
				}
			}
			n, err := b.PurgeDeadLetters(ctx, "q")
			rig.Must(t, err)
			b.beforeCommit = nil
			left, err := b.DeadLetters(ctx, "q", 0)
			rig.Must(t, err)
			if want := 1 + added - taken - len(left); n != want {
				t.Errorf("purge reported %d removed; %d dead letters before, %d added and %d taken meanwhile, %d left: want %d",
					n, 1, added, taken, len(left), want)
			}
			if st, _ := b.QueueStats(ctx, "q"); st.Dead != len(left) {
				t.Errorf("stats count %d dead, %d dead letters left on disk", st.Dead, len(left))
			}
		})
	}
}

// DeleteJob of a succeeded job racing a publish of its id deleted the new job's record:
// it read the record as succeeded and committed the delete after the publish had
// written the fresh one.
func TestDeleteJobRacingAPublishKeepsTheFreshRecord(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		b := withJob(t, nil, Config{}, 0)
		defer b.Close(ctx)
		s, err := b.Consume(ctx, backend.QueueConfig{Name: "q"})
		rig.Must(t, err)
		rig.Must(t, (<-s.Deliveries()).Ack(ctx))
		s.Drop()
		published := make(chan error, 1)
		b.beforeCommit = func(op string) {
			if op == "delete job" {
				go func() { published <- b.Publish(ctx, backend.Envelope{ID: "j", Queue: "q"}, 0) }()
				synctest.Wait()
			}
		}
		rig.Must(t, b.DeleteJob(ctx, "j"))
		rig.Must(t, <-published)
		b.beforeCommit = nil
		if rec, err := b.JobRecord(ctx, "j"); err != nil || rec.State != backend.JobPending {
			t.Fatalf("record after the publish = %v, %v; want the new job's record, pending", rec.State, err)
		}
	})
}

// DeleteJob of a finished job whose id another operation reserved for a moment was
// refused with ErrJobState "waiting or running again (published anew)", which was false
// (the API answered 409): it did not wait for the reservation to end. It waits now, and
// then answers from what is there: deleted, gone already, or published anew.
func TestDeleteJobWaitsForABriefReservation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// during is the op whose commit DeleteJob runs against; run makes it commit.
		during string
		run    func(t *testing.T, b *Backend)
		// want is DeleteJob's error (nil: it deleted the record).
		want error
		// left is the record's state after both, "" when it is gone.
		left backend.JobState
	}{
		{"a prune of the job's earlier time key", "prune records", func(t *testing.T, b *Backend) {
			rig.Must(t, b.prune(time.Now().Add(30*time.Second)))
		}, nil, ""},
		{"a concurrent DeleteJob", "delete job", func(t *testing.T, b *Backend) {
			rig.Must(t, b.DeleteJob(context.Background(), "j"))
		}, backend.ErrNotFound, ""},
		{"a publish of the id anew", "publish", func(t *testing.T, b *Backend) {
			rig.Must(t, b.Publish(context.Background(), backend.Envelope{ID: "j", Queue: "q"}, 0))
		}, backend.ErrJobState, backend.JobPending},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				// Dead, replayed, and succeeded two minutes later: the record's time key
				// of the dead letter stays behind it, due for the prune before the record.
				b := oneRecordedJob(t, func(b *Backend, next func() backend.Delivery) {
					rig.Must(t, next().DeadLetter(ctx, "boom"))
					rig.Must(t, b.ReplayDeadLetter(ctx, "q", "j"))
					time.Sleep(2 * time.Minute)
					rig.Must(t, next().Ack(ctx))
				})
				deleted := make(chan error, 1)
				var once sync.Once
				b.beforeCommit = func(op string) {
					if op == tc.during {
						once.Do(func() {
							go func() { deleted <- b.DeleteJob(ctx, "j") }()
							synctest.Wait()
						})
					}
				}
				tc.run(t, b)
				err := <-deleted
				b.beforeCommit = nil
				if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
					t.Fatalf("DeleteJob during a %q commit = %v, want %v", tc.during, err, tc.want)
				}
				rec, err := b.JobRecord(ctx, "j")
				if tc.left == "" && !errors.Is(err, backend.ErrNotFound) || tc.left != "" && (err != nil || rec.State != tc.left) {
					t.Fatalf("record after both = %v, %v; want %q", rec.State, err, tc.left)
				}
			})
		})
	}
}

// A prune that met a finished record's time key while the id was reserved for a moment
// (a publish, replay or delete of the id that then wrote nothing) deleted the time key
// and kept the record: with no time key left, the record was never pruned. The key now
// waits for the next pass.
func TestPruneLeavesABrieflyReservedKeyForTheNextPass(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		b := oneRecordedJob(t, func(_ *Backend, next func() backend.Delivery) {
			rig.Must(t, next().Ack(ctx))
		})
		// The operation that reserves the id and ends without a write.
		if ok, err := b.ids.reserve(ctx, "j"); !ok || err != nil {
			t.Fatalf("the id of a succeeded job could not be reserved: %v", err)
		}
		rig.Must(t, b.prune(time.Now().Add(time.Hour)))
		b.ids.settle("j", false)
		if _, err := b.JobRecord(ctx, "j"); err != nil {
			t.Fatalf("record pruned while its id was reserved: %v", err)
		}
		rig.Must(t, b.prune(time.Now().Add(time.Hour)))
		if rec, err := b.JobRecord(ctx, "j"); !errors.Is(err, backend.ErrNotFound) {
			t.Fatalf("record after the next prune = %v, %v; want it pruned", rec.State, err)
		}
		if b.recs.finished != 0 {
			t.Fatalf("%d finished records counted, want 0", b.recs.finished)
		}
	})
}

// A purge treated any failed read of a dead letter as "replayed or deleted meanwhile":
// an I/O error skipped the dead letter and the purge reported success. It fails with a
// TransportError now, and the dead letter stays, counted.
func TestPurgeFailsOnAnUnreadableDeadLetter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	injected := errors.New("injected read error")
	var armed atomic.Bool
	var mu sync.Mutex
	reads := make(map[string]int)
	// With no block cache (CacheSize 1) every read of a table block reaches the
	// filesystem. Once armed, the purge's two iterators (the one finding the last dead
	// letter, the one of the batch) read each block once; the third read of a block is
	// the purge's own read of the dead letter, and fails.
	fs := errorfs.Wrap(vfs.NewMem(), errorfs.InjectorFunc(func(op errorfs.Op) error {
		if !armed.Load() || !strings.HasSuffix(op.Path, ".sst") || op.Kind != errorfs.OpFileReadAt {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		k := fmt.Sprintf("%s@%d", op.Path, op.Offset)
		if reads[k]++; reads[k] >= 3 {
			return injected
		}
		return nil
	}))
	b := withJob(t, fs, Config{CacheSize: 1}, 0)
	defer b.Close(ctx)
	s, err := b.Consume(ctx, backend.QueueConfig{Name: "q"})
	rig.Must(t, err)
	rig.Must(t, (<-s.Deliveries()).DeadLetter(ctx, "boom"))
	s.Drop()
	rig.Must(t, b.db.Flush()) // the dead letter is read from a table, not the memtable
	armed.Store(true)
	n, err := b.PurgeDeadLetters(ctx, "q")
	armed.Store(false)
	var te *backend.TransportError
	if !errors.As(err, &te) || !errors.Is(err, injected) || n != 0 {
		t.Fatalf("purge with an unreadable dead letter = %d, %v; want 0 and a TransportError wrapping the read's", n, err)
	}
	if st, _ := b.QueueStats(ctx, "q"); st.Dead != 1 {
		t.Fatalf("stats %+v after the failed purge, want the dead letter counted", st)
	}
	if left, err := b.DeadLetters(ctx, "q", 0); err != nil || len(left) != 1 {
		t.Fatalf("dead letters after the failed purge: %d, %v; want 1", len(left), err)
	}
}

// oneRecordedJob opens a backend that keeps job records for a minute (pruned by hand),
// closed when the test ends, publishes job "j" to queue "q" and has settle settle it,
// next receiving from a stream of q that is dropped after: the rig of the
// record-pruning races.
func oneRecordedJob(t *testing.T, settle func(b *Backend, next func() backend.Delivery)) *Backend {
	t.Helper()
	b := withJob(t, nil, Config{Records: RecordConfig{MaxAge: time.Minute, PruneInterval: time.Hour}}, 0)
	t.Cleanup(func() { rig.Close(t, b) })
	s, err := b.Consume(context.Background(), backend.QueueConfig{Name: "q"})
	rig.Must(t, err)
	settle(b, func() backend.Delivery { return <-s.Deliveries() })
	s.Drop()
	return b
}

// A ready job's value is kept in memory from its publish to its delivery while the
// budget allows; past it the delivery reads the value from the store, and either way
// the job comes out whole and the budget's count goes back to zero.
func TestHotValuesStayWithinTheirBudget(t *testing.T) {
	t.Parallel()
	var h hotValues
	if h.keep(make([]byte, maxHotBytes+1)) != nil || h.bytes.Load() != 0 {
		t.Fatalf("a value past the whole budget was kept (%d bytes counted)", h.bytes.Load())
	}
	it := &item{value: h.keep(make([]byte, maxHotBytes-10))}
	if it.value == nil || h.keep(make([]byte, 11)) != nil {
		t.Fatal("the budget did not fill, or overflowed")
	}
	if v := h.take(it); len(v) != maxHotBytes-10 || it.value != nil || h.bytes.Load() != 0 || h.take(it) != nil {
		t.Fatalf("take: %d bytes, %d still counted", len(v), h.bytes.Load())
	}

	ctx := context.Background()
	b := openMem(t, nil, Config{})
	rig.Must(t, b.Declare(ctx, backend.QueueConfig{Name: "q"}))
	rig.Must(t, b.Publish(ctx, backend.Envelope{ID: "kept", Queue: "q", Payload: []byte("a")}, 0))
	if b.hot.bytes.Load() <= 0 {
		t.Fatal("a publish kept no value in memory")
	}
	b.hot.bytes.Add(maxHotBytes) // the budget is full now
	rig.Must(t, b.Publish(ctx, backend.Envelope{ID: "read", Queue: "q", Payload: []byte("b")}, 0))
	b.hot.bytes.Add(-maxHotBytes)
	s, err := b.Consume(ctx, backend.QueueConfig{Name: "q", Prefetch: 2})
	rig.Must(t, err)
	for _, want := range []string{"kept", "read"} {
		d := <-s.Deliveries()
		env, err := d.Envelope()
		if err != nil || env.ID != want || string(env.Payload) != map[string]string{"kept": "a", "read": "b"}[want] {
			t.Fatalf("delivery %s: %+v, %v", want, env, err)
		}
		rig.Must(t, d.Ack(ctx))
	}
	if n := b.hot.bytes.Load(); n != 0 {
		t.Errorf("%d bytes still counted after both deliveries", n)
	}
	s.Drop()
}

// The memtable is DefaultMemTableSize unless Config says otherwise: 6 MiB of jobs
// stay in memory at the default and are flushed to a table under Pebble's own 4 MiB.
func TestMemTableSize(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, c := range []struct {
		size    int64
		flushed bool
	}{{0, false}, {4 << 20, true}} {
		b := openMem(t, nil, Config{MemTableSize: c.size})
		rig.Must(t, b.Declare(ctx, backend.QueueConfig{Name: "q"}))
		for range 10 {
			pubs := make([]backend.Publication, 500)
			for i := range pubs {
				pubs[i].Envelope = backend.NewEnvelope("q", make([]byte, 1000))
			}
			rig.Must(t, b.PublishBatch(ctx, pubs))
		}
		// A flush is asynchronous: wait for one as long in either case.
		deadline := time.Now().Add(2 * time.Second)
		for b.db.Metrics().Flush.Count == 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if got := b.db.Metrics().Flush.Count > 0; got != c.flushed {
			t.Errorf("MemTableSize %d: flushed %v, want %v", c.size, got, c.flushed)
		}
		rig.Close(t, b)
	}
}
