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
	"github.com/wasmjobs/wasmjobs/internal/app/inspect"
	"github.com/wasmjobs/wasmjobs/internal/app/inspect/inspecttest"
	"github.com/wasmjobs/wasmjobs/internal/app/ui"
)

// BenchmarkOverview renders /ui/ over 100 queues holding 1,000,000 jobs in a Pebble
// store (10,000 each). WASMJOBS_BENCH_JOBS changes the total. The store is filled once,
// in batches of 1,000, then closed and opened again, before the timer starts. Run it
// with: go test -run '^$' -bench Overview -benchtime 50x ./internal/app/ui/
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
	names := make([]string, queues)
	mods := make([]inspecttest.Module, queues)
	for i := range queues {
		names[i] = fmt.Sprintf("q%03d", i)
		mods[i] = inspecttest.Module{Name: names[i], Wasm: "abi/ack"}
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
	b.Logf("opened the store of %d jobs in %v", total, time.Since(start))
	rig := inspecttest.New(b, inspecttest.Options{Backend: pb, Modules: mods, Inspect: func(c *inspect.Config) { c.Rates = inspect.NewRates(nil) }})
	h := ui.New(ui.Config{Inspector: rig.Inspector, Host: ui.HostInfo{Backend: "pebble", Started: time.Now()}})
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
