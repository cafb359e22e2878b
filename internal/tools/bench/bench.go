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
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/wasmjobs/wasmjobs/internal/telemetry"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/memory"
	"github.com/wasmjobs/wasmjobs/backend/pebble"
	"github.com/wasmjobs/wasmjobs/backend/postgres"
	"github.com/wasmjobs/wasmjobs/backend/rabbitmq"
	"github.com/wasmjobs/wasmjobs/host"
	"github.com/wasmjobs/wasmjobs/internal/tools/bench/measure"
	"github.com/wasmjobs/wasmjobs/worker"
)

// Config is one run.
type Config struct {
	// Backend is "memory", "pebble", an amqp:// URL or a postgres:// URL.
	Backend string
	// DataDir is the pebble backend's data directory; empty means a temporary one,
	// removed after the run.
	DataDir string
	// Module is the .wasm file to run; empty runs the native no-op handler.
	Module string
	// Jobs, Concurrency and PayloadSize shape the load. Zeros mean 100,000 jobs (10,000
	// on RabbitMQ), 16 and 64 bytes.
	Jobs, Concurrency, PayloadSize int
	// Payload, when set, is every job's payload instead of PayloadSize letters.
	Payload []byte
	// Records configures the job records of the pebble and postgres backends: zero
	// fields mean the backend's defaults (as a host's), a negative MaxCount keeps none.
	Records backend.RecordConfig
	// Isolation overrides the module's manifest.
	Isolation host.Isolation
	// CacheDir is the engine's compilation cache; empty means none.
	CacheDir string
	// InsertFirst publishes every job before the worker starts, and measures the work
	// alone, from the worker's start to the last settle (River's `bench -n` shape);
	// latency then includes the wait behind the whole backlog.
	InsertFirst bool
	// Rate, when positive, paces the publishes at that many jobs a second (the n-th
	// is published no earlier than (n-1)/Rate seconds after the start), so that latency
	// is measured at a moderate load rather than behind a saturating publisher. Latency
	// is then measured from each job's scheduled time, not from its publish: a publisher
	// that stalls (a slow fsync) delays the jobs behind it, and that delay is part of
	// their latency (no coordinated omission).
	Rate float64
	// PublishBatch, when positive, publishes the jobs in batches of this many through
	// the backend's batch path (backend.BatchPublisher), one batch after another from
	// a single publisher, as River's bench inserts with InsertMany; zero publishes one
	// job a call from several publishers. Not with Rate.
	PublishBatch int

	// HTTPDelay, when positive, makes every job one GET to a loopback server the run
	// starts, which answers 200 after HTTPDelay. A module is loaded with a grant of that
	// server and gets the payload "http-get:URL", the cross-language conformance case
	// that every SDK's conformance handler runs (a GET, its status, headers and body
	// read); the native handler makes the same GET with a net/http client of its own.
	// Every client's idle-connection pool is sized to Concurrency.
	HTTPDelay time.Duration

	// Trace, when set, traces the run end to end as `wasmjobs run --otlp` does (a send
	// span for each publish, the process span and what is inside it) and exports the
	// spans over OTLP/HTTP to a loopback receiver of the run's own, which counts them:
	// the cost of tracing, with no span dropped (Result.Spans, Result.DroppedSpans).
	Trace bool

	// beforePublish, when set, is called before the n-th publish (tests: a stall).
	beforePublish func(n int64)
}

// Result is what a run measured.
type Result struct {
	Jobs       int     `json:"jobs"`
	Seconds    float64 `json:"seconds"`
	JobsPerSec float64 `json:"jobs_per_sec"`
	P50Ms      float64 `json:"p50_ms"`
	P90Ms      float64 `json:"p90_ms"`
	P99Ms      float64 `json:"p99_ms"`
	// PublishP50Ms and PublishP99Ms are how long a publish call took to return (a
	// durable backend's: until the job is on disk), per call: per batch with
	// PublishBatch.
	PublishP50Ms float64 `json:"publish_p50_ms"`
	PublishP99Ms float64 `json:"publish_p99_ms"`
	CPUSPer1k    float64 `json:"cpu_s_per_1k"`
	// PeakRSSMB is the peak resident set of this run: the process's high-water mark,
	// reset to the current resident set when the run starts (Linux's
	// /proc/self/clear_refs), so it is this run's peak and not the process's peak so
	// far. Runs in one process must therefore not overlap. Where the mark cannot be
	// reset, PeakRSSOwn is false and the figure is the process's peak so far.
	PeakRSSMB  float64 `json:"peak_rss_mb"`
	PeakRSSOwn bool    `json:"peak_rss_own"`
	// RSSPerJobKB is the run's growth of the resident set, its peak less the resident
	// set at its start, per job in flight (Concurrency): what a job costs in memory
	// while it waits on its handler.
	RSSPerJobKB float64 `json:"rss_per_job_kb"`
	// Spans and DroppedSpans count, for a traced run (Config.Trace), the spans the
	// receiver took and those the host dropped.
	Spans        int64 `json:"spans,omitempty"`
	DroppedSpans int64 `json:"dropped_spans,omitempty"`
	// Baseline and Ratio are set when the run was compared with a baseline.
	Baseline *Baseline `json:"baseline"`
	Ratio    *float64  `json:"ratio"`
	// Rounds, when the run and its baseline were repeated (bench --rounds), holds every
	// round; the figures above are then those of the round with the median ratio.
	Rounds []Round `json:"rounds,omitempty"`
}

