// Command report runs the benchmark matrix of `make bench` and writes its sections of
// BENCHMARKS.md in place: each one between its own pair of generated-section markers,
// every figure in it from this run, and the rest of the file (the sections measured by
// hand) kept as it was. Each row is a `wasmjobs bench --json` child process of its own,
// so that its peak RSS is its own. It expects `make guests` to have built the guest
// modules, and measures RabbitMQ when WASMJOBS_AMQP_URL is set.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/wasmjobs/wasmjobs/host"
	"github.com/wasmjobs/wasmjobs/internal/rigs/abitest"
	"github.com/wasmjobs/wasmjobs/internal/tools/bench"
)

type row struct {
	what string
	args []string // the wasmjobs command line, without --json
	res  bench.Result
}

// command is the row's command line as BENCHMARKS.md shows it.
func (r row) command(url string) string {
	s := "wasmjobs " + strings.Join(r.args, " ")
	if url != "" {
		s = strings.ReplaceAll(s, url, "$WASMJOBS_AMQP_URL")
	}
	return s
}

// runRow runs `wasmjobs ARGS --json` as a child process of its own, so that its peak
// RSS is its own and no earlier row's, and decodes the result.
func runRow(ctx context.Context, bin string, args []string) (bench.Result, error) {
	cmd := exec.CommandContext(ctx, bin, append(slices.Clone(args), "--json")...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return bench.Result{}, fmt.Errorf("wasmjobs %s: %w\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	var res bench.Result
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		return bench.Result{}, fmt.Errorf("wasmjobs %s: decoding its JSON: %w: %s", strings.Join(args, " "), err, stdout.Bytes())
	}
	if !res.PeakRSSOwn {
		return bench.Result{}, fmt.Errorf("wasmjobs %s: its peak RSS is not its own run's (no /proc/self/clear_refs?)", strings.Join(args, " "))
	}
	return res, nil
}

// buildWasmjobs builds the wasmjobs command into dir.
func buildWasmjobs(ctx context.Context, dir string) (string, error) {
	goCmd := os.Getenv("GO")
	if goCmd == "" {
		goCmd = "go"
	}
	bin := filepath.Join(dir, "wasmjobs")
	cmd := exec.CommandContext(ctx, goCmd, "build", "-o", bin, "./cmd/wasmjobs")
	cmd.Dir = filepath.Join(abitest.Dir(), "..")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building wasmjobs: %w\n%s", err, out)
	}
	return bin, nil
}

