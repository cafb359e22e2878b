package host_test

import (
	"context"
	"os"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/host"
	"github.com/wasmjobs/wasmjobs/internal/rigs/abitest"
	"github.com/wasmjobs/wasmjobs/worker"
)

// BenchmarkRunNoop is the host's cost per job of a no-op WAT module: on a warm pooled
// instance called once a job, on one serving its jobs in one call (wasmjobs_serve), and
// on a fresh instance per job. Each job has a context of its own, as a worker's does.
func BenchmarkRunNoop(b *testing.B) {
	for _, c := range []struct{ name, module, iso string }{
		{"pooled", "abi/ack", "pooled"},
		{"served", "abi/ack_serve", "pooled"},
		{"fresh", "abi/ack", "fresh"},
	} {
		b.Run(c.name, func(b *testing.B) {
			e := newEngine(b)
			m := loadFile(b, e, c.module, `isolation = "`+c.iso+`"`)
			job := &worker.Job{Envelope: backend.NewEnvelope("ack", []byte(`{"n":1}`)), Attempt: 1, MaxAttempts: 3}
			b.ReportAllocs()
			for b.Loop() {
				ctx, cancel := context.WithCancelCause(context.Background())
				if x := m.Run(ctx, job, nil); x.Outcome != worker.Ack {
					b.Fatal(x.Reason)
				}
				cancel(nil)
			}
		})
	}
}

// BenchmarkGoGuest measures the Go example (a 3.4 MB module): compiling it with no
// cache, compiling it from a warm on-disk cache (each in a new engine, as a restarted
// host would), and running a job on a fresh instance (instantiate, _initialize, call)
// against a warm one.
func BenchmarkGoGuest(b *testing.B) {
	wasm := guestModule(b, "greet-go")
	ctx := context.Background()
	loadIn := func(b *testing.B, cfg host.Config) {
		e, err := host.NewEngine(ctx, cfg)
		if err != nil {
			b.Fatal(err)
		}
		defer e.Close(ctx)
		m, err := e.Load(ctx, "greet-go", wasm, host.Manifest{})
		if err != nil {
			b.Fatal(err)
		}
		m.Retire()
	}
	b.Run("load-no-cache", func(b *testing.B) {
		for b.Loop() {
			loadIn(b, host.Config{NoCache: true})
		}
	})
	b.Run("load-warm-cache", func(b *testing.B) {
		dir := b.TempDir()
		loadIn(b, host.Config{CacheDir: dir}) // fills the cache
		b.ResetTimer()
		for b.Loop() {
			loadIn(b, host.Config{CacheDir: dir})
		}
	})
	for _, iso := range []host.Isolation{host.Fresh, host.Pooled} {
		b.Run("job-"+iso.String(), func(b *testing.B) {
			e := newEngine(b)
			m, err := e.Load(ctx, "greet-go", wasm, host.Manifest{Isolation: iso})
			if err != nil {
				b.Fatal(err)
			}
			defer m.Retire()
			job := &worker.Job{Envelope: backend.NewEnvelope("greet", []byte(`{"name":"Ada"}`)), Attempt: 1, MaxAttempts: 3}
			b.ReportAllocs()
			for b.Loop() {
				if x := m.Run(ctx, job, nil); x.Outcome != worker.Ack {
					b.Fatal(x.Reason)
				}
			}
		})
	}
}

// BenchmarkGuests measures each language's conformance module (built by make guests):
// compile (a new engine without cache each time) and a job on a fresh instance
// (instantiate, initialise, call "ack").
func BenchmarkGuests(b *testing.B) {
	ctx := context.Background()
	for _, lang := range []string{"go", "rust", "c", "assemblyscript"} {
		path, ok := abitest.Guest(lang + "-conformance")
		if !ok {
			b.Logf("%s-conformance.wasm is not built: run make guests", lang)
			continue
		}
		wasm, err := os.ReadFile(path)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(lang+"/compile", func(b *testing.B) {
			b.ReportMetric(float64(len(wasm)), "bytes")
			for b.Loop() {
				e, err := host.NewEngine(ctx, host.Config{NoCache: true})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := e.Load(ctx, "conformance", wasm, host.Manifest{Isolation: host.Fresh}); err != nil {
					b.Fatal(err)
				}
				e.Close(ctx)
			}
		})
		b.Run(lang+"/fresh-job", func(b *testing.B) {
			e := newEngine(b)
			m, err := e.Load(ctx, "conformance", wasm, host.Manifest{Isolation: host.Fresh})
			if err != nil {
				b.Fatal(err)
			}
			job := &worker.Job{Envelope: backend.NewEnvelope("conformance", []byte("ack")), Attempt: 1, MaxAttempts: 3}
			for b.Loop() {
				if x := m.Run(ctx, job, nil); x.Outcome != worker.Ack {
					b.Fatal(x.Reason)
				}
			}
		})
	}
}

// BenchmarkRunTracing is the host's cost per job of the log module (nine log lines)
// run through a Handler with tracing off, which must allocate no more than before
// tracing existed (compare BenchmarkRunNoop and this "off" with the commit before
// it), and on, to an SDK provider that exports nothing: the run span and its events.
func BenchmarkRunTracing(b *testing.B) {
	for _, on := range []bool{false, true} {
		b.Run(map[bool]string{false: "off", true: "on"}[on], func(b *testing.B) {
			cfg := host.Config{NoCache: true}
			if on {
				tp := sdktrace.NewTracerProvider()
				b.Cleanup(func() { tp.Shutdown(context.Background()) })
				cfg.TracerProvider = tp
			}
			e := newEngineWith(b, cfg)
			h := host.NewHandler(loadFile(b, e, "abi/log", ""), nil)
			job := &worker.Job{Envelope: backend.NewEnvelope("log", nil), Attempt: 1, MaxAttempts: 3}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if res := h.Handle(ctx, job); res.Outcome != worker.Ack {
					b.Fatal(res.Reason)
				}
			}
		})
	}
}

// BenchmarkJSPooled is the cost per job of the TypeScript conformance handler's no-op
// case ("ack") on a warm pooled VM (build it with make guests): what the prelude, the
// adapter's host calls and the engine spend on a job that does nothing.
func BenchmarkJSPooled(b *testing.B) {
	path, ok := abitest.Guest("typescript-conformance")
	if !ok {
		b.Skip("typescript-conformance.wasm is not built: run make guests")
	}
	wasm, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	e := newEngine(b)
	m, err := e.Load(context.Background(), "conformance", wasm, host.Manifest{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(m.Retire)
	job := &worker.Job{Envelope: backend.NewEnvelope("conformance", []byte("ack")), Attempt: 1, MaxAttempts: 3}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if x := m.Run(ctx, job, nil); x.Outcome != worker.Ack {
			b.Fatal(x.Reason)
		}
	}
}
