// Package bench measures the host the way job systems publish their numbers: N jobs
// through the real worker and backend, with a Wasm module or a native no-op handler,
// and baselines in the same run: the native handler, and a bare amqp091-go loop on the
// same broker.
package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/memory"
	"github.com/wasmjobs/wasmjobs/backend/rabbitmq"
	"github.com/wasmjobs/wasmjobs/host"
	"github.com/wasmjobs/wasmjobs/worker"
)

// Config is one run.
type Config struct {
	// Backend is "memory" or an amqp:// URL.
	Backend string
	// Module is the .wasm file to run; empty runs the native no-op handler.
	Module string
	// Jobs, Concurrency and PayloadSize shape the load. Zeros mean 100,000 jobs (10,000
	// on RabbitMQ), 16 and 64 bytes.
	Jobs, Concurrency, PayloadSize int
	// Payload, when set, is every job's payload instead of PayloadSize letters.
	Payload []byte
	// Isolation overrides the module's manifest.
	Isolation host.Isolation
	// CacheDir is the engine's compilation cache; empty means none.
	CacheDir string
}

// Result is what a run measured.
type Result struct {
	Jobs       int     `json:"jobs"`
	Seconds    float64 `json:"seconds"`
	JobsPerSec float64 `json:"jobs_per_sec"`
	P50Ms      float64 `json:"p50_ms"`
	P90Ms      float64 `json:"p90_ms"`
	P99Ms      float64 `json:"p99_ms"`
	CPUSPer1k  float64 `json:"cpu_s_per_1k"`
	PeakRSSMB  float64 `json:"peak_rss_mb"`
	// Baseline and Ratio are set when the run was compared with a baseline.
	Baseline *Baseline `json:"baseline"`
	Ratio    *float64  `json:"ratio"`
}

// Baseline is the reference a run is compared with.
type Baseline struct {
	Kind       string  `json:"kind"` // "native" or "raw-amqp"
	JobsPerSec float64 `json:"jobs_per_sec"`
}

// Compare sets r's baseline and ratio.
func (r *Result) Compare(kind string, jobsPerSec float64) {
	ratio := r.JobsPerSec / jobsPerSec
	r.Baseline, r.Ratio = &Baseline{Kind: kind, JobsPerSec: jobsPerSec}, &ratio
}

func (c *Config) defaults() {
	if c.Backend == "" {
		c.Backend = "memory"
	}
	if c.Jobs <= 0 {
		c.Jobs = 100_000
		if c.Backend != "memory" {
			c.Jobs = 10_000
		}
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 16
	}
	if c.PayloadSize <= 0 {
		c.PayloadSize = 64
	}
}

func openBackend(ctx context.Context, spec string) (backend.Backend, error) {
	if spec == "memory" {
		return memory.New(memory.Config{}), nil
	}
	return rabbitmq.Open(ctx, rabbitmq.Config{URL: spec})
}

// handler returns the handler of a run and a function that releases it.
func handler(ctx context.Context, cfg Config) (worker.Handler, func(), error) {
	if cfg.Module == "" {
		return worker.HandlerFunc(func(context.Context, *worker.Job) worker.Result { return worker.Result{} }), func() {}, nil
	}
	wasm, err := os.ReadFile(cfg.Module)
	if err != nil {
		return nil, nil, err
	}
	man, err := host.ReadManifest(cfg.Module)
	if err != nil {
		return nil, nil, err
	}
	man.Isolation = cfg.Isolation
	e, err := host.NewEngine(ctx, host.Config{CacheDir: cfg.CacheDir, NoCache: cfg.CacheDir == ""})
	if err != nil {
		return nil, nil, err
	}
	m, err := e.Load(ctx, "bench", wasm, man)
	if err != nil {
		e.Close(ctx)
		return nil, nil, err
	}
	return host.NewHandler(m, nil), func() { m.Retire(); e.Close(context.Background()) }, nil
}