func main() {
	ctx := context.Background()
	bin := flag.String("bin", "", "the wasmjobs binary to run each row with (default: build one)")
	jobs := flag.Int("jobs", 0, "run every row with this many jobs instead of its own count (a quick check of the report; not for BENCHMARKS.md)")
	nswaps := flag.Int("swaps", 200, "hot swaps to measure")
	httpOnly := flag.Bool("http", false, "run only the outbound HTTP rows and replace their section of the file in place")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: report [flags] [BENCHMARKS.md]\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	out := "BENCHMARKS.md"
	if flag.NArg() > 0 {
		out = flag.Arg(0)
	}
	if *bin == "" {
		dir, err := os.MkdirTemp("", "wasmjobs-bench-")
		if err != nil {
			log.Fatal(err)
		}
		defer os.RemoveAll(dir)
		if *bin, err = buildWasmjobs(ctx, dir); err != nil {
			log.Fatal(err)
		}
	}
	rel := func(p string) string {
		if r, err := filepath.Rel(filepath.Join(abitest.Dir(), ".."), p); err == nil {
			return r
		}
		return p
	}
	ack := filepath.Join(abitest.Dir(), "abi", "ack.wasm")
	guest := func(name string) string {
		p, ok := abitest.Guest(name)
		if !ok {
			log.Fatalf("%s.wasm is not built: run make guests first", name)
		}
		return p
	}
	// Paths are relative to the repository, where the report runs.
	if err := os.Chdir(filepath.Join(abitest.Dir(), "..")); err != nil {
		log.Fatal(err)
	}
	// A file whose markers are wrong fails now, not after the whole matrix has run.
	if _, err := readSections(out); err != nil {
		log.Fatal(err)
	}
	if *httpOnly {
		n := 100_000
		if *jobs > 0 {
			n = *jobs
		}
		section := httpSection(ctx, *bin, []httpGuest{
			{"native Go handler (net/http)", ""},
			{"C guest (SDK)", rel(guest("c-conformance"))},
			{"Rust guest (SDK)", rel(guest("rust-conformance"))},
			{"Go guest (SDK, net/http)", rel(guest("go-conformance"))},
			{"TypeScript guest (fetch)", rel(guest("typescript-conformance"))},
		}, n)
		if err := writeSections(out, map[string]string{sectionHTTP: section}); err != nil {
			log.Fatal(err)
		}
		log.Printf("wrote the outbound HTTP section of %s", out)
		return
	}
	var rows []row
	add := func(what string, jobCount int, args ...string) {
		if *jobs > 0 {
			jobCount = *jobs
		}
		if jobCount > 0 {
			args = append(args, "--jobs", strconv.Itoa(jobCount))
		}
		r := row{what: what, args: args}
		log.Printf("running: %s", r.command(""))
		res, err := runRow(ctx, *bin, args)
		if err != nil {
			log.Fatalf("%s: %v", what, err)
		}
		r.res = res
		rows = append(rows, r)
	}
	add("native Go no-op handler", 0, "bench", "--native")
	add("WAT no-op, pooled", 0, "bench", "--module", rel(ack), "--compare-native")
	add("WAT no-op, pooled, served (wasmjobs_serve)", 0, "bench", "--module", rel(filepath.Join(abitest.Dir(), "abi", "ack_serve.wasm")), "--compare-native")
	add("WAT no-op, fresh instance per job", 20_000, "bench", "--module", rel(ack), "--isolation", "fresh")
	add("C no-op, fresh instance per job", 20_000, "bench", "--module", rel(guest("c-conformance")), "--payload", "ack", "--isolation", "fresh")
	for _, lang := range abitest.Languages {
		add(lang+" SDK no-op (conformance \"ack\"), pooled", 0,
			"bench", "--module", rel(guest(lang+"-conformance")), "--payload", "ack", "--compare-native")
	}
	// A JS handler runs in a QuickJS VM inside its instance: a fresh one per job pays the
	// engine's start and the bundle's evaluation; the JSON handler parses an order
	// (guest-sdk/javascript/bench/json.ts).
	add("TypeScript no-op, fresh VM per job", 5_000, "bench", "--module", rel(guest("typescript-conformance")), "--payload", "ack", "--isolation", "fresh")
	add("TypeScript JSON handler (parse and check an order, write a summary), pooled", 0,
		"bench", "--module", rel(guest("typescript-json")), "--payload", orderPayload, "--compare-native")
	// The durable default, in a temporary data directory of its own per row, in River's
	// two shapes: jobs published while they are worked, and all published first.
	add("Pebble (durable default), WAT no-op, pooled, concurrency 64", 200_000,
		"bench", "--backend", "pebble", "--module", rel(ack), "--concurrency", "64")
	add("Pebble, inserted first then worked, WAT no-op, pooled, concurrency 64", 200_000,
		"bench", "--backend", "pebble", "--module", rel(ack), "--concurrency", "64", "--insert-first")
	add("Pebble, paced at 1,000 jobs/s (latency at a moderate rate), WAT no-op, pooled, concurrency 64", 20_000,
		"bench", "--backend", "pebble", "--module", rel(ack), "--concurrency", "64", "--rate", "1000")
	url := os.Getenv("WASMJOBS_AMQP_URL")
	if url != "" {
		// The worker's prefetch is its concurrency (nothing claimed beyond what it can
		// run); the bare loop uses the same prefetch, publishers and consumers. One pair
		// on a shared broker and machine varies by a factor of two: five rounds, the
		// baseline first in every other, and the median's.
		add("RabbitMQ, WAT no-op, pooled, concurrency 64 (median of 5 rounds)", 20_000,
			"bench", "--backend", url, "--module", rel(ack), "--concurrency", "64", "--compare-raw-amqp", "--rounds", "5")
	}

	cold, warm := goColdStart(ctx, guest("go-conformance"))
	swaps, err := bench.Swaps(ctx, bench.SwapConfig{Module: ack, Swaps: *nswaps})
	if err != nil {
		log.Fatalf("hot swaps: %v", err)
	}

	// The outbound HTTP section is make bench-http's: this run leaves it as it is.
	sections := map[string]string{
		sectionMatrix:    matrixSection(rows, url, *jobs),
		sectionColdStart: coldStartSection(fileMB(guest("go-conformance")), cold, warm),
		sectionHotSwap:   swapSection(swaps),
		sectionRiver:     riverSection(ctx, riverShapes()),
	}
	if err := writeSections(out, sections); err != nil {
		log.Fatal(err)
	}
	log.Printf("wrote %s", out)
}

