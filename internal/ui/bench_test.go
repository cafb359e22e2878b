package ui_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/pebble"
	"github.com/wasmjobs/wasmjobs/host"
	"github.com/wasmjobs/wasmjobs/internal/inspect"
	"github.com/wasmjobs/wasmjobs/internal/ui"
	"github.com/wasmjobs/wasmjobs/worker"
)

// BenchmarkOverview renders /ui/ over 100 queues holding 1,000,000 jobs in a Pebble
// store (10,000 each). WASMJOBS_BENCH_JOBS changes the total. The store is filled once,
// in batches of 1,000, then closed and opened again, before the timer starts. Run it
// with: go test -run '^$' -bench Overview -benchtime 50x ./internal/ui/
func BenchmarkOverview(b *testing.B) {
	const queues = 100
	total := 1_000_000
	if v := os.Getenv("WASMJOBS_BENCH_JOBS"); v != "" {
		fmt.Sscan(v, &total)
	}
	ctx := context.Background()
	dir := filepath.Join(b.TempDir(), "data")
	pb, err := pebble.Open(ctx, pebble.Config{Dir: dir})
	if err != nil {
		b.Fatal(err)
	}
	modules := b.TempDir()
	wasm, err := os.ReadFile("../../testdata/abi/ack.wasm")
	if err != nil {
		b.Fatal(err)
	}
	names := make([]string, queues)
	for i := range queues {
		names[i] = fmt.Sprintf("q%03d", i)
		if err := os.WriteFile(filepath.Join(modules, names[i]+".wasm"), wasm, 0o644); err != nil {
			b.Fatal(err)
		}
		if err := pb.Declare(ctx, backend.QueueConfig{Name: names[i]}); err != nil {
			b.Fatal(err)
		}
	}
	batch := make([]backend.Publication, 0, 1000)
	for i := range total {
		batch = append(batch, backend.Publication{Envelope: backend.NewEnvelope(names[i%queues], []byte("x"))})
		if len(batch) == cap(batch) || i == total-1 {
			if err := pb.PublishBatch(ctx, batch); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	// Closed and opened again, as a host restarted on the store: the fill's flushes are
	// done, and the counts the overview reads are those Open rebuilt.
	if err := pb.Close(ctx); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	if pb, err = pebble.Open(ctx, pebble.Config{Dir: dir}); err != nil {
		b.Fatal(err)
	}
	defer pb.Close(ctx)
	b.Logf("opened the store of %d jobs in %v", total, time.Since(start))
	e, err := host.NewEngine(ctx, host.Config{CacheDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close(ctx)
	reg, err := host.NewRegistry(host.RegistryConfig{Dir: modules, Engine: e, Queues: noQueues{}})
	if err != nil {
		b.Fatal(err)
	}
	defer reg.Close()
	reg.Sync(ctx)
	h := ui.New(ui.Config{Inspector: inspect.New(inspect.Config{Backend: pb, Registry: reg, Rates: inspect.NewRates(nil)}), Host: ui.HostInfo{Backend: "pebble", Started: time.Now()}})
	check := httptest.NewRecorder()
	h.ServeHTTP(check, httptest.NewRequest("GET", "http://localhost/ui/", nil))
	if check.Code != http.StatusOK {
		b.Fatalf("GET /ui/: %d %s", check.Code, check.Body)
	}
	b.ResetTimer()
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "http://localhost/ui/", nil))
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/1000, "ms/overview")
}

// noQueues serves no queue: the benchmark reads counts, nothing consumes.
type noQueues struct{}

func (noQueues) Register(context.Context, worker.Queue) error { return nil }
func (noQueues) Unregister(context.Context, string) error     { return nil }
