package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/wasmjobs/wasmjobs/internal/tools/bench"
	"github.com/wasmjobs/wasmjobs/internal/tools/bench/measure"
)

// httpDelay is how long the outbound HTTP rows' server takes to answer.
const httpDelay = 50 * time.Millisecond

// httpConcurrencies are the outbound HTTP rows' concurrencies.
var httpConcurrencies = []int{256, 1000}

// httpGuest is a guest of the outbound HTTP rows: a name, and the module (empty for the
// native handler).
type httpGuest struct{ what, module string }

// httpRow is one outbound HTTP row: wasmjobs (guest set) or River (river set).
type httpRow struct {
	concurrency int
	what        string
	command     string
	wasmjobs    *bench.Result
	river       *measure.RiverResult
}

func (r httpRow) jobsPerSec() float64 {
	if r.river != nil {
		return r.river.JobsPerSec
	}
	return r.wasmjobs.JobsPerSec
}

// httpOrder returns the guests and River (nil) in the order a concurrency runs them:
// reversed at every other concurrency, so that no side always goes first.
func httpOrder(guests []httpGuest, i int) []*httpGuest {
	order := make([]*httpGuest, 0, len(guests)+1)
	for j := range guests {
		order = append(order, &guests[j])
	}
	order = append(order, nil) // River
	if i%2 == 1 {
		for a, b := 0, len(order)-1; a < b; a, b = a+1, b-1 {
			order[a], order[b] = order[b], order[a]
		}
	}
	return order
}

// httpSection runs the outbound HTTP matrix: at each concurrency, jobs jobs each making
// one GET to a loopback server answering after 50 ms, on the durable default, inserted
// first (River's -n shape) for each guest and the native handler, and River on
// Postgres with the same GET and as many workers. It returns BENCHMARKS.md's section.
func httpSection(ctx context.Context, bin string, guests []httpGuest, jobs int) string {
	riverBin, pgURL, cleanup, riverNote := riverPeer(ctx)
	if cleanup != nil {
		defer cleanup()
	}
	load0 := loadAverage()
	var rows []httpRow
	for i, c := range httpConcurrencies {
		for _, g := range httpOrder(guests, i) {
			if g == nil {
				if riverNote != "" {
					continue
				}
				args := []string{"-n", strconv.Itoa(jobs), "--max-workers", strconv.Itoa(c), "--http-delay", httpDelay.String()}
				r, err := runRiver(ctx, riverBin, pgURL, args)
				if err != nil {
					log.Fatalf("River at concurrency %d: %v", c, err)
				}
				rows = append(rows, httpRow{concurrency: c, what: "River " + r.RiverVersion + " on Postgres, the same GET",
					command: "cd internal/tools/bench/riverpeer && go run . " + strings.Join(args, " "), river: &r})
				continue
			}
			args := []string{"bench", "--backend", "pebble", "--insert-first", "--http-delay", httpDelay.String(),
				"--concurrency", strconv.Itoa(c), "--jobs", strconv.Itoa(jobs)}
			if g.module == "" {
				args = append(args, "--native")
			} else {
				args = append(args, "--module", g.module)
			}
			log.Printf("running: wasmjobs %s", strings.Join(args, " "))
			res, err := runRow(ctx, bin, args)
			if err != nil {
				log.Fatalf("%s at concurrency %d: %v", g.what, c, err)
			}
			rows = append(rows, httpRow{concurrency: c, what: g.what, command: "wasmjobs " + strings.Join(args, " "), wasmjobs: &res})
		}
	}
	return formatHTTPSection(rows, jobs, load0, loadAverage(), riverNote)
}

// formatHTTPSection writes the rows as BENCHMARKS.md's outbound HTTP section, with each
// row's share of the ideal and its ratios to the native handler and to River at its
// concurrency.
func formatHTTPSection(rows []httpRow, jobs int, load0, load1, riverNote string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "## Outbound HTTP: one GET a job\n\nWritten by `make bench-http` (internal/tools/bench/report -http) on %s, on %d cores (%s); load average %s before, %s after. ",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), runtime.NumCPU(), cpuModel(), load0, load1)
	fmt.Fprintf(&b, "Each row is %d jobs, each one GET to a loopback server (in the row's process) that answers after %v, on the durable default (Pebble, a temporary data directory), every job inserted before the worker starts and the work alone timed (River's `-n` shape). ", jobs, httpDelay)
	b.WriteString("A module runs the conformance case `http-get:URL` under a grant of loopback: a GET, its status, headers and whole body read through its SDK; the native handler makes the same GET with net/http; River's worker too. Every client keeps as many idle connections as the concurrency. ")
	b.WriteString("The ideal is concurrency / 50 ms. p50 and p99 run from each job's insert to its settle, so they include the wait behind the whole backlog (not a latency a user sees). Peak RSS is the row's process (Postgres not counted for River); RSS per job is its growth over the run divided by the jobs in flight.\n\n")
	b.WriteString("| concurrency | what | jobs/s | of ideal | p50 ms | p99 ms | peak RSS MB | RSS KB per job in flight | vs native | vs River |\n|---|---|---|---|---|---|---|---|---|---|\n")
	base := map[string]float64{}
	for _, r := range rows {
		key := strconv.Itoa(r.concurrency)
		if r.river != nil {
			base[key+"river"] = r.river.JobsPerSec
		} else if strings.HasPrefix(r.what, "native") {
			base[key+"native"] = r.wasmjobs.JobsPerSec
		}
	}
	ratio := func(v float64, of string) string {
		if d := base[of]; d > 0 {
			return fmt.Sprintf("%.2f", v/d)
		}
		return "-"
	}
	for _, r := range rows {
		key := strconv.Itoa(r.concurrency)
		ideal := float64(r.concurrency) / httpDelay.Seconds()
		p50, p99, peak, per := 0.0, 0.0, 0.0, 0.0
		vsRiver := ratio(r.jobsPerSec(), key+"river")
		if r.river != nil {
			p50, p99, peak, per, vsRiver = r.river.P50Ms, r.river.P99Ms, r.river.PeakRSSMB, r.river.RSSPerJobKB, "-"
		} else {
			p50, p99, peak, per = r.wasmjobs.P50Ms, r.wasmjobs.P99Ms, r.wasmjobs.PeakRSSMB, r.wasmjobs.RSSPerJobKB
		}
		vsNative := ratio(r.jobsPerSec(), key+"native")
		if strings.HasPrefix(r.what, "native") {
			vsNative = "-"
		}
		fmt.Fprintf(&b, "| %d | %s | %.0f | %.0f%% | %.0f | %.0f | %.0f | %.0f | %s | %s |\n", r.concurrency, r.what, r.jobsPerSec(), 100*r.jobsPerSec()/ideal, p50, p99, peak, per, vsNative, vsRiver)
	}
	b.WriteString("\nCommands, in the order they ran (each concurrency's order is the other's reversed):\n\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "- %d, %s: `%s`\n", r.concurrency, r.what, r.command)
	}
	b.WriteString(riverNote)
	return b.String()
}

// loadAverage is the one-minute load average, as /proc/loadavg gives it.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "unknown"
	}
	return f[0]
}
