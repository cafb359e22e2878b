package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/internal/bench"
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
