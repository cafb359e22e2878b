package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/internal/tools/bench"
	"github.com/wasmjobs/wasmjobs/internal/tools/bench/measure"
)

// TestEachRowHasItsOwnPeak runs a row that needs a lot of memory and then one that needs
// little, as the report does: the second row's peak RSS must be its own, not the first
// row's repeated (as it was when every row ran in the report's process).
func TestEachRowHasItsOwnPeak(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	bin, err := buildWasmjobs(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// Jobs of 64 MB: the run's payload and the backend's copy of it are resident
	// together, 128 MB at the least.
	heavy, err := runRow(ctx, bin, []string{"bench", "--native", "--jobs", "4", "--payload-size", "67108864", "--concurrency", "1"})
	if err != nil {
		t.Fatal(err)
	}
	light, err := runRow(ctx, bin, []string{"bench", "--native", "--jobs", "1000"})
	if err != nil {
		t.Fatal(err)
	}
	if heavy.PeakRSSMB < 100 || light.PeakRSSMB <= 0 || light.PeakRSSMB > heavy.PeakRSSMB/2 {
		t.Fatalf("peak RSS: %.1f MB for the heavy row, %.1f MB for the light one after it: want each row's own", heavy.PeakRSSMB, light.PeakRSSMB)
	}
	t.Logf("peak RSS: heavy row %.0f MB, light row after it %.0f MB", heavy.PeakRSSMB, light.PeakRSSMB)
}

func TestRowCommandHidesTheBrokerURL(t *testing.T) {
	t.Parallel()
	url := "amqp://guest:guest@127.0.0.1:5682/"
	r := row{args: []string{"bench", "--backend", url, "--compare-raw-amqp"}}
	if got, want := r.command(url), "wasmjobs bench --backend $WASMJOBS_AMQP_URL --compare-raw-amqp"; got != want {
		t.Fatalf("command = %q, want %q", got, want)
	}
}

func TestSwapSectionShowsEveryPart(t *testing.T) {
	t.Parallel()
	var swaps []bench.Swap
	for i := range 200 {
		d := time.Duration(i+1) * time.Millisecond
		swaps = append(swaps, bench.Swap{Total: 4 * d, Event: d, Debounce: d, Load: d, FirstJob: d})
	}
	s := swapSection(swaps)
	for _, want := range []string{"replaced 200 times", "| watcher event | 100ms | 180ms | 198ms | 200ms |", "| debounce |", "| load |", "| first job |", "| **rename to first job** | 400ms | 720ms | 792ms | 800ms |"} {
		if !strings.Contains(s, want) {
			t.Fatalf("the hot swap section lacks %q:\n%s", want, s)
		}
	}
}

// TestHTTPSectionIsReplacedInPlace: make bench-http replaces its section and keeps the
// rest of the file; a file without one gets it appended; make bench keeps it.
func TestHTTPSectionIsReplacedInPlace(t *testing.T) {
	t.Parallel()
	section := func(s string) string {
		return "\n" + httpMarker + "\n## Outbound HTTP\n" + s + "\n" + httpMarker + "\n"
	}
	doc := "# Benchmarks\n\nrows\n" + section("old") + "\n## River\n"
	if got, want := spliceHTTPSection(doc, section("new")), "# Benchmarks\n\nrows\n"+section("new")+"\n## River\n"; got != want {
		t.Fatalf("replaced:\n%s\nwant:\n%s", got, want)
	}
	if got, want := spliceHTTPSection("# Benchmarks\n\nrows\n\n", section("new")), "# Benchmarks\n\nrows\n"+section("new"); got != want {
		t.Fatalf("appended:\n%q\nwant:\n%q", got, want)
	}
	if got := httpSectionOf(doc); got != section("old") {
		t.Fatalf("kept %q, want %q", got, section("old"))
	}
	if got := httpSectionOf("# Benchmarks\n" + httpMarker + " alone\n"); got != "" {
		t.Fatalf("a lone marker gave %q", got)
	}
}

// TestHTTPRowsAlternateAndCompare: each concurrency runs the other's order reversed,
// and the section gives each row its share of the ideal and its ratios to the native
// handler and to River at its concurrency.
func TestHTTPRowsAlternateAndCompare(t *testing.T) {
	t.Parallel()
	guests := []httpGuest{{"native", ""}, {"C", "c.wasm"}}
	names := func(o []*httpGuest) (s []string) {
		for _, g := range o {
			if g == nil {
				s = append(s, "river")
			} else {
				s = append(s, g.what)
			}
		}
		return s
	}
	if got := strings.Join(names(httpOrder(guests, 0)), ","); got != "native,C,river" {
		t.Fatalf("first order %s", got)
	}
	if got := strings.Join(names(httpOrder(guests, 1)), ","); got != "river,C,native" {
		t.Fatalf("second order %s", got)
	}
	rows := []httpRow{
		{concurrency: 256, what: "native Go handler", wasmjobs: &bench.Result{JobsPerSec: 5000}},
		{concurrency: 256, what: "C guest", wasmjobs: &bench.Result{JobsPerSec: 4608}},
		{concurrency: 256, what: "River", river: &measure.RiverResult{JobsPerSec: 2304}},
	}
	s := formatHTTPSection(rows, 100000, "0.5", "1.5", "")
	for _, want := range []string{"| 256 | C guest | 4608 | 90% |", "| 0.92 | 2.00 |", "| 256 | River | 2304 | 45% |", "load average 0.5 before, 1.5 after"} {
		if !strings.Contains(s, want) {
			t.Fatalf("the section lacks %q:\n%s", want, s)
		}
	}
}
