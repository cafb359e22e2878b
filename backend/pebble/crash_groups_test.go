package pebble_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/internal/rig"
	pebblebackend "github.com/wasmjobs/wasmjobs/backend/pebble"
)

// groupRun is what the crash test of groups knows of the groups it publishes: each
// job's awaited ids (published before the group, so that a consumer can check them),
// and the groups whose PublishGroup returned.
type groupRun struct {
	mu       sync.Mutex
	awaits   map[string][]string
	role     map[string]string // callbacks' roles by job id
	returned []backend.GroupRecord
}

func (g *groupRun) await(id string) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.awaits[id]
}

// consumeGroups settles every job of b's queue "tasks": one batch job in five is
// dead-lettered, everything else acked. At each delivery it checks that every job
// the delivered one awaits has ended, and counts the deliveries of each callback. It
// returns when ctx ends.
func consumeGroups(t *testing.T, ctx context.Context, b *pebblebackend.Backend, run *groupRun, delivered map[string]int, mu *sync.Mutex) {
	s, err := b.Consume(ctx, backend.QueueConfig{Name: "tasks", Prefetch: 8})
	if err != nil {
		t.Errorf("Consume: %v", err)
		return
	}
	for d := range s.Deliveries() {
		env, _ := d.Envelope()
		for _, dep := range run.await(env.ID) {
			rec, err := b.JobRecord(context.Background(), dep)
			if err != nil || !rec.State.Finished() {
				t.Errorf("job %s delivered while %s, which it awaits, is %s (%v)", env.ID, dep, rec.State, err)
			}
		}
		run.mu.Lock()
		role := run.role[env.ID]
		run.mu.Unlock()
		if role != "" {
			mu.Lock()
			delivered[env.ID]++
			mu.Unlock()
		}
		if string(env.Payload) == "die" {
			err = d.DeadLetter(context.Background(), "told to")
		} else {
			err = d.(backend.AtomicDelivery).AckWith(context.Background(), nil, nil)
		}
		if err != nil && ctx.Err() == nil {
			t.Errorf("settling %s: %v", env.ID, err)
		}
	}
}

// TestCrashKeepsWorkflowsAndBatches publishes workflows (a chain with a join) and
// batches (with both callbacks) while a consumer runs them, and takes crash clones of
// the filesystem (what was synced, and a random part of what was not). Each clone is
// opened and run to the end; in each:
//   - every group whose PublishGroup returned is there and ends (no waiting job lost);
//   - no job is delivered before every job it awaits has ended, before the crash or
//     after it (no dependent before its dependency, no callback early);
//   - a callback that had succeeded before the crash is not delivered again, and none
//     is delivered twice after it;
//   - on_complete succeeds; on_success succeeds when every job did, and is cancelled
//     otherwise; the group's state says the same.
func TestCrashKeepsWorkflowsAndBatches(t *testing.T) {
	t.Parallel()
	crashes := 8
	if testing.Short() {
		crashes = 3
	}
	ctx := context.Background()
	fs := vfs.NewCrashableMem()
	b := open(t, pebblebackend.Config{Dir: "/data", FS: fs})
	rig.Must(t, b.Declare(ctx, backend.QueueConfig{Name: "tasks"}))
	run := &groupRun{awaits: map[string][]string{}, role: map[string]string{}}
	stop, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var mu sync.Mutex
	delivered := map[string]int{}
	wg.Go(func() { consumeGroups(t, stop, b, run, delivered, &mu) })
	wg.Go(func() {
		for i := 0; stop.Err() == nil && i < 400; i++ {
			g, deps := crashGroup(i)
			run.mu.Lock()
			for k, d := range deps {
				run.awaits[d.Envelope.ID] = d.Await.IDs
				if r := g.Members[k].Role; r != "" {
					run.role[d.Envelope.ID] = r
				}
			}
			run.mu.Unlock()
			if err := b.PublishGroup(ctx, g, deps); err != nil {
				t.Errorf("PublishGroup: %v", err)
				return
			}
			run.mu.Lock()
			run.returned = append(run.returned, g)
			run.mu.Unlock()
		}
	})
	type point struct {
		fs       *vfs.MemFS
		returned []backend.GroupRecord
	}
	var points []point
	rng := rand.New(rand.NewPCG(7, 0))
	for range crashes {
		time.Sleep(time.Duration(20+rng.IntN(40)) * time.Millisecond)
		run.mu.Lock()
		returned := run.returned[:len(run.returned):len(run.returned)]
		run.mu.Unlock()
		pct := rng.IntN(101)
		points = append(points, point{fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: pct, RNG: rand.New(rand.NewPCG(rng.Uint64(), 0))}), returned})
	}
	cancel()
	wg.Wait()
	rig.Must(t, b.Close(ctx))
	if t.Failed() {
		return
	}

	checked := 0
	for i, p := range points {
		func() {
			cb := open(t, pebblebackend.Config{Dir: "/data", FS: p.fs})
			defer cb.Close(ctx)
			before := map[string]bool{} // callbacks that had succeeded at the crash
			run.mu.Lock()
			for id := range run.role {
				if rec, err := cb.JobRecord(ctx, id); err == nil && rec.State == backend.JobSucceeded {
					before[id] = true
				}
			}
			run.mu.Unlock()
			cctx, cancel := context.WithCancel(ctx)
			var cmu sync.Mutex
			again := map[string]int{}
			done := make(chan struct{})
			go func() { defer close(done); consumeGroups(t, cctx, cb, run, again, &cmu) }()
			defer func() { cancel(); <-done }()
			for _, g := range p.returned {
				got := waitGroupEnds(t, cb, g.ID)
				checked++
				allOK := true
				for _, m := range got.Members {
					if m.Role == "" && m.State != backend.JobSucceeded {
						allOK = false
					}
				}
				for _, m := range got.Members {
					want := backend.JobSucceeded
					if m.Role == backend.RoleOnSuccess && !allOK {
						want = backend.JobCancelled
					}
					if m.Role != "" && m.State != want {
						t.Errorf("clone %d: %s %s's %s callback is %s, want %s", i, g.Kind, g.ID, m.Role, m.State, want)
					}
				}
				cmu.Lock()
				for _, m := range got.Members {
					if n := again[m.ID]; m.Role != "" && (n > 1 || (before[m.ID] && n > 0)) {
						t.Errorf("clone %d: callback %s delivered %d times after the crash (it had succeeded before: %v)", i, m.ID, n, before[m.ID])
					}
				}
				cmu.Unlock()
			}
		}()
	}
	if checked == 0 {
		t.Fatal("no clone held a group whose publish had returned: the test checked nothing")
	}
	mu.Lock()
	defer mu.Unlock()
	for id, n := range delivered {
		if n > 1 {
			t.Errorf("callback %s delivered %d times before the crash", id, n)
		}
	}
}

