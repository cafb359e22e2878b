package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/wasmjobs/wasmjobs/host"
	"github.com/wasmjobs/wasmjobs/internal/bench"
)

func newBenchCommand(g *globals) *cobra.Command {
	var (
		cfg                   bench.Config
		native, json_, cmpNat bool
		cmpRaw                bool
		isolation, payload    string
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
--payload).`,
		Example: `  wasmjobs bench --module testdata/abi/ack.wasm --compare-native
  wasmjobs bench --backend pebble --module testdata/abi/ack.wasm --jobs 200000 --concurrency 64
  wasmjobs bench --module build/guests/c-conformance.wasm --payload ack --isolation fresh --jobs 20000
  wasmjobs bench --backend amqp://guest:guest@127.0.0.1:5672/ --module testdata/abi/ack.wasm --compare-raw-amqp --json`,
		Args: argsBetween(0, 0),
		RunE: func(cmd *cobra.Command, args []string) error {
			if native == (cfg.Module != "") {
				return usagef("give either --module M.wasm or --native")
			}
			switch isolation {
			case "pooled":
				cfg.Isolation = host.Pooled
			case "fresh":
				cfg.Isolation = host.Fresh
			default:
				return usagef("--isolation %q: want pooled or fresh", isolation)
			}
			if cfg.Backend != "memory" && cfg.Backend != "pebble" && !isAMQP(cfg.Backend) {
				return usagef("--backend %q: want memory, pebble or an amqp:// URL", cfg.Backend)
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
			if cfg.Jobs < 0 || cfg.Concurrency < 0 || cfg.PayloadSize < 0 {
				return usagef("--jobs, --concurrency and --payload-size must not be negative")
			}
			if cmd.Flags().Changed("payload") {
				cfg.Payload = []byte(payload)
			}
			cfg.CacheDir = g.cacheDir
			ctx := cmd.Context()
			res, err := bench.Run(ctx, cfg)
			if err != nil {
				return err
			}
			switch {
			case cmpNat:
				base := cfg
				base.Module = "" // the same jobs, payload included, on the native handler
				nat, err := bench.Run(ctx, base)
				if err != nil {
					return fmt.Errorf("the native baseline: %w", err)
				}
				res.Compare("native", nat.JobsPerSec)
			case cmpRaw:
				rate, err := bench.RawAMQP(ctx, cfg)
				if err != nil {
					return fmt.Errorf("the bare amqp091-go loop: %w", err)
				}
				res.Compare("raw-amqp", rate)
			}
			if json_ {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(res)
			}
			w := cmd.OutOrStdout()
			what := "native no-op handler"
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
			fmt.Fprintf(w, "  %.3f CPU s per 1,000 jobs, peak RSS %.0f MB\n", res.CPUSPer1k, res.PeakRSSMB)
			if res.Baseline != nil {
				fmt.Fprintf(w, "  %s baseline: %.0f jobs/s; ratio %.2f\n", res.Baseline.Kind, res.Baseline.JobsPerSec, *res.Ratio)
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&cfg.Backend, "backend", "memory", "memory, pebble or an amqp:// URL")
	fl.Float64Var(&cfg.Rate, "rate", 0, "publish at most this many jobs a second, for latency at a moderate load (default: as fast as they go)")
	fl.BoolVar(&cfg.InsertFirst, "insert-first", false, "publish every job before the worker starts and time the work alone (River's bench -n shape)")
	fl.StringVar(&cfg.DataDir, "data-dir", "", "the pebble backend's data directory (default: a temporary one, removed after the run)")
	fl.StringVar(&cfg.Module, "module", "", "the module to run each job on")
	fl.BoolVar(&native, "native", false, "run a native Go no-op handler instead of a module")
	fl.IntVar(&cfg.Jobs, "jobs", 0, "jobs to run (default 100000, 10000 on RabbitMQ)")
	fl.IntVar(&cfg.Concurrency, "concurrency", 16, "the worker's concurrency")
	fl.IntVar(&cfg.PayloadSize, "payload-size", 64, "payload bytes per job")
	fl.StringVar(&payload, "payload", "", "every job's payload (instead of --payload-size letters)")
	fl.StringVar(&isolation, "isolation", "pooled", "pooled or fresh instances")
	fl.BoolVar(&cmpNat, "compare-native", false, "also run the native no-op handler and print the ratio")
	fl.BoolVar(&cmpRaw, "compare-raw-amqp", false, "also run a bare amqp091-go loop on the broker and print the ratio")
	fl.BoolVar(&json_, "json", false, "print one JSON object")
	return cmd
}