// Run enqueues cfg.Jobs jobs while a worker runs them, and measures from the first
// publish to the last settle.
func Run(ctx context.Context, cfg Config) (Result, error) {
	cfg.defaults()
	b, err := openBackend(ctx, cfg.Backend)
	if err != nil {
		return Result{}, err
	}
	defer b.Close(context.Background())
	h, release, err := handler(ctx, cfg)
	if err != nil {
		return Result{}, err
	}
	defer release()

	queue := "bench-" + backend.NewID()[16:]
	latencies := make([]time.Duration, cfg.Jobs)
	var settled atomic.Int64
	var failed atomic.Int64
	done := make(chan struct{})
	w := worker.New(b, worker.Config{Concurrency: cfg.Concurrency, Observer: worker.ObserverFunc(func(e worker.Event) {
		if e.Kind != worker.EventSettled {
			return
		}
		if e.Settle != worker.SettleAck {
			failed.Add(1)
		}
		n := settled.Add(1)
		if int(n) <= len(latencies) {
			latencies[n-1] = time.Since(e.Job.Envelope.EnqueuedAt)
		}
		if int(n) == cfg.Jobs {
			close(done)
		}
	})})
	if err := w.Register(ctx, worker.Queue{Name: queue, Handler: h}); err != nil {
		return Result{}, err
	}
	if err := w.Start(ctx); err != nil {
		return Result{}, err
	}
	payload := cfg.Payload
	if payload == nil {
		payload = make([]byte, cfg.PayloadSize)
		for i := range payload {
			payload[i] = 'a' + byte(i%26)
		}
	}
	cpu0 := cpuSeconds()
	start := time.Now()
	var wg sync.WaitGroup
	var pubErr error
	var pubOnce sync.Once
	next := atomic.Int64{}
	// A broker's publishes wait for confirms: as many in flight as the bare loop keeps.
	publishers := min(cfg.Concurrency, 32)
	if cfg.Backend != "memory" {
		publishers = 64
	}
	for range publishers {
		wg.Go(func() {
			for next.Add(1) <= int64(cfg.Jobs) {
				if err := b.Publish(ctx, backend.NewEnvelope(queue, payload), 0); err != nil {
					pubOnce.Do(func() { pubErr = err })
					return
				}
			}
		})
	}
	wg.Wait()
	if pubErr != nil {
		return Result{}, fmt.Errorf("publishing: %w", pubErr)
	}
	select {
	case <-done:
	case <-ctx.Done():
		return Result{}, ctx.Err()
	case <-time.After(10 * time.Minute):
		return Result{}, errors.New("the jobs did not settle within 10 minutes")
	}
	elapsed := time.Since(start)
	cpu := cpuSeconds() - cpu0
	stopCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w.Stop(stopCtx)
	if n := failed.Load(); n > 0 {
		return Result{}, fmt.Errorf("%d of %d jobs did not succeed: is %s a no-op handler?", n, cfg.Jobs, cfg.Module)
	}
	slices.Sort(latencies)
	pct := func(p float64) float64 {
		return float64(latencies[min(len(latencies)-1, int(p*float64(len(latencies))))].Microseconds()) / 1000
	}
	return Result{
		Jobs:       cfg.Jobs,
		Seconds:    elapsed.Seconds(),
		JobsPerSec: float64(cfg.Jobs) / elapsed.Seconds(),
		P50Ms:      pct(0.50),
		P90Ms:      pct(0.90),
		P99Ms:      pct(0.99),
		CPUSPer1k:  cpu / float64(cfg.Jobs) * 1000,
		PeakRSSMB:  peakRSSMB(),
	}, nil
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

func peakRSSMB() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Maxrss) / 1024 // kilobytes on Linux
}

// RawAMQP publishes n persistent messages with confirms (64 outstanding) and consumes
// them with prefetch 100 and an ack each, with amqp091-go alone: the broker's own pace
// on this machine. It returns messages per second.
func RawAMQP(ctx context.Context, url string, n, payloadSize int) (float64, error) {
	conn, err := amqp.Dial(url)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return 0, err
	}
	name := "bench-raw-" + backend.NewID()[16:]
	if _, err := ch.QueueDeclare(name, true, false, false, false, amqp.Table{"x-max-priority": int32(2)}); err != nil {
		return 0, err
	}
	defer ch.QueueDelete(name, false, false, false)
	if err := ch.Confirm(false); err != nil {
		return 0, err
	}
	payload := make([]byte, payloadSize)
	start := time.Now()
	cch, err := conn.Channel()
	if err != nil {
		return 0, err
	}
	cch.Qos(100, 0, false)
	msgs, err := cch.Consume(name, "", false, false, false, false, nil)
	if err != nil {
		return 0, err
	}
	consumed := make(chan error, 1)
	go func() {
		for range n {
			m, ok := <-msgs
			if !ok {
				consumed <- errors.New("the consumer channel closed")
				return
			}
			m.Ack(false)
		}
		consumed <- nil
	}()
	pending := make([]*amqp.DeferredConfirmation, 0, 64)
	for i := range n {
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", name, true, false,
			amqp.Publishing{MessageId: fmt.Sprint(i), Body: payload, DeliveryMode: amqp.Persistent})
		if err != nil {
			return 0, err
		}
		if pending = append(pending, dc); len(pending) == cap(pending) {
			for _, dc := range pending {
				dc.Wait()
			}
			pending = pending[:0]
		}
	}
	for _, dc := range pending {
		dc.Wait()
	}
	if err := <-consumed; err != nil {
		return 0, err
	}
	return float64(n) / time.Since(start).Seconds(), nil
}
