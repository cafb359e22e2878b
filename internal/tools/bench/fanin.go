package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/host"
	"github.com/wasmjobs/wasmjobs/worker"
)

// FanInConfig is a run of the fan-in benchmark.
type FanInConfig struct {
	// Backend is "memory" or "pebble" (the backends that keep waiting jobs); empty
	// means pebble. DataDir is pebble's, empty for a temporary one.
	Backend, DataDir string
	// Module is the parent: a module that, on its first run, stages as many awaited
	// children on the queue "child" as its manifest's max_children lets and settles
	// WAIT, and acks on its resumed run (testdata's abi/fanout_n).
	Module string
	// Children is the fan-out, the manifest's max_children; zero means 10,000.
	Children int
	// Concurrency is the worker's; zero means 64.
	Concurrency int
	// CacheDir is the engine's compilation cache; empty means none.
	CacheDir string
}

// FanInResult is one round: the fan-in, from the parent's WAIT (its handler's return,
// before the settle that publishes the children) to the start of its resumed run, and
// the same number of independent jobs published through the batch path (one
// PublishBatch) until the last one has settled, on the same backend and worker.
type FanInResult struct {
	Children int           `json:"children"`
	FanIn    time.Duration `json:"fan_in_ns"`
	Batch    time.Duration `json:"batch_ns"`
	// BatchFirst says the batch ran before the fan-in in this round.
	BatchFirst bool `json:"batch_first"`
}

// Ratio is the fan-in's time over the batch's.
func (r FanInResult) Ratio() float64 { return float64(r.FanIn) / float64(r.Batch) }

// FanIn runs rounds rounds of the fan-in benchmark on one backend and worker, each
// round both measurements, the batch first in every other round. The children and the
// batch's jobs run on one native no-op handler, so the two differ only in how their
// jobs are published and what waits for them.
func FanIn(ctx context.Context, cfg FanInConfig, rounds int) ([]FanInResult, error) {
	cfg.Children, cfg.Concurrency = cmp.Or(cfg.Children, 10_000), cmp.Or(cfg.Concurrency, 64)
	if cfg.Backend == "" {
		cfg.Backend = "pebble"
	}
	if cfg.Backend != "memory" && cfg.Backend != "pebble" {
		return nil, fmt.Errorf("fan-in: backend %q keeps no waiting jobs: want memory or pebble", cfg.Backend)
	}
	b, cleanup, err := openBackend(ctx, Config{Backend: cfg.Backend, DataDir: cfg.DataDir})
	if err != nil {
		return nil, err
	}
	defer cleanup()
	defer b.Close(context.Background())
	wasm, err := os.ReadFile(cfg.Module)
	if err != nil {
		return nil, err
	}
	e, err := host.NewEngine(ctx, host.Config{CacheDir: cfg.CacheDir, NoCache: cfg.CacheDir == ""})
	if err != nil {
		return nil, err
	}
	defer e.Close(context.Background())
	man, err := host.ParseManifest("fanin.toml", fmt.Appendf(nil, "queue = \"fanin\"\nmax_children = %d\n", cfg.Children))
	if err != nil {
		return nil, err
	}
	m, err := e.Load(ctx, "fanin", wasm, man)
	if err != nil {
		return nil, err
	}
	defer m.Retire()

	var (
		mu        sync.Mutex
		waitedAt  time.Time                 // the parent's handler returned WAIT
		resumed   = make(chan time.Time, 1) // its resumed run started
		settled   atomic.Int64              // batch jobs settled
		batchDone = make(chan time.Time, 1)
		batchN    atomic.Int64 // batch jobs to wait for; 0 while no batch runs
		failure   atomic.Pointer[string]
	)
	parent := host.NewHandler(m, nil)
	parentQueue := parent.Queue()
	inner := parentQueue.Handler
	parentQueue.Handler = worker.HandlerFunc(func(ctx context.Context, j *worker.Job) worker.Result {
		if j.Round > 0 {
			select {
			case resumed <- time.Now():
			default:
			}
		}
		res := inner.Handle(ctx, j)
		if res.Outcome == worker.Wait {
			mu.Lock()
			waitedAt = time.Now()
			mu.Unlock()
		}
		return res
	})
	w := worker.New(b, worker.Config{Concurrency: cfg.Concurrency, Observer: worker.ObserverFunc(func(ev worker.Event) {
		if ev.Kind == worker.EventSettleFailed || (ev.Kind == worker.EventSettled && ev.Settle != worker.Ack && ev.Settle != worker.Wait) {
			why := fmt.Sprintf("job %s of %s settled %s: %s", ev.Job.Envelope.ID, ev.Job.Envelope.Queue, ev.Settle, ev.Result.Reason)
			failure.CompareAndSwap(nil, &why)
		}
		if ev.Kind == worker.EventSettled && ev.Job.Envelope.Queue == "batch" {
			if n := batchN.Load(); n > 0 && settled.Add(1) == n {
				batchDone <- time.Now()
			}
		}
	})})
	ack := worker.HandlerFunc(func(context.Context, *worker.Job) worker.Result { return worker.Result{} })
	for _, q := range []worker.Queue{parentQueue, {Name: "child", Handler: ack}, {Name: "batch", Handler: ack}} {
		if err := w.Register(ctx, q); err != nil {
			return nil, err
		}
	}
	if err := w.Start(ctx); err != nil {
		return nil, err
	}
	defer w.Stop(context.Background())

	bp, ok := b.(backend.BatchPublisher)
	if !ok {
		return nil, fmt.Errorf("fan-in: %T publishes no batches", b)
	}
	wait := func(ch <-chan time.Time, what string) (time.Time, error) {
		deadline := time.Now().Add(5 * time.Minute)
		for {
			select {
			case at := <-ch:
				return at, nil
			case <-ctx.Done():
				return time.Time{}, ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
			if p := failure.Load(); p != nil {
				return time.Time{}, errors.New(*p)
			}
			if time.Now().After(deadline) {
				return time.Time{}, fmt.Errorf("fan-in: %s did not come within 5 minutes", what)
			}
		}
	}
	fanIn := func() (time.Duration, error) {
		if err := b.Publish(ctx, backend.NewEnvelope("fanin", nil), 0); err != nil {
			return 0, err
		}
		at, err := wait(resumed, "the parent's resumed run")
		if err != nil {
			return 0, err
		}
		mu.Lock()
		defer mu.Unlock()
		return at.Sub(waitedAt), nil
	}
	batch := func() (time.Duration, error) {
		pubs := make([]backend.Publication, cfg.Children)
		for i := range pubs {
			pubs[i] = backend.Publication{Envelope: backend.NewEnvelope("batch", []byte("x"))}
		}
		settled.Store(0)
		batchN.Store(int64(cfg.Children))
		defer batchN.Store(0)
		start := time.Now()
		if err := bp.PublishBatch(ctx, pubs); err != nil {
			return 0, err
		}
		at, err := wait(batchDone, "the batch's last settle")
		if err != nil {
			return 0, err
		}
		return at.Sub(start), nil
	}
	var out []FanInResult
	for i := range rounds {
		r := FanInResult{Children: cfg.Children, BatchFirst: i%2 == 1}
		steps := []func() error{
			func() (err error) { r.FanIn, err = fanIn(); return err },
			func() (err error) { r.Batch, err = batch(); return err },
		}
		if r.BatchFirst {
			steps[0], steps[1] = steps[1], steps[0]
		}
		for _, step := range steps {
			if err := step(); err != nil {
				return out, err
			}
		}
		out = append(out, r)
	}
	return out, nil
}
