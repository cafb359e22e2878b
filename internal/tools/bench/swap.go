package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/memory"
	"github.com/wasmjobs/wasmjobs/host"
	"github.com/wasmjobs/wasmjobs/worker"
)

// SwapConfig is a run of hot swaps.
type SwapConfig struct {
	// Module is the .wasm file swapped in again and again, each time with a new custom
	// section so that its version changes. It must ack an empty payload.
	Module string
	// Swaps is how many swaps to measure. Zero means 200.
	Swaps int
	// Debounce is the registry's debounce. Zero means host.DefaultDebounce.
	Debounce time.Duration
}

// Swap is one hot swap's latency, from the rename of the new file into the watched
// directory to the first job settled on the new version, and its parts, which add up
// to it.
type Swap struct {
	// Total is from the rename to the first job settled on the new version.
	Total time.Duration `json:"total"`
	// Event is from the rename to the watcher's event reaching the registry.
	Event time.Duration `json:"event"`
	// Debounce is from that event to the registry's read of the file: a millisecond
	// that groups the events of one change, and a look at whether the file is finished
	// (renamed in, closed by its writer); the whole debounce only when it could not
	// tell.
	Debounce time.Duration `json:"debounce"`
	// Load is reading, validating, compiling and initialising the new version.
	Load time.Duration `json:"load"`
	// FirstJob is from the new version being put in place to the first job settled
	// on it, under a trickle of one job a millisecond.
	FirstJob time.Duration `json:"first_job"`
}

