package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/wasmjobs/wasmjobs/internal/tools/bench/measure"
)

func TestArgsThatNameNoRunExitTwo(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no shape", []string{"--database-url", "postgres:///x"}, "exactly one of -n"},
		{"both shapes", []string{"--database-url", "postgres:///x", "-n", "10", "--duration", "1s"}, "exactly one of -n"},
		{"negative jobs", []string{"--database-url", "postgres:///x", "-n", "-1", "--duration", "1s"}, "exactly one of -n"},
		{"no database", []string{"-n", "10", "--database-url", ""}, "no database"},
		{"stray argument", []string{"-n", "10", "--database-url", "postgres:///x", "extra"}, `unexpected argument "extra"`},
		{"unknown flag", []string{"--workers", "10"}, "flag provided but not defined"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var out, errOut bytes.Buffer
			if code := run(context.Background(), tc.args, &out, &errOut); code != 2 {
				t.Errorf("exit code %d, want 2 (stderr %q)", code, errOut.String())
			}
			if !strings.Contains(errOut.String(), tc.want) {
				t.Errorf("stderr %q does not say %q", errOut.String(), tc.want)
			}
		})
	}
}

func TestPostgresTicksCountsOnlyPostgresWithReapedChildren(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// utime 100, stime 50, cutime 30, cstime 20: 200 ticks.
	tail := " S 1 1 1 0 -1 4194560 100 0 0 0 100 50 30 20 20 0 1 0 100 1000 100 18446744073709551615"
	for _, tc := range []struct {
		comm   string
		want   float64
		wantOK bool
	}{
		{"postgres", 200, true},
		{"postgres (x)", 0, false}, // a comm with a space and a paren is not postgres
		{"postgres-exporter", 0, false},
		{"bash", 0, false},
	} {
		path := filepath.Join(dir, "stat")
		if err := os.WriteFile(path, []byte("4242 ("+tc.comm+")"+tail), 0o644); err != nil {
			t.Fatal(err)
		}
		got, ok := postgresTicks(path)
		if got != tc.want || ok != tc.wantOK {
			t.Errorf("comm %q: got %v, %v, want %v, %v", tc.comm, got, ok, tc.want, tc.wantOK)
		}
	}
}

// TestBothShapesWorkEveryJobOnPostgres runs each shape briefly against the Postgres in
// WASMJOBS_PG_URL (scripts/postgres.sh start); without it the test is skipped.
func TestBothShapesWorkEveryJobOnPostgres(t *testing.T) {
	url := os.Getenv("WASMJOBS_PG_URL")
	if url == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("WASMJOBS_PG_URL is not set: CI must start Postgres with scripts/postgres.sh start")
		}
		t.Skip("WASMJOBS_PG_URL is not set: export WASMJOBS_PG_URL=$(scripts/postgres.sh start)")
	}
	defer goleak.VerifyNone(t)
	ctx := context.Background()

	var out, errOut bytes.Buffer
	if code := run(ctx, []string{"-n", "12000", "--json", "--database-url", url}, &out, &errOut); code != 0 {
		t.Fatalf("-n 12000: exit %d: %s", code, errOut.String())
	}
	var res measure.RiverResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("-n 12000 --json printed %q: %v", out.String(), err)
	}
	// 12,000 is two full batches and a short one.
	if res.JobsInserted != 12000 || res.JobsWorked != 12000 || res.JobsPerSec <= 0 || res.Seconds <= 0 {
		t.Errorf("-n 12000: %+v, want 12000 inserted and worked at a positive rate", res)
	}
	if res.ClientCPUS <= 0 || res.PostgresCPUS <= 0 || res.JobsPerCPUS <= 0 {
		t.Errorf("-n 12000: %+v, want the CPU of the client and of Postgres", res)
	}
	if res.RiverVersion != "v0.51.2" && res.RiverVersion != "unknown" { // unknown under go test's build info
		t.Errorf("river version %q", res.RiverVersion)
	}

	// The HTTP shape: 2,000 jobs, each a GET answered after 50 ms, by 100 workers: at
	// most 2,000 jobs/s, so at least a second; the latencies and memory are reported.
	res, err := Run(ctx, Config{DatabaseURL: url, Jobs: 2000, MaxWorkers: 100, HTTPDelay: 50 * time.Millisecond})
	if err != nil {
		t.Fatalf("-n 2000 --http-delay 50ms: %v", err)
	}
	if res.JobsWorked != 2000 || res.MaxWorkers != 100 || res.Seconds < 1 || res.P50Ms < 50 || res.P99Ms < res.P50Ms || res.PeakRSSMB <= 0 || res.HTTPDelayMs != 50 {
		t.Errorf("-n 2000 --http-delay 50ms --max-workers 100: %+v, want 2000 worked in at least 1 s, p50 >= 50 ms <= p99, a peak RSS", res)
	}

	res, err = Run(ctx, Config{DatabaseURL: url, Duration: 3 * time.Second})
	if err != nil {
		t.Fatalf("--duration 3s: %v", err)
	}
	if res.JobsInserted < backlog || res.JobsWorked <= 0 || res.JobsWorked > res.JobsInserted || res.Seconds > 3.5 {
		t.Errorf("--duration 3s: %+v, want a backlog of at least %d inserted and some worked within the 3 s", res, backlog)
	}
	if res.Shape != "--duration 3s" || res.MaxWorkers != 2000 || res.InsertMethod != "InsertMany" {
		t.Errorf("--duration 3s: %+v is not river bench's setup", res)
	}
}
