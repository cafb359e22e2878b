package bench_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wasmjobs/wasmjobs/host"
	"github.com/wasmjobs/wasmjobs/internal/abitest"
	"github.com/wasmjobs/wasmjobs/internal/bench"
)

func TestRunMeasuresEveryJob(t *testing.T) {
	t.Parallel()
	ack := filepath.Join(abitest.Dir(), "abi", "ack.wasm")
	for _, cfg := range []bench.Config{
		{Jobs: 2000},
		{Jobs: 2000, Module: ack},
		{Jobs: 500, Module: ack, Isolation: host.Fresh, Concurrency: 4, Payload: []byte("x")},
	} {
		res, err := bench.Run(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if res.Jobs != cfg.Jobs || res.JobsPerSec <= 0 || res.Seconds <= 0 || res.P50Ms > res.P90Ms || res.P90Ms > res.P99Ms ||
			res.CPUSPer1k <= 0 || res.PeakRSSMB <= 0 || res.Baseline != nil {
			t.Fatalf("%+v: %+v", cfg, res)
		}
		res.Compare("native", res.JobsPerSec*2)
		if *res.Ratio != 0.5 || res.Baseline.Kind != "native" {
			t.Fatalf("Compare: %+v", res)
		}
	}
}

func TestRunRefusesAModuleThatDoesNotAck(t *testing.T) {
	t.Parallel()
	_, err := bench.Run(context.Background(), bench.Config{Jobs: 50, Module: filepath.Join(abitest.Dir(), "abi", "retry.wasm")})
	if err == nil || !strings.Contains(err.Error(), "50 of 50 jobs did not succeed") {
		t.Fatalf("err = %v", err)
	}
	if _, err := bench.Run(context.Background(), bench.Config{Module: "/nope.wasm"}); err == nil {
		t.Fatal("a missing module was accepted")
	}
}
