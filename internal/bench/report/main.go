// Command report runs the benchmark matrix of `make bench` and writes BENCHMARKS.md from
// scratch: every figure in it comes from this run. It expects `make guests` to have
// built the guest modules, and measures RabbitMQ when WASMJOBS_AMQP_URL is set.
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/memory"
	"github.com/wasmjobs/wasmjobs/host"
	"github.com/wasmjobs/wasmjobs/internal/abitest"
	"github.com/wasmjobs/wasmjobs/internal/bench"
	"github.com/wasmjobs/wasmjobs/worker"
)

type row struct {
	what, command string
	res           bench.Result
	note          string
}

func main() {
	ctx := context.Background()
	out := "BENCHMARKS.md"
	if len(os.Args) > 1 {
		out = os.Args[1]
	}
	ack := filepath.Join(abitest.Dir(), "abi", "ack.wasm")
	guest := func(name string) string {
		p, ok := abitest.Guest(name)
		if !ok {
			log.Fatalf("%s.wasm is not built: run make guests first", name)
		}
		return p
	}
	var rows []row
	add := func(what, command string, cfg bench.Config, compareNative bool) bench.Result {
		log.Printf("running: %s", what)
		res, err := bench.Run(ctx, cfg)
		if err != nil {
			log.Fatalf("%s: %v", what, err)
		}
		if compareNative {
			base := cfg
			base.Module, base.Payload = "", nil
			nat, err := bench.Run(ctx, base)
			if err != nil {
				log.Fatalf("%s, native baseline: %v", what, err)
			}
			res.Compare("native", nat.JobsPerSec)
		}
		rows = append(rows, row{what: what, command: command, res: res})
		return res
	}
	add("native Go no-op handler", "wasmjobs bench --native", bench.Config{}, false)
	add("WAT no-op, pooled", "wasmjobs bench --module testdata/abi/ack.wasm --compare-native",
		bench.Config{Module: ack}, true)
	add("WAT no-op, fresh instance per job", "wasmjobs bench --module testdata/abi/ack.wasm --isolation fresh --jobs 20000",
		bench.Config{Module: ack, Isolation: host.Fresh, Jobs: 20_000}, false)
	add("C no-op, fresh instance per job", "wasmjobs bench --module build/guests/c-conformance.wasm --payload ack --isolation fresh --jobs 20000",
		bench.Config{Module: guest("c-conformance"), Payload: []byte("ack"), Isolation: host.Fresh, Jobs: 20_000}, false)
	for _, lang := range abitest.Languages {
		add(lang+" SDK no-op (conformance \"ack\"), pooled",
			fmt.Sprintf("wasmjobs bench --module build/guests/%s-conformance.wasm --payload ack --compare-native", lang),
			bench.Config{Module: guest(lang + "-conformance"), Payload: []byte("ack")}, true)
	}
	if url := os.Getenv("WASMJOBS_AMQP_URL"); url != "" {
		// The worker's prefetch is its concurrency (nothing claimed beyond what it can
		// run): 64 matches the bare loop's 64 unconfirmed publishes and prefetch 100 best.
		res := add("RabbitMQ, WAT no-op, pooled, concurrency 64", "wasmjobs bench --backend $WASMJOBS_AMQP_URL --module testdata/abi/ack.wasm --concurrency 64 --jobs 20000 --compare-raw-amqp",
			bench.Config{Backend: url, Module: ack, Concurrency: 64, Jobs: 20_000}, false)
		raw, err := bench.RawAMQP(ctx, url, res.Jobs, 64)
		if err != nil {
			log.Fatal(err)
		}
		rows[len(rows)-1].res.Compare("raw-amqp", raw)
	}

	cold, warm := goColdStart(ctx, guest("go-conformance"))
	swaps := swapLatency(ctx)

	var b strings.Builder
	fmt.Fprintf(&b, "# Benchmarks\n\nWritten by `make bench` (internal/bench/report) on %s; every figure below comes from that run.\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(&b, "Machine: %d cores (%s), %s, %s/%s. Times on it are noisy: compare ratios from one run.\n\n", runtime.NumCPU(), cpuModel(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
	b.WriteString("Each row publishes its jobs while the worker (concurrency 16 unless said) runs them; latency is enqueue to settle, so it includes the queue a saturating publisher builds. The bare amqp091-go loop publishes with 64 confirms outstanding and consumes with prefetch 100 and an ack each.\n\n")
	b.WriteString("| what | jobs | jobs/s | p50 ms | p90 ms | p99 ms | CPU s / 1k | peak RSS MB | baseline | ratio |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		base, ratio := "-", "-"
		if r.res.Baseline != nil {
			base, ratio = fmt.Sprintf("%s %.0f/s", r.res.Baseline.Kind, r.res.Baseline.JobsPerSec), fmt.Sprintf("%.2f", *r.res.Ratio)
		}
		fmt.Fprintf(&b, "| %s | %d | %.0f | %.1f | %.1f | %.1f | %.4f | %.0f | %s | %s |\n", r.what, r.res.Jobs, r.res.JobsPerSec,
			r.res.P50Ms, r.res.P90Ms, r.res.P99Ms, r.res.CPUSPer1k, r.res.PeakRSSMB, base, ratio)
	}
	b.WriteString("\nCommands:\n\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "- %s: `%s`\n", r.what, r.command)
	}
	fmt.Fprintf(&b, "\n## Go guest cold start\n\nThe Go conformance module (%.1f MB), compiled and initialised by a new engine, as a restarted host would (median of 5):\n\n", fileMB(guest("go-conformance")))
	fmt.Fprintf(&b, "| cache | ready in |\n|---|---|\n| none | %v |\n| warm on-disk compilation cache | %v |\n", cold.Round(time.Millisecond), warm.Round(time.Millisecond))
	fmt.Fprintf(&b, "\n## Hot swap\n\nA module replaced by renaming a new file into the watched directory while jobs flow, %d times: from the rename to the first job settled on the new version: p50 %v, p99 %v.\n",
		len(swaps), swaps[len(swaps)/2].Round(time.Millisecond), swaps[len(swaps)*99/100].Round(time.Millisecond))
	b.WriteString(riverSection(ctx, riverShapes()))
	if os.Getenv("WASMJOBS_AMQP_URL") == "" {
		b.WriteString("\nRabbitMQ rows are missing: WASMJOBS_AMQP_URL was not set (`export WASMJOBS_AMQP_URL=$(scripts/rabbitmq.sh start)`).\n")
	}
	if err := os.WriteFile(out, []byte(b.String()), 0o644); err != nil {
		log.Fatal(err)
	}
	log.Printf("wrote %s", out)
}

func cpuModel() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "model name"); ok {
			return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
		}
	}
	return "unknown CPU"
}