// crashGroup is the i-th group of the crash test: a workflow a -> b -> c with d after
// a and c, or a batch of four jobs (one of them dead-lettered in every third batch)
// with both callbacks.
func crashGroup(i int) (backend.GroupRecord, []backend.Dependent) {
	g := backend.GroupRecord{ID: backend.NewID(), Kind: backend.GroupWorkflow}
	var deps []backend.Dependent
	add := func(m backend.GroupMember, payload string, await backend.Await) {
		env := backend.NewEnvelope("tasks", []byte(payload))
		m.ID, m.Queue = env.ID, "tasks"
		g.Members = append(g.Members, m)
		deps = append(deps, backend.Dependent{Publication: backend.Publication{Envelope: env}, Await: await})
	}
	if i%2 == 0 {
		add(backend.GroupMember{Name: "a"}, "a", backend.Await{})
		add(backend.GroupMember{Name: "b", DependsOn: []string{"a"}}, "b", backend.Await{IDs: []string{deps[0].Envelope.ID}})
		add(backend.GroupMember{Name: "c", DependsOn: []string{"b"}}, "c", backend.Await{IDs: []string{deps[1].Envelope.ID}})
		add(backend.GroupMember{Name: "d", DependsOn: []string{"a", "c"}}, "d", backend.Await{IDs: []string{deps[0].Envelope.ID, deps[2].Envelope.ID}})
		return g, deps
	}
	g.Kind = backend.GroupBatch
	var ids []string
	for k := range 4 {
		payload := fmt.Sprint("job", k)
		if k == 3 && i%3 == 0 {
			payload = "die"
		}
		add(backend.GroupMember{}, payload, backend.Await{})
		ids = append(ids, deps[k].Envelope.ID)
	}
	add(backend.GroupMember{Role: backend.RoleOnComplete}, "complete", backend.Await{IDs: ids, OnFailure: backend.OnFailureRun})
	add(backend.GroupMember{Role: backend.RoleOnSuccess}, "success", backend.Await{IDs: ids})
	return g, deps
}

// waitGroupEnds waits up to 20 s for the group id to end, and returns it.
func waitGroupEnds(t *testing.T, b *pebblebackend.Backend, id string) backend.GroupRecord {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		g, err := b.Group(context.Background(), id)
		if err != nil {
			t.Fatalf("group %s, whose publish returned, after the crash: %v", id, err)
		}
		ended := g.State != backend.GroupRunning
		for _, m := range g.Members {
			if !m.State.Finished() {
				ended = false
			}
		}
		if ended {
			return g
		}
		if time.Now().After(deadline) {
			t.Fatalf("group %s still runs after 20 s: %+v", id, g)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