// matrixSection is the file's title and intro, the matrix's table of rows and their
// commands, and a note when the RabbitMQ rows could not run (url empty).
func matrixSection(rows []row, url string, jobs int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Benchmarks\n\nThe sections between `<!-- generated:NAME -->` markers are written by `make bench` (internal/tools/bench/report) on %s, every figure in them from that run (the outbound HTTP one by `make bench-http`); a run replaces them in place and keeps the rest, the sections measured by hand, as they are.\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	if jobs > 0 {
		fmt.Fprintf(&b, "**A quick check, not a measurement: every row ran %d jobs (`-jobs %d`).**\n\n", jobs, jobs)
	}
	fmt.Fprintf(&b, "Machine: %d cores (%s), %s, %s/%s. Times on it are noisy: compare ratios from one run.\n\n", runtime.NumCPU(), cpuModel(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
	b.WriteString("Each row is its own `wasmjobs bench` process (the command below), so its peak RSS is its own: the resident high-water mark of the row's run, before any baseline runs. ")
	b.WriteString("Each row publishes its jobs while the worker (concurrency 16 unless said) runs them; latency is enqueue to settle, so it includes the queue a saturating publisher builds. ")
	b.WriteString("A native baseline runs the same jobs, with the same payload, on a native no-op handler in the same process after the row. ")
	b.WriteString("The bare amqp091-go baseline does the worker's work without it: as many publishers (64) on one confirm channel, each message persistent and mandatory with its confirm waited and checked, the worker's prefetch and as many consumers acking as its concurrency; any error, nack or return fails the run.\n\n")
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
		fmt.Fprintf(&b, "- %s: `%s`\n", r.what, r.command(url))
	}
	if url == "" {
		b.WriteString("\nRabbitMQ rows are missing: WASMJOBS_AMQP_URL was not set (`export WASMJOBS_AMQP_URL=$(scripts/rabbitmq.sh start)`).\n")
	}
	return b.String()
}

// coldStartSection gives the Go module's (of mb MB) time to ready, without a cache and
// with a warm one.
func coldStartSection(mb float64, cold, warm time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "## Go guest cold start\n\nThe Go conformance module (%.1f MB), compiled and initialised by a new engine, as a restarted host would (median of 5):\n\n", mb)
	fmt.Fprintf(&b, "| cache | ready in |\n|---|---|\n| none | %v |\n| warm on-disk compilation cache | %v |\n", cold.Round(time.Millisecond), warm.Round(time.Millisecond))
	return b.String()
}

// swapSection describes the hot swaps: the total and each part, by percentile.
func swapSection(swaps []bench.Swap) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n## Hot swap\n\nA module (testdata/abi/ack.wasm with a new custom section each time) replaced %d times by renaming a new file into the watched directory, while jobs flow (one a millisecond, memory backend, debounce %v), as `wasmjobs bench --module testdata/abi/ack.wasm --swaps %d` does. ", len(swaps), host.DefaultDebounce, len(swaps))
	b.WriteString("Each swap's latency runs from the rename to the first job settled on the new version, and splits into: the watcher's event reaching the registry; the debounce (the wait before the read: a file renamed into place, or written and closed, is read at once; the debounce runs out only where the registry cannot tell that the change is finished, so that a file being written is read once, whole); the load (read, validate, compile, initialise); and the first job on the new version.\n\n")
	b.WriteString("| part | p50 | p90 | p99 | max |\n|---|---|---|---|---|\n")
	for _, p := range bench.SwapParts {
		f := func(q float64) string { return fmtDuration(bench.SwapPercentile(swaps, p.Of, q)) }
		name := p.Name
		if name == bench.SwapParts[len(bench.SwapParts)-1].Name {
			name = "**" + name + "**"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", name, f(0.5), f(0.9), f(0.99), f(1))
	}
	b.WriteString("\nPercentiles by nearest rank; the parts' percentiles do not add up to the total's.\n")
	return b.String()
}

func fmtDuration(d time.Duration) string {
	if d < time.Millisecond {
		return d.Round(time.Microsecond).String()
	}
	return d.Round(100 * time.Microsecond).String()
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

// orderPayload is the order the TypeScript JSON handler's row runs on.
const orderPayload = `{"id":"A-1042","email":"ada@example.com","name":"Ada","currency":"EUR","items":[{"sku":"KB-1","name":"Keyboard","qty":1,"cents":4999},{"sku":"CBL","name":"USB cable","qty":3,"cents":450},{"sku":"MS-2","name":"Mouse","qty":1,"cents":2599}]}`