func fileMB(path string) float64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return float64(fi.Size()) / (1 << 20)
}

// goColdStart measures a new engine loading the Go module, without and with a warm cache.
func goColdStart(ctx context.Context, path string) (cold, warm time.Duration) {
	wasm, err := os.ReadFile(path)
	if err != nil {
		log.Fatal(err)
	}
	dir, _ := os.MkdirTemp("", "wasmjobs-bench-cache-")
	defer os.RemoveAll(dir)
	load := func(cfg host.Config) time.Duration {
		start := time.Now()
		e, err := host.NewEngine(ctx, cfg)
		if err != nil {
			log.Fatal(err)
		}
		m, err := e.Load(ctx, "go", wasm, host.Manifest{})
		if err != nil {
			log.Fatal(err)
		}
		took := time.Since(start)
		m.Retire()
		e.Close(ctx)
		return took
	}
	median := func(f func() time.Duration) time.Duration {
		var ds []time.Duration
		for range 5 {
			ds = append(ds, f())
		}
		slices.Sort(ds)
		return ds[2]
	}
	cold = median(func() time.Duration { return load(host.Config{NoCache: true}) })
	load(host.Config{CacheDir: dir}) // fill the cache
	warm = median(func() time.Duration { return load(host.Config{CacheDir: dir}) })
	return cold, warm
}

// swapLatency swaps a module 20 times under a trickle of jobs and measures each rename
// to the first job settled on the new version.
func swapLatency(ctx context.Context) []time.Duration {
	dir, _ := os.MkdirTemp("", "wasmjobs-bench-swap-")
	defer os.RemoveAll(dir)
	ack, err := os.ReadFile(filepath.Join(abitest.Dir(), "abi", "ack.wasm"))
	if err != nil {
		log.Fatal(err)
	}
	variant := func(i int) []byte {
		tag := fmt.Sprintf("v%d", i)
		sec := append([]byte{4}, "swap"...)
		sec = append(sec, tag...)
		return append(append(slices.Clone(ack), 0, byte(len(sec))), sec...)
	}
	write := func(data []byte) time.Time {
		tmp := filepath.Join(dir, ".tmp")
		os.WriteFile(tmp, data, 0o644)
		at := time.Now()
		os.Rename(tmp, filepath.Join(dir, "svc.wasm"))
		return at
	}
	b := memory.New(memory.Config{})
	defer b.Close(ctx)
	first := make(chan worker.Event, 1024)
	w := worker.New(b, worker.Config{Observer: worker.ObserverFunc(func(e worker.Event) {
		if e.Kind == worker.EventSettled {
			select {
			case first <- e:
			default:
			}
		}
	})})
	e, err := host.NewEngine(ctx, host.Config{NoCache: true})
	if err != nil {
		log.Fatal(err)
	}
	defer e.Close(ctx)
	write(variant(0))
	reg, err := host.NewRegistry(host.RegistryConfig{Dir: dir, Engine: e, Queues: w})
	if err != nil {
		log.Fatal(err)
	}
	reg.Start(ctx)
	defer reg.Close()
	w.Start(ctx)
	defer w.Stop(ctx)
	stop := make(chan struct{})
	go func() { // a trickle of jobs: one a millisecond
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
				b.Publish(ctx, backend.NewEnvelope("svc", nil), 0)
			}
		}
	}()
	defer close(stop)
	var lat []time.Duration
	for i := 1; i <= 20; i++ {
		data := variant(i)
		at := write(data)
		want := host.Version(data)
		for ev := range first {
			if ev.Result.Version == want {
				lat = append(lat, time.Since(at))
				break
			}
		}
	}
	slices.Sort(lat)
	return lat
}
