package pebble_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/internal/rig"
	pebblebackend "github.com/wasmjobs/wasmjobs/backend/pebble"
)

// TestUniqueKeysSurviveReopenAndArePruned: a key held by a waiting job and one held
// after its job finished both hold across a restart; once their hold has passed, the
// pruner deletes them from the store.
func TestUniqueKeysSurviveReopenAndArePruned(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		cfg := pebblebackend.Config{Dir: "/data", FS: vfs.NewMem(), Records: pebblebackend.RecordConfig{PruneInterval: time.Minute}}
		b := open(t, cfg)
		q := backend.QueueConfig{Name: "jobs", Prefetch: 4}
		rig.Must(t, b.Declare(ctx, q))
		pub := func(b *pebblebackend.Backend, key string, holdFor time.Duration) backend.UniqueResult {
			t.Helper()
			res, err := b.PublishUnique(ctx, []backend.UniquePublication{{
				Publication: backend.Publication{Envelope: backend.NewEnvelope("jobs", []byte(key))}, Key: key, For: holdFor}})
			rig.Must(t, err)
			return res[0]
		}
		done := pub(b, "done", time.Hour)
		s, err := b.Consume(ctx, q)
		rig.Must(t, err)
		d := <-s.Deliveries()
		rig.Must(t, d.Ack(ctx))
		s.Drop()
		waiting := pub(b, "waiting", 10*time.Minute)
		rig.Close(t, b)

		b = open(t, cfg)
		for _, c := range []struct {
			key string
			id  string
		}{{"done", done.ID}, {"waiting", waiting.ID}} {
			if r := pub(b, c.key, time.Hour); !r.Duplicate || r.ID != c.id {
				t.Fatalf("key %q after reopen: %+v, want a duplicate of %s", c.key, r, c.id)
			}
		}
		if n := b.UniqueKeys(); n != 2 {
			t.Fatalf("%d unique keys after reopen, want 2", n)
		}
		// Past the finished job's hour (and a prune round), its key is gone; the
		// waiting job's key holds while the job waits, however long.
		time.Sleep(time.Hour + 2*time.Minute)
		synctest.Wait()
		if n := b.UniqueKeys(); n != 1 {
			t.Fatalf("%d unique keys after the hold passed, want 1 (the waiting job's)", n)
		}
		if r := pub(b, "waiting", time.Hour); !r.Duplicate {
			t.Fatalf("key of the waiting job: %+v, want a duplicate", r)
		}
		if r := pub(b, "done", time.Hour); r.Duplicate {
			t.Fatalf("key of the job finished over an hour ago: %+v, want a new job", r)
		}
		rig.Close(t, b)
		b = open(t, cfg) // the pruned key stays pruned; the new one is there
		defer rig.Close(t, b)
		if n := b.UniqueKeys(); n != 2 {
			t.Fatalf("%d unique keys after the second reopen, want 2", n)
		}
	})
}

// BenchmarkPebblePublishUnique measures synced publishes of jobs from 8 publishers a CPU, each
// with a key of its own ("unique") or none ("plain"): what the key's lock and entry
// cost. One op is one job.
func BenchmarkPebblePublishUnique(b *testing.B) {
	for _, unique := range []bool{false, true} {
		name := "plain"
		if unique {
			name = "unique"
		}
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			be, err := pebblebackend.Open(ctx, pebblebackend.Config{Dir: b.TempDir() + "/data"})
			if err != nil {
				b.Fatal(err)
			}
			defer be.Close(ctx)
			if err := be.Declare(ctx, backend.QueueConfig{Name: "bench"}); err != nil {
				b.Fatal(err)
			}
			var next atomic.Int64
			b.SetParallelism(8)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					env := backend.NewEnvelope("bench", []byte(`{"n":1}`))
					var err error
					if unique {
						_, err = be.PublishUnique(ctx, []backend.UniquePublication{{
							Publication: backend.Publication{Envelope: env}, Key: strconv.FormatInt(next.Add(1), 10), For: time.Hour}})
					} else {
						err = be.Publish(ctx, env, 0)
					}
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
		})
	}
}
