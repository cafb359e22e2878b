// Command riverpeer runs River (github.com/riverqueue/river) on PostgreSQL the way River's
// own `river bench` (v0.43.0 and later) does, so wasmjobs' benchmarks can put a figure for
// its best-known peer beside their own, measured on the same machine in the same run.
//
// River's CLI module is not served by the Go module proxy here; its library and pgx driver
// are, so this is a module of its own (River never enters wasmjobs' go.mod) that repeats
// what the bench command does with the library: 2,000 workers in the default queue, a 2 ms
// fetch cooldown and a 20 ms fetch poll, inserts in batches of 5,000 with InsertMany, a
// worker that does nothing, jobs counted as their completions come out of the client's
// event subscription, and the jobs table truncated and vacuumed before each run. It runs
// River's migrations first.
//
//	riverpeer -n 200000          insert 200,000 jobs, then start the client and time it
//	                             working them all
//	riverpeer --duration 30s     insert and work at once for 30 s, keeping about 75,000
//	                             jobs waiting
//
//	riverpeer -n 100000 --max-workers 256 --http-delay 50ms
//	                             the same, each job a GET to a loopback server that
//	                             answers after 50 ms (wasmjobs bench --http-delay)
//
// The database is --database-url, or WASMJOBS_PG_URL (scripts/postgres.sh start prints
// one). The figure is river bench's: jobs worked divided by the time from the client's
// start to the last job worked. --json prints the result as JSON instead of a line.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run parses args, runs the benchmark and prints its result; it returns the exit code.
func run(ctx context.Context, args []string, stdout, errOut io.Writer) int {
	fs := flag.NewFlagSet("riverpeer", flag.ContinueOnError)
	fs.SetOutput(errOut)
	var (
		cfg     Config
		asJSON  bool
		verbose bool
		debug   bool
	)
	fs.IntVar(&cfg.Jobs, "n", 0, "insert this many jobs, then time working them (river bench -n)")
	fs.IntVar(&cfg.Jobs, "num-total-jobs", 0, "same as -n")
	fs.DurationVar(&cfg.Duration, "duration", 0, "insert and work at once for this long (river bench --duration)")
	fs.StringVar(&cfg.DatabaseURL, "database-url", os.Getenv("WASMJOBS_PG_URL"), "Postgres URL (default $WASMJOBS_PG_URL)")
	fs.BoolVar(&cfg.Fast, "fast", false, "insert with InsertManyFast (COPY) instead of river bench's InsertMany")
	fs.IntVar(&cfg.MaxWorkers, "max-workers", 0, "the default queue's MaxWorkers (default river bench's 2,000)")
	fs.DurationVar(&cfg.HTTPDelay, "http-delay", 0, "work each job by a GET to a loopback server answering after this long (wasmjobs bench --http-delay)")
	fs.BoolVar(&asJSON, "json", false, "print the result as JSON")
	fs.BoolVar(&verbose, "v", false, "print progress every 2 s to stderr, as river bench does")
	fs.BoolVar(&debug, "debug", false, "log River's debug messages to stderr")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(errOut, "riverpeer: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if cfg.DatabaseURL == "" {
		fmt.Fprintln(errOut, "riverpeer: no database: set --database-url or WASMJOBS_PG_URL (scripts/postgres.sh start prints one)")
		return 2
	}
	if verbose {
		cfg.Progress = func(line string) { fmt.Fprintln(errOut, line) }
	}
	if debug {
		cfg.Logger = slog.New(slog.NewTextHandler(errOut, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	res, err := Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(errOut, err)
		if errors.Is(err, ErrConfig) {
			return 2
		}
		return 1
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			fmt.Fprintln(errOut, err)
			return 1
		}
		return 0
	}
	fmt.Fprintln(stdout, res.Line())
	return 0
}