// Round is one run and its baseline, measured one after the other.
type Round struct {
	JobsPerSec         float64 `json:"jobs_per_sec"`
	BaselineJobsPerSec float64 `json:"baseline_jobs_per_sec"`
	Ratio              float64 `json:"ratio"`
	// BaselineFirst says the baseline ran before the run in this round.
	BaselineFirst bool `json:"baseline_first"`
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
		if c.Backend != "memory" && c.Backend != "pebble" {
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

// payload is every job's payload.
func (c *Config) payload() []byte {
	if c.Payload != nil {
		return c.Payload
	}
	p := make([]byte, c.PayloadSize)
	for i := range p {
		p[i] = 'a' + byte(i%26)
	}
	return p
}

// publishers is how many goroutines publish: a broker's publishes wait for their
// confirm and pebble's for their fsync, shared by the publishes committing at once, so
// 64 keep enough in flight; in memory, up to 32.
func (c *Config) publishers() int {
	if c.Backend != "memory" {
		return 64
	}
	return min(c.Concurrency, 32)
}

// openBackend opens the run's backend; cleanup removes what it made (a temporary data
// directory), after the backend is closed.
func openBackend(ctx context.Context, cfg Config) (b backend.Backend, cleanup func(), err error) {
	switch cfg.Backend {
	case "memory":
		return memory.New(memory.Config{}), func() {}, nil
	case "pebble":
		dir, cleanup := cfg.DataDir, func() {}
		if dir == "" {
			tmp, err := os.MkdirTemp("", "wasmjobs-bench-")
			if err != nil {
				return nil, nil, fmt.Errorf("a temporary data directory: %w", err)
			}
			dir, cleanup = tmp, func() { os.RemoveAll(tmp) }
		}
		pb, err := pebble.Open(ctx, pebble.Config{Dir: dir, Records: cfg.Records})
		if err != nil {
			cleanup()
			return nil, nil, err
		}
		return pb, cleanup, nil
	}
	if postgres.IsURL(cfg.Backend) {
		return openPostgres(ctx, cfg.Backend, cfg.Records)
	}
	rb, err := rabbitmq.Open(ctx, rabbitmq.Config{URL: cfg.Backend})
	return rb, func() {}, err
}

// openPostgres opens the PostgreSQL backend at url in a schema of the run's own, which
// cleanup drops: a run starts on empty tables and leaves nothing behind.
func openPostgres(ctx context.Context, url string, records backend.RecordConfig) (backend.Backend, func(), error) {
	schema := "wasmjobs_bench_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	pb, err := postgres.Open(ctx, postgres.Config{URL: url, Schema: schema, Records: records})
	if err != nil {
		return nil, nil, err
	}
	return pb, func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: dropping schema %s: %v\n", schema, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, `DROP SCHEMA `+pgx.Identifier{schema}.Sanitize()+` CASCADE`); err != nil {
			fmt.Fprintf(os.Stderr, "bench: dropping schema %s: %v\n", schema, err)
		}
	}, nil
}

