package bench

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/wasmjobs/wasmjobs/host"
	"github.com/wasmjobs/wasmjobs/internal/rigs/abitest"
	"github.com/wasmjobs/wasmjobs/internal/rigs/testbroker"
)

func TestRunMeasuresEveryJob(t *testing.T) {
	t.Parallel()
	ack := filepath.Join(abitest.Dir(), "abi", "ack.wasm")
	for _, cfg := range []Config{
		{Jobs: 2000},
		{Jobs: 2000, Module: ack},
		{Jobs: 500, Module: ack, Isolation: host.Fresh, Concurrency: 4, Payload: []byte("x")},
		{Jobs: 500, Module: ack, Backend: "pebble", DataDir: t.TempDir()},
		{Jobs: 500, Backend: "pebble", InsertFirst: true},
		{Jobs: 200, Backend: "pebble", Rate: 2000},
		{Jobs: 1000, Backend: "pebble", PublishBatch: 300},
	} {
		res, err := Run(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if res.Jobs != cfg.Jobs || res.JobsPerSec <= 0 || res.Seconds <= 0 || res.P50Ms > res.P90Ms || res.P90Ms > res.P99Ms ||
			res.CPUSPer1k <= 0 || res.Baseline != nil || res.PublishP50Ms <= 0 || res.PublishP50Ms > res.PublishP99Ms {
			t.Fatalf("%+v: %+v", cfg, res)
		}
		res.Compare("native", res.JobsPerSec*2)
		if *res.Ratio != 0.5 || res.Baseline.Kind != "native" {
			t.Fatalf("Compare: %+v", res)
		}
	}
}

// TestPeakRSSIsTheRunsOwn makes the process's peak far larger than a small run needs,
// then runs: the run's peak must be its own, below that earlier peak, and still what a
// Go process running the host really holds. Not parallel: a peak is per process.
func TestPeakRSSIsTheRunsOwn(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the resident high-water mark is reset through Linux's /proc")
	}
	// The ballast is mapped outside the Go heap, so that unmapping it returns it to the
	// OS at once (and the race detector does not shadow it).
	const ballastMB = 400
	ballast, err := syscall.Mmap(-1, 0, ballastMB<<20, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(ballast); i += 4096 {
		ballast[i] = 1 // resident, page by page
	}
	if before := peakRSSMB(); before < ballastMB {
		t.Fatalf("the ballast did not raise the peak: %.0f MB", before)
	}
	if err := syscall.Munmap(ballast); err != nil {
		t.Fatal(err)
	}
	res, err := Run(context.Background(), Config{Jobs: 2000, Module: filepath.Join(abitest.Dir(), "abi", "ack.wasm")})
	if err != nil {
		t.Fatal(err)
	}
	// A Go process with a wazero engine and 2,000 jobs in memory holds more than 8 MB;
	// it does not need the ballast's 400.
	if !res.PeakRSSOwn || res.PeakRSSMB < 8 || res.PeakRSSMB > ballastMB/2 {
		t.Fatalf("peak RSS %.1f MB (own %v), want this run's own peak, between 8 and %d MB", res.PeakRSSMB, res.PeakRSSOwn, ballastMB/2)
	}
	t.Logf("the run's own peak: %.1f MB after a %d MB peak of the process", res.PeakRSSMB, ballastMB)
}

func TestRunRefusesAModuleThatDoesNotAck(t *testing.T) {
	t.Parallel()
	_, err := Run(context.Background(), Config{Jobs: 50, Module: filepath.Join(abitest.Dir(), "abi", "retry.wasm")})
	if err == nil || !strings.Contains(err.Error(), "50 of 50 jobs did not succeed") {
		t.Fatalf("err = %v", err)
	}
	if _, err := Run(context.Background(), Config{Module: "/nope.wasm"}); err == nil {
		t.Fatal("a missing module was accepted")
	}
}

// TestRawAMQPChecksEveryConfirm runs the bare loop, then runs it on a queue that refuses
// every publish: the broker's nacks must fail it, not count as throughput.
func TestRawAMQPChecksEveryConfirm(t *testing.T) {
	t.Parallel()
	url := testbroker.URL(t)
	ctx := context.Background()
	cfg := Config{Backend: url, Jobs: 500, Concurrency: 8, Payload: []byte("ack")}
	rate, err := RawAMQP(ctx, cfg)
	if err != nil || rate <= 0 {
		t.Fatalf("RawAMQP = %v, %v", rate, err)
	}
	_, err = rawAMQP(ctx, cfg, amqp.Table{"x-max-length": int32(0), "x-overflow": "reject-publish"})
	if err == nil || !strings.Contains(err.Error(), "500 nacks") {
		t.Fatalf("RawAMQP on a queue that nacks every publish: %v, want 500 nacks counted as failures", err)
	}
}

// TestSwapsReportTheirParts swaps a module a few times: each swap's parts add up to
// its total. The debounce is an hour: a rename is read at once, not after it.
func TestSwapsReportTheirParts(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("only Linux's read leases tell a renamed file finished before the debounce")
	}
	swaps, err := Swaps(context.Background(), SwapConfig{Module: filepath.Join(abitest.Dir(), "abi", "ack.wasm"), Swaps: 5, Debounce: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if len(swaps) != 5 {
		t.Fatalf("%d swaps, want 5", len(swaps))
	}
	for i, s := range swaps {
		if s.Event < 0 || s.Debounce < 0 || s.Load <= 0 || s.FirstJob < 0 || s.Event+s.Debounce+s.Load+s.FirstJob != s.Total {
			t.Fatalf("swap %d: %+v: want non-negative parts adding up to the total", i, s)
		}
	}
	total := func(s Swap) time.Duration { return s.Total }
	if p50, p99 := SwapPercentile(swaps, total, 0.5), SwapPercentile(swaps, total, 0.99); p50 > p99 || p99 != SwapPercentile(swaps, total, 1) {
		t.Fatalf("percentiles of 5 swaps: p50 %v, p99 %v", p50, p99)
	}
}

// TestSwapsFailOnAFailedJob: a swap bench whose jobs do not ack is an error, not a
// figure: the bench vouches that no job failed.
func TestSwapsFailOnAFailedJob(t *testing.T) {
	t.Parallel()
	_, err := Swaps(context.Background(), SwapConfig{Module: filepath.Join(abitest.Dir(), "abi", "dead_letter.wasm"), Swaps: 3, Debounce: time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "a job failed") || !strings.Contains(err.Error(), "dead_letter") {
		t.Fatalf("Swaps of a module that dead-letters every job: %v, want a failed job named", err)
	}
}

// With --rate, latency runs from each job's scheduled time: a publisher that stalls
// for 300 ms delays the jobs due during the stall, and their latency shows it; timed
// from their publish instead, it would not (coordinated omission).
func TestRateLatencyCountsAPublisherStall(t *testing.T) {
	t.Parallel()
	const stall = 300 * time.Millisecond
	var once sync.Once
	var until time.Time
	res, err := Run(context.Background(), Config{Jobs: 200, Rate: 1000, Concurrency: 4, beforePublish: func(n int64) {
		if n < 20 {
			return
		}
		once.Do(func() { until = time.Now().Add(stall) })
		time.Sleep(time.Until(until)) // every publisher stalls from the 20th job on
	}})
	if err != nil {
		t.Fatal(err)
	}
	// Job 20 waits the whole stall; the jobs due during it (up to job 320, past the
	// last) wait less and less: job 200, due at 199 ms, goes at 319 ms or later. So
	// every job from the 20th on waits 120 ms or more: more than half of them.
	if res.P50Ms < 100 {
		t.Fatalf("p50 %.2f ms, p99 %.2f ms after a %v stall of the publisher: the stall is not in the latency", res.P50Ms, res.P99Ms, stall)
	}
}

// TestHTTPRunsMakeOneGETAJob: with HTTPDelay every job waits on a server answering after
// it, so a run of 400 jobs at concurrency 20 and 25 ms takes at least 400/20 x 25 ms =
// 0.5 s, on the native handler and on an SDK's conformance handler (C's, built by make
// guests) under the run's grant; a module that makes no request is faster than that.
func TestHTTPRunsMakeOneGETAJob(t *testing.T) {
	t.Parallel()
	modules := []string{""}
	if c, ok := abitest.Guest("c-conformance"); ok {
		modules = append(modules, c)
	} else if os.Getenv("CI") == "true" {
		t.Fatal("c-conformance.wasm is not built: CI must run make guests first")
	}
	for _, m := range modules {
		res, err := Run(context.Background(), Config{Jobs: 400, Concurrency: 20, HTTPDelay: 25 * time.Millisecond, Module: m, Backend: "pebble", DataDir: t.TempDir()})
		if err != nil {
			t.Fatalf("%q: %v", m, err)
		}
		if res.Seconds < 0.5 || res.P50Ms < 25 || res.RSSPerJobKB < 0 {
			t.Fatalf("%q: %+v: want at least 0.5 s and a p50 of at least 25 ms", m, res)
		}
	}
}

// TestDAGAcceptsEachRound posts a few workflows: each round is timed, and each
// workflow is on the host afterwards, whole, waiting.
func TestDAGAcceptsEachRound(t *testing.T) {
	t.Parallel()
	times, err := DAG(context.Background(), DAGConfig{Module: filepath.Join(abitest.Dir(), "abi", "ack.wasm"), Tasks: 50, Rounds: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(times) != 3 || slices.Min(times) <= 0 {
		t.Fatalf("DAG times %v, want 3 positive", times)
	}
	if m := Median([]time.Duration{3, 1, 2}); m != 2 {
		t.Fatalf("Median(3, 1, 2) = %v", m)
	}
	if m := Median([]time.Duration{4, 1, 2, 3}); m != 2 {
		t.Fatalf("Median(4, 1, 2, 3) = %v (the mean of the middle two, 2.5 rounded down)", m)
	}
}

// TestFanInMeasuresBothSides runs two small rounds: each measures a fan-in (the
// parent resumed after its children) and a batch, the batch first in the second.
func TestFanInMeasuresBothSides(t *testing.T) {
	t.Parallel()
	res, err := FanIn(context.Background(), FanInConfig{Module: filepath.Join(abitest.Dir(), "abi", "fanout_n.wasm"), Children: 200, Concurrency: 8}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 || res[0].BatchFirst || !res[1].BatchFirst {
		t.Fatalf("rounds %+v, want two, the batch first in the second", res)
	}
	for _, r := range res {
		if r.FanIn <= 0 || r.Batch <= 0 || r.Children != 200 {
			t.Fatalf("round %+v: want both sides measured", r)
		}
	}
}

// Publishing in batches needs a backend that has a batch publish: on one without, the
// run says so before anything starts.
func TestRunRefusesBatchesWithoutABatchPublish(t *testing.T) {
	t.Parallel()
	_, err := Run(context.Background(), Config{Jobs: 10, PublishBatch: 5})
	if err == nil || !strings.Contains(err.Error(), "no batch publish") {
		t.Fatalf("err = %v, want one naming the missing batch publish", err)
	}
}