// Swaps swaps cfg.Module into a watched directory cfg.Swaps times while jobs flow (one
// a millisecond, on the memory backend) and measures each swap. It returns the swaps
// in the order they were made, or an error if any job did not ack: a swap must fail
// no job.
func Swaps(ctx context.Context, cfg SwapConfig) ([]Swap, error) {
	if cfg.Swaps <= 0 {
		cfg.Swaps = 200
	}
	wasm, err := os.ReadFile(cfg.Module)
	if err != nil {
		return nil, err
	}
	root, err := os.MkdirTemp("", "wasmjobs-bench-swap-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(root)
	// New versions are written beside the watched directory and renamed into it, so
	// that the rename is the only event the watcher sees.
	dir, staging := filepath.Join(root, "modules"), filepath.Join(root, "staging")
	for _, d := range []string{dir, staging} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return nil, err
		}
	}
	variant := func(i int) []byte {
		sec := append([]byte{4}, "swap"...)
		sec = append(sec, fmt.Sprintf("v%d", i)...)
		return append(append(slices.Clone(wasm), 0, byte(len(sec))), sec...)
	}
	write := func(data []byte) (time.Time, error) {
		tmp := filepath.Join(staging, "svc.wasm")
		if err := os.WriteFile(tmp, data, 0o644); err != nil {
			return time.Time{}, err
		}
		at := time.Now()
		return at, os.Rename(tmp, filepath.Join(dir, "svc.wasm"))
	}

	b := memory.New(memory.Config{})
	defer b.Close(context.Background())
	type settle struct {
		version string
		at      time.Time
	}
	settled := make(chan settle, 4096)
	var failed atomic.Pointer[string] // the first job that did not ack
	w := worker.New(b, worker.Config{Observer: worker.ObserverFunc(func(e worker.Event) {
		if e.Kind == worker.EventSettleFailed || (e.Kind == worker.EventSettled && e.Settle != worker.Ack) {
			why := fmt.Sprintf("job %s on version %.12s settled %s (outcome %v)", e.Job.Envelope.ID, e.Result.Version, e.Settle, e.Result.Outcome)
			failed.CompareAndSwap(nil, &why)
		}
		if e.Kind == worker.EventSettled {
			select {
			case settled <- settle{e.Result.Version, time.Now()}:
			default: // only the first settle on each version matters
			}
		}
	})})
	e, err := host.NewEngine(ctx, host.Config{NoCache: true})
	if err != nil {
		return nil, err
	}
	defer e.Close(context.Background())
	if _, err := write(variant(0)); err != nil {
		return nil, err
	}
	swapped := make(chan host.RegistryEvent, 16)
	// The swap itself is measured: every job on the new version at once, no canary.
	reg, err := host.NewRegistry(host.RegistryConfig{Dir: dir, Engine: e, Queues: w, Debounce: cfg.Debounce, Rescan: time.Hour,
		Rollout: host.Rollout{Strategy: host.StrategyImmediate},
		OnEvent: func(ev host.RegistryEvent) {
			if ev.Kind == "swapped" || ev.Kind == "rejected" {
				swapped <- ev
			}
		}})
	if err != nil {
		return nil, err
	}
	if err := reg.Start(ctx); err != nil {
		return nil, err
	}
	defer reg.Close()
	if err := w.Start(ctx); err != nil {
		return nil, err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		w.Stop(stopCtx)
	}()
	trickleCtx, stopTrickle := context.WithCancel(ctx)
	defer stopTrickle()
	go func() { // a trickle of jobs: one a millisecond
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-trickleCtx.Done():
				return
			case <-tick.C:
				b.Publish(trickleCtx, backend.NewEnvelope("svc", nil), 0)
			}
		}
	}()
	timeout := func() <-chan time.Time { return time.After(time.Minute) }
	var swaps []Swap
	for i := 1; i <= cfg.Swaps; i++ {
		data := variant(i)
		renamed, err := write(data)
		if err != nil {
			return nil, err
		}
		var ev host.RegistryEvent
		select {
		case ev = <-swapped:
		case <-timeout():
			return nil, fmt.Errorf("swap %d: no swap within a minute", i)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if ev.Kind != "swapped" || ev.Version != host.Version(data) {
			return nil, fmt.Errorf("swap %d: the registry reported %s of version %s (error %v), want version %s swapped",
				i, ev.Kind, ev.Version, ev.Err, host.Version(data))
		}
		if ev.Noticed.IsZero() {
			return nil, errors.New("the registry's event has no Noticed time: was the swap found by a rescan?")
		}
		var first time.Time
		for first.IsZero() {
			select {
			case s := <-settled:
				if s.version == ev.Version {
					first = s.at
				}
			case <-timeout():
				return nil, fmt.Errorf("swap %d: no job settled on the new version within a minute", i)
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		if why := failed.Load(); why != nil {
			return nil, fmt.Errorf("swap %d: a job failed: %s", i, *why)
		}
		swaps = append(swaps, Swap{
			Total:    first.Sub(renamed),
			Event:    ev.Noticed.Sub(renamed),
			Debounce: ev.Read.Sub(ev.Noticed),
			Load:     ev.At.Sub(ev.Read),
			FirstJob: first.Sub(ev.At),
		})
	}
	return swaps, nil
}

// SwapPercentile returns the p-th percentile (0 < p <= 1) of a part of swaps, by
// nearest rank.
func SwapPercentile(swaps []Swap, part func(Swap) time.Duration, p float64) time.Duration {
	if len(swaps) == 0 {
		return 0
	}
	ds := make([]time.Duration, len(swaps))
	for i, s := range swaps {
		ds[i] = part(s)
	}
	slices.Sort(ds)
	rank := int(p*float64(len(ds))+0.999999) - 1
	return ds[min(max(rank, 0), len(ds)-1)]
}

// SwapParts names the parts of a swap's latency in the order they happen, with the
// total last, as reports show them.
var SwapParts = []struct {
	Name string
	Of   func(Swap) time.Duration
}{
	{"watcher event", func(s Swap) time.Duration { return s.Event }},
	{"debounce", func(s Swap) time.Duration { return s.Debounce }},
	{"load", func(s Swap) time.Duration { return s.Load }},
	{"first job", func(s Swap) time.Duration { return s.FirstJob }},
	{"rename to first job", func(s Swap) time.Duration { return s.Total }},
}