// handler returns the handler of a run and a function that releases it.
func handler(ctx context.Context, cfg Config, tp trace.TracerProvider) (worker.Handler, func(), error) {
	if cfg.Module == "" && cfg.HTTPDelay > 0 {
		return nativeGet(cfg.Concurrency)
	}
	if cfg.Module == "" {
		return worker.HandlerFunc(func(context.Context, *worker.Job) worker.Result { return worker.Result{} }), func() {}, nil
	}
	wasm, err := os.ReadFile(cfg.Module)
	if err != nil {
		return nil, nil, err
	}
	man, err := readManifest(cfg.Module, cfg.HTTPDelay > 0)
	if err != nil {
		return nil, nil, err
	}
	man.Isolation = cfg.Isolation
	e, err := host.NewEngine(ctx, host.Config{CacheDir: cfg.CacheDir, NoCache: cfg.CacheDir == "",
		HTTP: host.HTTPOptions{IdleConnsPerHost: cfg.Concurrency}, TracerProvider: tp})
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
// publish to the last settle; with cfg.InsertFirst it enqueues them first and measures
// from the worker's start.
func Run(ctx context.Context, cfg Config) (Result, error) {
	cfg.defaults()
	b, cleanup, err := openBackend(ctx, cfg)
	if err != nil {
		return Result{}, err
	}
	defer cleanup()
	defer b.Close(context.Background())
	bp, batches := b.(backend.BatchPublisher)
	if cfg.PublishBatch > 0 && !batches {
		return Result{}, fmt.Errorf("publishing in batches: the %s backend has no batch publish (backend.BatchPublisher)", cfg.Backend)
	}
	var tr *tracing
	var tp trace.TracerProvider
	var tracer trace.Tracer
	if cfg.Trace {
		if tr, err = startTracing(ctx); err != nil {
			return Result{}, err
		}
		defer tr.stop()
		tp, tracer = tr.tp, telemetry.Tracer(tr.tp)
	}
	h, release, err := handler(ctx, cfg, tp)
	if err != nil {
		return Result{}, err
	}
	defer release()

	payload := cfg.payload()
	if cfg.HTTPDelay > 0 {
		url, stop, err := measure.SlowServer(cfg.HTTPDelay)
		if err != nil {
			return Result{}, err
		}
		defer stop()
		payload = []byte("http-get:" + url)
	}
	queue := "bench-" + backend.NewID()[16:]
	latencies := make([]time.Duration, cfg.Jobs)
	var settled atomic.Int64
	var failed atomic.Int64
	var scheduled sync.Map // with cfg.Rate: job id -> the time it was due to be published
	done := make(chan struct{})
	w := worker.New(b, worker.Config{Concurrency: cfg.Concurrency, TracerProvider: tp, Observer: worker.ObserverFunc(func(e worker.Event) {
		if e.Kind != worker.EventSettled {
			return
		}
		if e.Settle != worker.Ack {
			failed.Add(1)
		}
		n := settled.Add(1)
		if int(n) <= len(latencies) {
			from := e.Job.Envelope.EnqueuedAt
			if at, ok := scheduled.Load(e.Job.Envelope.ID); ok {
				from = at.(time.Time)
			}
			latencies[n-1] = time.Since(from)
		}
		if int(n) == cfg.Jobs {
			close(done)
		}
	})})
	// Stopped once, on every return: an error after the start leaves no worker running.
	stopWorker := sync.OnceFunc(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		w.Stop(stopCtx)
	})
	defer stopWorker()
	if err := w.Register(ctx, worker.Queue{Name: queue, Handler: h}); err != nil {
		return Result{}, err
	}
	if !cfg.InsertFirst {
		if err := w.Start(ctx); err != nil {
			return Result{}, err
		}
	}
	own := measure.ResetPeakRSS()
	rss0 := rssMB()
	cpu0 := cpuSeconds()
	start := time.Now()
	var wg sync.WaitGroup
	var pubErr error
	var pubOnce sync.Once
	next := atomic.Int64{}
	publishers := cfg.publishers()
	if cfg.PublishBatch > 0 {
		publishers = 0
	}
	// Each publisher times its calls into a slice of its own, merged after they end:
	// no lock shared by the publishes being measured.
	times := make([][]time.Duration, max(publishers, 1))
	if cfg.PublishBatch > 0 {
		wg.Go(func() {
			for sent := 0; sent < cfg.Jobs; {
				pubs := make([]backend.Publication, min(cfg.PublishBatch, cfg.Jobs-sent))
				for i := range pubs {
					pubs[i].Envelope = backend.NewEnvelope(queue, payload)
				}
				t0 := time.Now()
				if err := bp.PublishBatch(ctx, pubs); err != nil {
					pubOnce.Do(func() { pubErr = err })
					return
				}
				times[0] = append(times[0], time.Since(t0))
				sent += len(pubs)
			}
		})
	}
	for p := range publishers {
		wg.Go(func() {
			for {
				n := next.Add(1)
				if n > int64(cfg.Jobs) {
					return
				}
				env := backend.NewEnvelope(queue, payload)
				if cfg.Rate > 0 {
					due := start.Add(time.Duration(float64(n-1) / cfg.Rate * float64(time.Second)))
					scheduled.Store(env.ID, due)
					time.Sleep(time.Until(due))
				}
				if cfg.beforePublish != nil {
					cfg.beforePublish(n)
				}
				var span trace.Span
				if tracer != nil {
					var sctx context.Context
					sctx, span = tracer.Start(ctx, "send "+queue, trace.WithSpanKind(trace.SpanKindProducer),
						trace.WithAttributes(append(telemetry.Messaging(telemetry.OpSend, "send", queue), telemetry.MessageID(env.ID))...))
					env.Headers = telemetry.Inject(sctx, env.Headers)
				}
				t0 := time.Now()
				err := b.Publish(ctx, env, 0)
				times[p] = append(times[p], time.Since(t0))
				if span != nil {
					span.End()
				}
				if err != nil {
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
	if cfg.InsertFirst {
		cpu0, start = cpuSeconds(), time.Now()
		if err := w.Start(ctx); err != nil {
			return Result{}, err
		}
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
	stopWorker()
	var spans, dropped int64
	if tr != nil {
		// Flushed after the timing: what the exporter sends at the end is not the run's.
		if spans, dropped, err = tr.stop(); err != nil {
			return Result{}, fmt.Errorf("flushing the spans: %w", err)
		}
	}
	if n := failed.Load(); n > 0 {
		return Result{}, fmt.Errorf("%d of %d jobs did not succeed: is %s a no-op handler?", n, cfg.Jobs, cfg.Module)
	}
	peak := peakRSSMB()
	slices.Sort(latencies)
	pct := func(p float64) float64 { return percentileMs(latencies, p) }
	pubTimes := slices.Concat(times...)
	slices.Sort(pubTimes)
	return Result{
		Jobs:         cfg.Jobs,
		Seconds:      elapsed.Seconds(),
		JobsPerSec:   float64(cfg.Jobs) / elapsed.Seconds(),
		P50Ms:        pct(0.50),
		P90Ms:        pct(0.90),
		P99Ms:        pct(0.99),
		PublishP50Ms: percentileMs(pubTimes, 0.50),
		PublishP99Ms: percentileMs(pubTimes, 0.99),
		CPUSPer1k:    cpu / float64(cfg.Jobs) * 1000,
		PeakRSSMB:    peak,
		PeakRSSOwn:   own,
		RSSPerJobKB:  max(0, peak-rss0) * 1024 / float64(cfg.Concurrency),
		Spans:        spans, DroppedSpans: dropped,
	}, nil
}

// percentileMs is the p-th percentile of sorted, in milliseconds; 0 when it is empty.
func percentileMs(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return float64(sorted[min(len(sorted)-1, int(p*float64(len(sorted))))]) / float64(time.Millisecond)
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// rssMB reads the resident set (VmRSS); 0 where there is none.
func rssMB() float64 { return measure.StatusMB("VmRSS:") }

// peakRSSMB reads the resident high-water mark (VmHWM), or, where there is none, the
// process's peak from getrusage.
func peakRSSMB() float64 {
	if mb := measure.StatusMB("VmHWM:"); mb > 0 {
		return mb
	}
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Maxrss) / 1024 // kilobytes on Linux
}

// RawAMQP runs cfg's jobs through a bare amqp091-go loop on the broker at cfg.Backend,
// doing the work the worker and the RabbitMQ backend do for a run of cfg, without them:
// a durable queue with the same priority levels; as many publishers as Run uses, on one
// channel in confirm mode, each publishing cfg's payload persistent and mandatory and
// waiting for its confirm; one consumer channel with cfg.Concurrency as its prefetch
// (the worker's) and cfg.Concurrency goroutines acking one delivery each. Every error
// counts: a failed publish, a nack, a return, a failed ack, a closed channel. It
// returns messages per second, from the first publish to the last ack.
func RawAMQP(ctx context.Context, cfg Config) (float64, error) {
	return rawAMQP(ctx, cfg, nil)
}

// rawAMQP is RawAMQP with extra arguments for its queue (tests use them to make the
// broker nack).
func rawAMQP(ctx context.Context, cfg Config, extra amqp.Table) (float64, error) {
	cfg.defaults()
	conn, err := amqp.Dial(cfg.Backend)
	if err != nil {
		return 0, fmt.Errorf("connecting: %w", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return 0, fmt.Errorf("opening the publishing channel: %w", err)
	}
	name := "bench-raw-" + backend.NewID()[16:]
	args := amqp.Table{"x-max-priority": int32(worker.DefaultPriorityLevels)}
	for k, v := range extra {
		args[k] = v
	}
	if _, err := ch.QueueDeclare(name, true, false, false, false, args); err != nil {
		return 0, fmt.Errorf("declaring %s: %w", name, err)
	}
	defer func() {
		if dch, err := conn.Channel(); err == nil {
			dch.QueueDelete(name, false, false, false)
			dch.Close()
		}
	}()
	if err := ch.Confirm(false); err != nil {
		return 0, fmt.Errorf("enabling confirms: %w", err)
	}
	returns := ch.NotifyReturn(make(chan amqp.Return, 1))
	var returned atomic.Int64
	returnsDone := make(chan struct{})
	go func() {
		defer close(returnsDone)
		for range returns {
			returned.Add(1)
		}
	}()
	cch, err := conn.Channel()
	if err != nil {
		return 0, fmt.Errorf("opening the consuming channel: %w", err)
	}
	if err := cch.Qos(cfg.Concurrency, 0, false); err != nil {
		return 0, fmt.Errorf("setting the prefetch: %w", err)
	}
	msgs, err := cch.Consume(name, "", false, false, false, false, nil)
	if err != nil {
		return 0, fmt.Errorf("consuming %s: %w", name, err)
	}
	payload := cfg.payload()
	var (
		acked, ackErrs, pubErrs, nacks atomic.Int64
		firstErr                       error
		errOnce                        sync.Once
	)
	fail := func(err error) { errOnce.Do(func() { firstErr = err }) }
	allAcked := make(chan struct{})
	consumeCtx, stopConsumers := context.WithCancel(ctx)
	defer stopConsumers()
	var consumers sync.WaitGroup
	for range cfg.Concurrency {
		consumers.Go(func() {
			for {
				select {
				case <-consumeCtx.Done():
					return
				case m, ok := <-msgs:
					if !ok {
						fail(errors.New("the consumer's channel closed"))
						stopConsumers()
						return
					}
					if err := m.Ack(false); err != nil {
						ackErrs.Add(1)
						fail(fmt.Errorf("ack: %w", err))
					}
					if acked.Add(1) == int64(cfg.Jobs) {
						close(allAcked)
					}
				}
			}
		})
	}
	start := time.Now()
	next := atomic.Int64{}
	var publishers sync.WaitGroup
	for range cfg.publishers() {
		publishers.Go(func() {
			for i := next.Add(1); i <= int64(cfg.Jobs); i = next.Add(1) {
				dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", name, true, false,
					amqp.Publishing{MessageId: strconv.FormatInt(i, 10), Body: payload, DeliveryMode: amqp.Persistent})
				if err != nil {
					pubErrs.Add(1)
					fail(fmt.Errorf("publish: %w", err))
					continue
				}
				ok, err := dc.WaitContext(ctx)
				if err != nil {
					pubErrs.Add(1)
					fail(fmt.Errorf("waiting for a confirm: %w", err))
				} else if !ok {
					nacks.Add(1)
				}
			}
		})
	}
	publishers.Wait()
	// A return comes before its message's confirm; closing the channel closes the
	// returns channel after the last of them.
	ch.Close()
	<-returnsDone
	bad := pubErrs.Load() + nacks.Load() + returned.Load()
	if bad == 0 {
		select {
		case <-allAcked:
		case <-consumeCtx.Done():
		case <-time.After(10 * time.Minute):
			fail(errors.New("the messages were not all consumed within 10 minutes"))
		}
	}
	elapsed := time.Since(start)
	stopConsumers()
	consumers.Wait()
	if bad += ackErrs.Load(); bad > 0 || firstErr != nil {
		return 0, fmt.Errorf("%d of %d messages failed (%d publish errors, %d nacks, %d returns, %d ack errors; first error: %v)",
			bad, cfg.Jobs, pubErrs.Load(), nacks.Load(), returned.Load(), ackErrs.Load(), firstErr)
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	return float64(cfg.Jobs) / elapsed.Seconds(), nil
}
