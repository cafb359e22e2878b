package host_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/memory"
	"github.com/wasmjobs/wasmjobs/backend/pebble"
	"github.com/wasmjobs/wasmjobs/host"
	"github.com/wasmjobs/wasmjobs/worker"
)

// Fan-out and fan-in end to end, on the memory and pebble backends (both keep waiting jobs),
// with the real worker and host: a parent of the Go SDK and the README's TypeScript
// example each stage awaited children and settle WAIT; the children run; the parent
// runs again at the same attempt, a round higher, and reads how every child ended.

// waitBackends are the backends the fan-in tests run on.
var waitBackends = []struct {
	name string
	open func(t *testing.T) backend.Backend
}{
	{"memory", func(*testing.T) backend.Backend { return memory.New(memory.Config{}) }},
	{"pebble", func(t *testing.T) backend.Backend {
		b, err := pebble.Open(context.Background(), pebble.Config{Dir: t.TempDir(), BallastSize: -1})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}},
}

// waitRig is a worker on a backend serving parent modules and a Go handler for
// their children's queues, recording every settled parent run.
type waitRig struct {
	t *testing.T
	b backend.Backend

	mu   sync.Mutex
	runs map[string][]worker.Event // the parents' settled runs, by job id
	done chan string               // a parent's id at each of its acks
}

// newWaitRig serves mods, and children's queues with child: "fail" is dead-lettered
// with the reason "no page", anything else acks with the output "rendered " + payload.
func newWaitRig(t *testing.T, b backend.Backend, childQueues []string, mods ...*host.Module) *waitRig {
	t.Helper()
	r := &waitRig{t: t, b: b, runs: map[string][]worker.Event{}, done: make(chan string, 16)}
	if _, ok := b.(backend.DependentPublisher); !ok {
		t.Fatalf("%T keeps no waiting jobs (no backend.DependentPublisher): this test needs a backend that does", b)
	}
	parents := map[string]bool{}
	for _, m := range mods {
		parents[m.Queue()] = true
	}
	w := worker.New(r.b, worker.Config{Concurrency: 8, Observer: worker.ObserverFunc(func(ev worker.Event) {
		if ev.Kind != worker.EventSettled || !parents[ev.Job.Envelope.Queue] {
			return
		}
		r.mu.Lock()
		r.runs[ev.Job.Envelope.ID] = append(r.runs[ev.Job.Envelope.ID], ev)
		r.mu.Unlock()
		if ev.Settle == worker.Ack {
			r.done <- ev.Job.Envelope.ID
		}
	})})
	child := worker.HandlerFunc(func(ctx context.Context, j *worker.Job) worker.Result {
		if string(j.Envelope.Payload) == "fail" {
			return worker.Result{Outcome: worker.DeadLetter, Reason: "no page"}
		}
		return worker.Result{Output: append([]byte("rendered "), j.Envelope.Payload...)}
	})
	ctx := context.Background()
	for _, m := range mods {
		if err := w.Register(ctx, host.NewHandler(m, nil).Queue()); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range childQueues {
		if err := w.Register(ctx, worker.Queue{Name: q, Handler: child}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stop, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if err := w.Stop(stop); err != nil {
			t.Errorf("worker stop: %v", err)
		}
		r.b.Close(ctx)
	})
	return r
}

// publish publishes payload to queue and waits until that job acks; it returns the
// job's id and its settled runs, in order.
func (r *waitRig) publish(queue, payload string) (string, []worker.Event) {
	r.t.Helper()
	env := backend.NewEnvelope(queue, []byte(payload))
	if err := r.b.Publish(context.Background(), env, 0); err != nil {
		r.t.Fatal(err)
	}
	timeout := time.After(time.Minute)
	for {
		select {
		case id := <-r.done:
			if id != env.ID {
				continue
			}
			r.mu.Lock()
			defer r.mu.Unlock()
			return env.ID, slices.Clone(r.runs[env.ID])
		case <-timeout:
			r.mu.Lock()
			defer r.mu.Unlock()
			r.t.Fatalf("job %s did not ack within a minute; its runs: %+v", env.ID, r.runs[env.ID])
			return "", nil
		}
	}
}

// TestFanInEndToEnd: the Go SDK's parent waits twice, then acks. Each run is at
// attempt 1; round 1 reads the four children of round 0 (three rendered, one dead with
// its reason), round 2 those of round 1, under other ids.
func TestFanInEndToEnd(t *testing.T) {
	t.Parallel()
	for _, wb := range waitBackends {
		t.Run(wb.name, func(t *testing.T) {
			t.Parallel()
			testFanIn(t, wb.open(t))
		})
	}
}

func testFanIn(t *testing.T, b backend.Backend) {
	e := newEngine(t)
	m := loadModule(t, e, "conformance", guestModule(t, "go-conformance"), host.Manifest{Queue: "parents", MaxAttempts: 5})
	r := newWaitRig(t, b, []string{"child"}, m)
	id, runs := r.publish("parents", "rounds")
	var settles []string
	for _, ev := range runs {
		settles = append(settles, ev.Settle.String())
	}
	if strings.Join(settles, " ") != "wait wait ack" {
		t.Fatalf("the parent settled %v, want wait, wait, ack", settles)
	}
	pages := []string{"page-0", "page-1", "page-2", "fail"}
	seen := map[string]int{}
	for round, ev := range runs {
		if ev.Job.Attempt != 1 || ev.Job.Round != round {
			t.Fatalf("run %d: attempt %d round %d, want attempt 1 round %d", round, ev.Job.Attempt, ev.Job.Round, round)
		}
		want := []string{fmt.Sprintf("round %d", round)}
		if round > 0 {
			for i, page := range pages {
				cid := backend.ChildID(id, round-1, i, "child", []byte(page))
				if r, ok := seen[cid]; ok {
					t.Fatalf("round %d's child %d has the id %s of a child of round %d", round-1, i, cid, r)
				}
				seen[cid] = round - 1
				if page == "fail" {
					want = append(want, cid+"|dead|no page|")
				} else {
					want = append(want, cid+"|succeeded||rendered "+page)
				}
			}
		}
		if got := strings.TrimSuffix(string(ev.Result.Output), "\n"); got != strings.Join(want, "\n") {
			t.Errorf("run %d wrote\n%s\nwant\n%s", round, got, strings.Join(want, "\n"))
		}
	}
}

// TestFanOutExampleEndToEnd: the README's TypeScript example renders each page as an
// awaited child and joins their outputs when it runs again.
func TestFanOutExampleEndToEnd(t *testing.T) {
	t.Parallel()
	e := newEngine(t)
	man, err := host.ParseManifest("fanout-ts.toml", mustRead(t, "../examples/fanout-ts/fanout-ts.toml"))
	if err != nil {
		t.Fatal(err)
	}
	m := loadModule(t, e, "fanout-ts", guestModule(t, "fanout-ts"), man)
	r := newWaitRig(t, memory.New(memory.Config{}), []string{"render"}, m)
	_, runs := r.publish(m.Queue(), `{"pages": ["intro", "body", "outro"]}`)
	if len(runs) != 2 || runs[0].Settle != worker.Wait || runs[1].Job.Round != 1 || runs[1].Job.Attempt != 1 {
		t.Fatalf("runs %+v, want a wait then a resumed run at attempt 1, round 1", runs)
	}
	if got := string(runs[1].Result.Output); got != "rendered intro\nrendered body\nrendered outro" {
		t.Fatalf("the resumed run wrote %q", got)
	}
}
