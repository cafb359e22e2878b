package pebble_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/wasmjobs/wasmjobs/backend"
	pebblebackend "github.com/wasmjobs/wasmjobs/backend/pebble"
)

// crashPoint is a copy of the filesystem as a power loss could leave it, with the ids
// whose publish had returned before it was taken.
type crashPoint struct {
	fs       *vfs.MemFS
	returned []string
	unsynced int
}

// TestCrashLosesNoReturnedPublish runs publishers, a consumer that acks with children,
// retries and dead-letters, and a consumer of the children, and takes crash clones of
// the filesystem (everything synced, and a random part of what was not) while they run.
// On every clone: each job whose publish returned is there (waiting, or settled with
// its record); no job is both settled and waiting, none waits twice; no ack is kept
// without its children, and no child without its parent's ack.
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
	mustDo(t, b.Declare(ctx, parents))
	mustDo(t, b.Declare(ctx, kids))

	var mu sync.Mutex
	var returned []string
	run, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for p := range 4 {
		wg.Go(func() {
			for i := 0; run.Err() == nil && i < 1500; i++ {
				env := backend.NewEnvelope("parents", []byte(fmt.Sprintf("p%d-%d", p, i)))
				if p == 0 && i%2 == 0 { // some through the batch path
					batch := []backend.Publication{{Envelope: env}, {Envelope: backend.NewEnvelope("parents", []byte("batched"))}}
					if err := b.PublishBatch(ctx, batch); err != nil {
						t.Errorf("PublishBatch: %v", err)
						return
					}
					mu.Lock()
					returned = append(returned, batch[0].Envelope.ID, batch[1].Envelope.ID)
					mu.Unlock()
					continue
				}
				if err := b.Publish(ctx, env, 0); err != nil {
					t.Errorf("Publish: %v", err)
					return
				}
				mu.Lock()
				returned = append(returned, env.ID)
				mu.Unlock()
			}
		})
	}
	ps, err := b.Consume(run, parents)
	mustDo(t, err)
	wg.Go(func() {
		for d := range ps.Deliveries() {
			env, _ := d.Envelope()
			ad := d.(backend.AtomicDelivery)
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
				err = ad.RetryWith(ctx, next, 0, nil)
			default:
				err = ad.DeadLetterWith(ctx, "crash test", nil)
			}
			if err != nil && run.Err() == nil {
				t.Errorf("settle: %v", err)
			}
		}
	})
	ks, err := b.Consume(run, kids)
	mustDo(t, err)
	wg.Go(func() {
		for d := range ks.Deliveries() {
			if err := d.Ack(ctx); err != nil && run.Err() == nil {
				t.Errorf("Ack of a child: %v", err)
			}
		}
	})

	rng := rand.New(rand.NewPCG(1, 2))
	var points []crashPoint
	for range crashes {
		time.Sleep(time.Duration(1+rng.IntN(20)) * time.Millisecond)
		mu.Lock()
		snap := append([]string(nil), returned...)
		mu.Unlock()
		pct := rng.IntN(101)
		clone := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: pct, RNG: rand.New(rand.NewPCG(rng.Uint64(), 0))})
		points = append(points, crashPoint{fs: clone, returned: snap, unsynced: pct})
	}
	stop()
	wg.Wait()
	closeBackend(t, b)
	total := 0
	for i, p := range points {
		total += len(p.returned)
		t.Run(fmt.Sprintf("crash%02d-unsynced%d%%", i, p.unsynced), func(t *testing.T) { checkCrashPoint(t, p) })
	}
	if total == 0 {
		t.Fatal("no publish returned before any crash point: the test checked nothing")
	}
	t.Logf("%d crash points, %d returned publishes checked", len(points), total)
}

func checkCrashPoint(t *testing.T, p crashPoint) {
	ctx := context.Background()
	b := open(t, pebblebackend.Config{Dir: "/data", FS: p.fs})
	defer closeBackend(t, b)
	waiting := func(queue string) map[string]int {
		st, err := b.QueueStats(ctx, queue)
		mustDo(t, err)
		s, err := b.Consume(ctx, backend.QueueConfig{Name: queue, Prefetch: st.Pending + 1})
		mustDo(t, err)
		defer s.Drop()
		ids := make(map[string]int)
		for range st.Pending {
			d := <-s.Deliveries()
			env, err := d.Envelope()
			mustDo(t, err)
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
			return rec, false
		}
		return rec, true
	}
	for _, id := range p.returned {
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
}
