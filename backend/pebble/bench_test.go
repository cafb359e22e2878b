package pebble_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/internal/rig"
	pebblebackend "github.com/wasmjobs/wasmjobs/backend/pebble"
)

var openJobs = flag.Int("open-jobs", 100_000, "jobs waiting in the store that BenchmarkPebbleOpen opens")

// BenchmarkPebblePublishConsumeAck measures jobs through a store on a real directory:
// each publish synced (group-committed across the publishers), delivered to a
// consumer and acknowledged. One op is one job; jobs/s is the throughput.
func BenchmarkPebblePublishConsumeAck(b *testing.B) {
	for _, publishers := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("publishers=%d", publishers), func(b *testing.B) {
			ctx := context.Background()
			be := open(b, pebblebackend.Config{Dir: filepath.Join(b.TempDir(), "data")})
			defer be.Close(ctx)
			s := rig.Consume(b, be, backend.QueueConfig{Name: "bench", Prefetch: 256})
			payload := []byte(`{"n":1}`)
			var acked sync.WaitGroup
			acked.Add(b.N)
			var ackers sync.WaitGroup
			for range 4 {
				ackers.Go(func() {
					for d := range s.Deliveries() {
						if err := d.Ack(ctx); err != nil {
							b.Error(err)
						}
						acked.Done()
					}
				})
			}
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			var pubs sync.WaitGroup
			for p := range publishers {
				n := b.N / publishers
				if p < b.N%publishers {
					n++
				}
				pubs.Go(func() {
					for range n {
						if err := be.Publish(ctx, backend.NewEnvelope("bench", payload), 0); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			pubs.Wait()
			acked.Wait()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "jobs/s")
			b.StopTimer()
			s.Drop()
			ackers.Wait()
		})
	}
}

// BenchmarkPebbleOpen measures Open (the scan that rebuilds the indexes) of a store
// with -open-jobs jobs waiting (100,000 by default; pass -args -open-jobs 1000000 for
// a million).
func BenchmarkPebbleOpen(b *testing.B) {
	ctx := context.Background()
	dir := filepath.Join(b.TempDir(), "data")
	be, err := pebblebackend.Open(ctx, pebblebackend.Config{Dir: dir})
	if err != nil {
		b.Fatal(err)
	}
	if err := be.Declare(ctx, backend.QueueConfig{Name: "bench"}); err != nil {
		b.Fatal(err)
	}
	payload := []byte(`{"url":"https://example.com/image.png","size":640}`)
	batch := make([]backend.Publication, 0, 1000)
	for i := range *openJobs {
		batch = append(batch, backend.Publication{Envelope: backend.NewEnvelope("bench", payload)})
		if len(batch) == cap(batch) || i == *openJobs-1 {
			if err := be.PublishBatch(ctx, batch); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	if err := be.Close(ctx); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		be, err := pebblebackend.Open(ctx, pebblebackend.Config{Dir: dir})
		if err != nil {
			b.Fatal(err)
		}
		if got := be.Recovered().Ready; got != *openJobs {
			b.Fatalf("found %d jobs, want %d", got, *openJobs)
		}
		b.StopTimer()
		be.Close(ctx)
		b.StartTimer()
	}
	b.ReportMetric(float64(*openJobs), "jobs")
}

var throughJobs = flag.Int("through-jobs", 100_000, "jobs that BenchmarkPebbleDiskAfterThroughput puts through the store")

// BenchmarkPebbleDiskAfterThroughput puts -through-jobs jobs through a store (batch
// publishes of 1,000, each consumed and acknowledged), closes it and reports the
// directory's size in bytes, and the batched jobs/s.
func BenchmarkPebbleDiskAfterThroughput(b *testing.B) {
	ctx := context.Background()
	for range b.N {
		dir := filepath.Join(b.TempDir(), "data")
		be := open(b, pebblebackend.Config{Dir: dir, BallastSize: -1})
		s := rig.Consume(b, be, backend.QueueConfig{Name: "bench", Prefetch: 1024})
		n := *throughJobs
		done := make(chan struct{})
		go func() {
			defer close(done)
			for range n {
				d := <-s.Deliveries()
				if err := d.Ack(ctx); err != nil {
					b.Error(err)
				}
			}
		}()
		start := time.Now()
		payload := []byte(`{"url":"https://example.com/image.png","size":640}`)
		batch := make([]backend.Publication, 0, 1000)
		for i := range n {
			batch = append(batch, backend.Publication{Envelope: backend.NewEnvelope("bench", payload)})
			if len(batch) == cap(batch) || i == n-1 {
				if err := be.PublishBatch(ctx, batch); err != nil {
					b.Fatal(err)
				}
				batch = batch[:0]
			}
		}
		<-done
		took := time.Since(start)
		s.Drop()
		time.Sleep(time.Second) // let a compaction of the drained queue start
		if err := be.Close(ctx); err != nil {
			b.Fatal(err)
		}
		var size int64
		filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
			if err == nil && !fi.IsDir() {
				size += fi.Size()
			}
			return nil
		})
		b.ReportMetric(float64(size), "bytes")
		b.ReportMetric(float64(n)/took.Seconds(), "jobs/s")
	}
}
