package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/wasmjobs/wasmjobs/backend/postgres"
	"github.com/wasmjobs/wasmjobs/host"
	"github.com/wasmjobs/wasmjobs/internal/tools/bench"
)

func newBenchCommand(g *globals) *cobra.Command {
	var (
		cfg                   bench.Config
		native, json_, cmpNat bool
		cmpRaw, cmpUntraced   bool
		isolation, payload    string
		cpuProfile            string
		swaps, rounds         int
		dagTasks, fanIn       int
	)
	cmd := &cobra.Command{
		Use:   "bench [--module M.wasm | --native]",
		Short: "Measure jobs per second and latency through the real worker and backend",
		Long: `bench publishes --jobs jobs while a worker of --concurrency runs them with the module
(or the native no-op handler), and reports jobs per second, enqueue-to-settle latency
(p50, p90, p99), CPU seconds per 1,000 jobs and the run's own peak RSS (measured before
any baseline runs). --compare-native runs the same jobs, payload included, on the native
no-op handler in the same invocation and prints the ratio; --compare-raw-amqp runs a bare
amqp091-go loop on the same broker that does the worker's work without it: as many
publishers, confirms waited and checked, persistent messages, the worker's prefetch and
as many consumers acking as its concurrency, every error and nack counted. Every job
must succeed: give a module that acks (a payload it takes as a no-op can be set with
--payload). On a shared, noisy machine, --rounds N repeats the pair N times, the
baseline first in every other round, and reports each round's ratio and their median.

--swaps N measures hot swaps instead: the module (which must ack an empty payload) is
renamed into a watched directory N times, each time with a new custom section, while
jobs flow on the memory backend (one a millisecond), and each swap's latency from the
rename to the first job settled on the new version is reported by percentile with its
parts: the watcher's event, the wait before the read (debounce), the load, the first
job. Any job that does not ack fails the run.`,
		Example: `  wasmjobs bench --module testdata/abi/ack.wasm --compare-native
  wasmjobs bench --backend pebble --module testdata/abi/ack.wasm --jobs 200000 --concurrency 64
  wasmjobs bench --module build/guests/c-conformance.wasm --payload ack --isolation fresh --jobs 20000
  wasmjobs bench --backend amqp://guest:guest@127.0.0.1:5672/ --module testdata/abi/ack.wasm --compare-raw-amqp --json
  wasmjobs bench --backend amqp://guest:guest@127.0.0.1:5672/ --module testdata/abi/ack.wasm --concurrency 64 --jobs 20000 --compare-raw-amqp --rounds 5
  wasmjobs bench --module testdata/abi/ack.wasm --swaps 500
  wasmjobs bench --backend pebble --module build/guests/c-conformance.wasm --http-delay 50ms --concurrency 256 --insert-first --compare-native`,
		Args: argsBetween(0, 0),
		RunE: func(cmd *cobra.Command, args []string) error {
			if native == (cfg.Module != "") {
				return usagef("give either --module M.wasm or --native")
			}
			if cmd.Flags().Changed("swaps") {
				return benchSwaps(cmd, cfg.Module, swaps, json_)
			}
			if cmd.Flags().Changed("fan-in") {
				return benchFanIn(cmd, bench.FanInConfig{Backend: cfg.Backend, DataDir: cfg.DataDir, Module: cfg.Module, Children: fanIn,
					Concurrency: cfg.Concurrency, CacheDir: g.cacheDir}, rounds, json_, cpuProfile)
			}
			if cmd.Flags().Changed("dag") {
				return benchDAG(cmd, cfg.Module, dagTasks, rounds, json_)
			}
			switch isolation {
			case "pooled":
				cfg.Isolation = host.Pooled
			case "fresh":
				cfg.Isolation = host.Fresh
			default:
				return usagef("--isolation %q: want pooled or fresh", isolation)
			}
			if cfg.Backend != "memory" && cfg.Backend != "pebble" && !isAMQP(cfg.Backend) && !postgres.IsURL(cfg.Backend) {
				return usagef("--backend %q: want memory, pebble, an amqp:// URL or a postgres:// URL", cfg.Backend)
			}
			if cfg.DataDir != "" && cfg.Backend != "pebble" {
				return usagef("--data-dir is for --backend pebble")
			}
			if cmpRaw && !isAMQP(cfg.Backend) {
				return usagef("--compare-raw-amqp needs --backend amqp://...")
			}
			if cfg.Rate < 0 || (cfg.Rate > 0 && cfg.InsertFirst) {
				return usagef("--rate: want a positive rate, and not with --insert-first")
			}
			if cfg.PublishBatch < 0 || (cfg.PublishBatch > 0 && (cfg.Rate > 0 || cfg.Trace || cfg.HTTPDelay > 0 || (cfg.Backend != "pebble" && !postgres.IsURL(cfg.Backend)))) {
				return usagef("--publish-batch: want a positive batch size, on pebble or postgres (the backends with a batch publish), and not with --rate, --trace or --http-delay")
			}
			if cfg.Jobs < 0 || cfg.Concurrency < 0 || cfg.PayloadSize < 0 {
				return usagef("--jobs, --concurrency and --payload-size must not be negative")
			}
			if cmd.Flags().Changed("payload") {
				cfg.Payload = []byte(payload)
			}
			if cmpUntraced && (!cfg.Trace || cmpNat || cmpRaw) {
				return usagef("--compare-untraced goes with --trace, and not with another baseline")
			}
			if rounds < 1 || (rounds > 1 && !cmpNat && !cmpRaw && !cmpUntraced) {
				return usagef("--rounds: want 1 or more, and more than 1 only with --compare-native, --compare-raw-amqp or --compare-untraced")
			}
			cfg.CacheDir = g.cacheDir
			ctx := cmd.Context()
			stop, err := startProfile(cpuProfile)
			if err != nil {
				return err
			}
			defer stop()
			res, err := benchRounds(ctx, cfg, rounds, cmpNat, cmpRaw, cmpUntraced)
			if err != nil {
				return err
			}
			if json_ {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(res)
			}
			w := cmd.OutOrStdout()
			what := "native no-op handler"
			if cfg.HTTPDelay > 0 {
				what = "native Go GET handler"
			}
			if cfg.Module != "" {
				what = cfg.Module + " (" + isolation + ")"
			}
			fmt.Fprintf(w, "%d jobs of %s on %s at concurrency %d\n", res.Jobs, what, redact(cfg.Backend), max(cfg.Concurrency, 16))
			if cfg.InsertFirst {
				fmt.Fprintf(w, "  (inserted first; the work alone is timed)\n")
			}
			fmt.Fprintf(w, "  %.0f jobs/s in %.2f s\n", res.JobsPerSec, res.Seconds)
			switch {
			case cfg.InsertFirst:
				// Every job waited behind the whole backlog: not a latency anyone sees.
				fmt.Fprintf(w, "  wait behind the backlog, then run: p50 %.2f ms, p90 %.2f ms, p99 %.2f ms (not a latency)\n", res.P50Ms, res.P90Ms, res.P99Ms)
			case cfg.Rate > 0:
				fmt.Fprintf(w, "  scheduled enqueue to settle: p50 %.2f ms, p90 %.2f ms, p99 %.2f ms\n", res.P50Ms, res.P90Ms, res.P99Ms)
			default:
				fmt.Fprintf(w, "  enqueue to settle: p50 %.2f ms, p90 %.2f ms, p99 %.2f ms\n", res.P50Ms, res.P90Ms, res.P99Ms)
			}
			per := "call"
			if cfg.PublishBatch > 0 {
				per = fmt.Sprintf("batch of %d", cfg.PublishBatch)
			}
			fmt.Fprintf(w, "  publish, per %s: p50 %.2f ms, p99 %.2f ms\n", per, res.PublishP50Ms, res.PublishP99Ms)
			fmt.Fprintf(w, "  %.3f CPU s per 1,000 jobs, peak RSS %.0f MB\n", res.CPUSPer1k, res.PeakRSSMB)
			if cfg.Trace {
				fmt.Fprintf(w, "  traced: %d spans received by the loopback OTLP receiver, %d dropped\n", res.Spans, res.DroppedSpans)
			}
			if cfg.HTTPDelay > 0 {
				ideal := float64(max(cfg.Concurrency, 16)) / cfg.HTTPDelay.Seconds()
				fmt.Fprintf(w, "  one GET a job to a server answering after %v: %.0f%% of the ideal %.0f jobs/s; RSS %.0f KB per job in flight\n",
					cfg.HTTPDelay, 100*res.JobsPerSec/ideal, ideal, res.RSSPerJobKB)
			}
			if res.Baseline != nil {
				fmt.Fprintf(w, "  %s baseline: %.0f jobs/s; ratio %.2f\n", res.Baseline.Kind, res.Baseline.JobsPerSec, *res.Ratio)
			}
			if len(res.Rounds) > 1 {
				ratios := make([]string, len(res.Rounds))
				for i, r := range res.Rounds {
					first := "run first"
					if r.BaselineFirst {
						first = "baseline first"
					}
					fmt.Fprintf(w, "  round %d (%s): %.0f jobs/s, baseline %.0f jobs/s, ratio %.2f\n", i+1, first, r.JobsPerSec, r.BaselineJobsPerSec, r.Ratio)
					ratios[i] = fmt.Sprintf("%.2f", r.Ratio)
				}
				fmt.Fprintf(w, "  ratios %s; median %.2f (the figures above are the median round's)\n", strings.Join(ratios, " "), *res.Ratio)
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&cfg.Backend, "backend", "memory", "memory, pebble, an amqp:// URL (a fresh run's queues) or a postgres:// URL (a schema of the run's own, dropped after it)")
	fl.Float64Var(&cfg.Rate, "rate", 0, "publish at most this many jobs a second, for latency at a moderate load (default: as fast as they go)")
	fl.IntVar(&cfg.PublishBatch, "publish-batch", 0, "publish the jobs in batches of this many from one publisher, through the backend's batch path (River's bench inserts 5,000 a batch); 0: one job a call from several publishers")
	fl.BoolVar(&cfg.InsertFirst, "insert-first", false, "publish every job before the worker starts and time the work alone (River's bench -n shape)")
	fl.IntVar(&cfg.Records.MaxCount, "records-max", 0, "finished job records the pebble or postgres backend keeps, as run's --records-max (default: the backend's, 100000; -1 keeps none)")
	fl.StringVar(&cfg.DataDir, "data-dir", "", "the pebble backend's data directory (default: a temporary one, removed after the run)")
	fl.StringVar(&cfg.Module, "module", "", "the module to run each job on")
	fl.BoolVar(&native, "native", false, "run a native Go no-op handler instead of a module")
	fl.IntVar(&cfg.Jobs, "jobs", 0, "jobs to run (default 100000, 10000 on RabbitMQ)")
	fl.IntVar(&cfg.Concurrency, "concurrency", 16, "the worker's concurrency")
	fl.DurationVar(&cfg.HTTPDelay, "http-delay", 0, "make each job one GET to a loopback server answering after this long (a module runs the conformance case http-get:URL under a loopback grant; --native and --compare-native make the same GET)")
	fl.IntVar(&cfg.PayloadSize, "payload-size", 64, "payload bytes per job")
	fl.StringVar(&payload, "payload", "", "every job's payload (instead of --payload-size letters)")
	fl.StringVar(&isolation, "isolation", "pooled", "pooled or fresh instances")
	fl.BoolVar(&cmpNat, "compare-native", false, "also run the native no-op handler and print the ratio")
	fl.BoolVar(&cmpRaw, "compare-raw-amqp", false, "also run a bare amqp091-go loop on the broker and print the ratio")
	fl.BoolVar(&cfg.Trace, "trace", false, "trace the run end to end (every span sampled) and export the spans over OTLP/HTTP to a loopback receiver that counts them")
	fl.BoolVar(&cmpUntraced, "compare-untraced", false, "with --trace: also run the same jobs untraced and print the ratio (traced over untraced)")
	fl.IntVar(&rounds, "rounds", 1, "with a baseline: run and baseline this many times, alternating which goes first, and report each ratio and the median")
	fl.BoolVar(&json_, "json", false, "print one JSON object")
	fl.StringVar(&cpuProfile, "cpu-profile", "", "write a CPU profile of the run (and its baseline) to this file, for go tool pprof")
	fl.IntVar(&swaps, "swaps", 0, "measure this many hot swaps of the module instead (with --module, and --json only)")
	fl.IntVar(&fanIn, "fan-in", 0, "measure fan-in instead: a parent module (--module testdata/abi/fanout_n.wasm) waits for this many children, against as many independent jobs published as one batch (with --backend memory or pebble, --data-dir, --concurrency, --rounds, --json)")
	fl.IntVar(&dagTasks, "dag", 0, "measure how long POST /v1/workflows of a workflow of this many tasks takes to be accepted on pebble instead (with --module serving the queue, --rounds, and --json only)")
	return cmd
}

// swapPart is one part of the swaps' latency by percentile, as --swaps --json prints it.
type swapPart struct {
	Part  string  `json:"part"`
	P50Ms float64 `json:"p50_ms"`
	P90Ms float64 `json:"p90_ms"`
	P99Ms float64 `json:"p99_ms"`
	MaxMs float64 `json:"max_ms"`
}

// benchFanIn runs `bench --fan-in`: rounds rounds of a fan-in against a batch, and the
// median of their ratios.
func benchFanIn(cmd *cobra.Command, cfg bench.FanInConfig, rounds int, asJSON bool, cpuProfile string) error {
	if cfg.Children <= 0 || rounds <= 0 {
		return usagef("--fan-in %d --rounds %d: want a positive number of children and rounds", cfg.Children, rounds)
	}
	if err := onlyFlags(cmd, "fan-in", "module", "backend", "data-dir", "concurrency", "rounds", "json", "cpu-profile"); err != nil {
		return err
	}
	stop, err := startProfile(cpuProfile)
	if err != nil {
		return err
	}
	defer stop()
	if !cmd.Flags().Changed("backend") {
		cfg.Backend = "pebble"
	}
	if !cmd.Flags().Changed("concurrency") {
		cfg.Concurrency = 64
	}
	if !cmd.Flags().Changed("rounds") {
		rounds = 5
	}
	res, err := bench.FanIn(cmd.Context(), cfg, rounds)
	if err != nil {
		return err
	}
	ratios := make([]float64, len(res))
	for i, r := range res {
		ratios[i] = r.Ratio()
	}
	sorted := slices.Sorted(slices.Values(ratios))
	median := sorted[len(sorted)/2]
	if len(sorted)%2 == 0 {
		median = (sorted[len(sorted)/2-1] + median) / 2
	}
	if asJSON {
		return json.NewEncoder(cmd.OutOrStdout()).Encode(struct {
			Rounds      []bench.FanInResult `json:"rounds"`
			MedianRatio float64             `json:"median_ratio"`
		}{res, median})
	}
	w := cmd.OutOrStdout()
	fmt.Fprintf(w, "fan-in of %d children on %s at concurrency %d: from the parent's WAIT to its resumed run, against %d jobs published as one batch until the last settled\n",
		cfg.Children, cfg.Backend, cfg.Concurrency, cfg.Children)
	for i, r := range res {
		first := "fan-in first"
		if r.BatchFirst {
			first = "batch first"
		}
		fmt.Fprintf(w, "  round %d (%s): fan-in %.1f ms, batch %.1f ms, ratio %.2f\n", i+1, first,
			float64(r.FanIn)/float64(time.Millisecond), float64(r.Batch)/float64(time.Millisecond), r.Ratio())
	}
	fmt.Fprintf(w, "  median ratio %.2f\n", median)
	return nil
}

// benchDAG runs `bench --dag`: rounds workflows of n tasks posted to a host on pebble.
func benchDAG(cmd *cobra.Command, module string, n, rounds int, asJSON bool) error {
	if n <= 0 || rounds <= 0 {
		return usagef("--dag %d --rounds %d: want a positive number of tasks and rounds", n, rounds)
	}
	if err := onlyFlags(cmd, "dag", "module", "rounds", "json"); err != nil {
		return err
	}
	if !cmd.Flags().Changed("rounds") {
		rounds = 5
	}
	times, err := bench.DAG(cmd.Context(), bench.DAGConfig{Module: module, Tasks: n, Rounds: rounds})
	if err != nil {
		return err
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	all := make([]float64, len(times))
	for i, d := range times {
		all[i] = ms(d)
	}
	if asJSON {
		return json.NewEncoder(cmd.OutOrStdout()).Encode(struct {
			Tasks    int       `json:"tasks"`
			MedianMs float64   `json:"median_ms"`
			RoundsMs []float64 `json:"rounds_ms"`
		}{n, ms(bench.Median(times)), all})
	}
	fmt.Fprintf(cmd.OutOrStdout(), "a workflow of %d tasks (each after two earlier ones) accepted by POST /v1/workflows on pebble in %.1f ms (median of %d; rounds %v ms)\n",
		n, ms(bench.Median(times)), len(times), all)
	return nil
}

// startProfile writes a CPU profile to path (none when it is empty) until stop.
func startProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpu-profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpu-profile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// onlyFlags refuses bench's own flags other than allowed.
func onlyFlags(cmd *cobra.Command, allowed ...string) error {
	var other []string
	own := cmd.LocalNonPersistentFlags() // bench's own flags, not the global ones
	cmd.Flags().Visit(func(f *pflag.Flag) {
		if own.Lookup(f.Name) != nil && !slices.Contains(allowed, f.Name) {
			other = append(other, "--"+f.Name)
		}
	})
	if len(other) > 0 {
		with := make([]string, len(allowed)-1)
		for i, f := range allowed[1:] {
			with[i] = "--" + f
		}
		list := strings.Join(with, ", ")
		if n := len(with); n > 1 {
			list = strings.Join(with[:n-1], ", ") + " and " + with[n-1]
		}
		return usagef("--%s takes only %s, not %s", allowed[0], list, strings.Join(other, ", "))
	}
	return nil
}

// benchSwaps runs `bench --swaps`: n hot swaps of module while jobs flow.
func benchSwaps(cmd *cobra.Command, module string, n int, asJSON bool) error {
	if n <= 0 {
		return usagef("--swaps %d: want a positive number of swaps", n)
	}
	if err := onlyFlags(cmd, "swaps", "module", "json"); err != nil {
		return err
	}
	swaps, err := bench.Swaps(cmd.Context(), bench.SwapConfig{Module: module, Swaps: n})
	if err != nil {
		return err
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	parts := make([]swapPart, 0, len(bench.SwapParts))
	for _, p := range bench.SwapParts {
		at := func(q float64) float64 { return ms(bench.SwapPercentile(swaps, p.Of, q)) }
		parts = append(parts, swapPart{Part: p.Name, P50Ms: at(0.5), P90Ms: at(0.9), P99Ms: at(0.99), MaxMs: at(1)})
	}
	if asJSON {
		return json.NewEncoder(cmd.OutOrStdout()).Encode(struct {
			Swaps int        `json:"swaps"`
			Parts []swapPart `json:"parts"`
		}{len(swaps), parts})
	}
	w := cmd.OutOrStdout()
	fmt.Fprintf(w, "%d hot swaps of %s, each renamed into the watched directory while jobs flow (one a millisecond); no job failed\n", len(swaps), module)
	fmt.Fprintf(w, "  %-20s %9s %9s %9s %9s\n", "ms", "p50", "p90", "p99", "max")
	for _, p := range parts {
		fmt.Fprintf(w, "  %-20s %9.2f %9.2f %9.2f %9.2f\n", p.Part, p.P50Ms, p.P90Ms, p.P99Ms, p.MaxMs)
	}
	return nil
}

// benchRounds runs cfg and, when asked, its baseline, rounds times, the baseline first
// in every other round (so that a machine growing busier or quieter during the rounds
// does not favour one side). It returns the round of the median ratio, with every
// round's figures in Rounds.
func benchRounds(ctx context.Context, cfg bench.Config, rounds int, cmpNat, cmpRaw, cmpUntraced bool) (bench.Result, error) {
	baseline := func() (string, float64, error) {
		switch {
		case cmpNat:
			base := cfg
			base.Module = "" // the same jobs, payload included, on the native handler
			nat, err := bench.Run(ctx, base)
			if err != nil {
				return "", 0, fmt.Errorf("the native baseline: %w", err)
			}
			return "native", nat.JobsPerSec, nil
		case cmpUntraced:
			base := cfg
			base.Trace = false
			plain, err := bench.Run(ctx, base)
			if err != nil {
				return "", 0, fmt.Errorf("the untraced baseline: %w", err)
			}
			return "untraced", plain.JobsPerSec, nil
		case cmpRaw:
			rate, err := bench.RawAMQP(ctx, cfg)
			if err != nil {
				return "", 0, fmt.Errorf("the bare amqp091-go loop: %w", err)
			}
			return "raw-amqp", rate, nil
		}
		return "", 0, nil
	}
	var results []bench.Result
	var all []bench.Round
	for i := range rounds {
		var (
			res       bench.Result
			kind      string
			rate      float64
			err       error
			firstBase = i%2 == 1
			run       = func() error { res, err = bench.Run(ctx, cfg); return err }
			base      = func() error { kind, rate, err = baseline(); return err }
		)
		order := []func() error{run, base}
		if firstBase {
			order[0], order[1] = order[1], order[0]
		}
		for _, f := range order {
			if err := f(); err != nil {
				return bench.Result{}, err
			}
		}
		if kind == "" {
			return res, nil
		}
		res.Compare(kind, rate)
		results = append(results, res)
		all = append(all, bench.Round{JobsPerSec: res.JobsPerSec, BaselineJobsPerSec: rate, Ratio: *res.Ratio, BaselineFirst: firstBase})
	}
	// The median round (the lower middle of an even count).
	idx := make([]int, len(results))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return cmp.Compare(*results[a].Ratio, *results[b].Ratio) })
	med := results[idx[(len(idx)-1)/2]]
	if len(all) > 1 {
		med.Rounds = all
	}
	return med, nil
}
