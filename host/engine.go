// Package host runs jobs in WebAssembly modules that speak the wasmjobs ABI (see the
// abi package and abi/SPEC.md). It owns the wazero runtime, module loading and
// validation, instance pools, the host functions, the sandbox limits, and the
// worker.Handler that routes a queue's jobs to the current version of its module.
//
// An Engine compiles and validates modules; a Module is one version of one module,
// with its manifest and a pool of warm instances; Run executes one job on it. A
// Handler holds the current Module of a queue and can be swapped while jobs run: each
// job finishes on the version it started with, and a retired version is closed once
// its last job ends.
package host

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
	"go.opentelemetry.io/otel/trace"

	"github.com/wasmjobs/wasmjobs/abi"
	"github.com/wasmjobs/wasmjobs/internal/outbound"
	"github.com/wasmjobs/wasmjobs/internal/telemetry"
)

// Config configures an Engine. The zero value is usable.
type Config struct {
	// CacheDir holds compiled code across restarts, so that a large module (a Go
	// guest) compiles once. Empty means wasmjobs/wazero under the user's cache
	// directory (os.UserCacheDir); if that cannot be had, the cache is kept in memory.
	CacheDir string
	// NoCache turns the on-disk compilation cache off.
	NoCache bool
	// Logger receives what guests log when a job has no log sink of its own, and the
	// engine's own warnings. Nil discards them.
	Logger *slog.Logger
	// HTTP holds the host's settings for modules' outbound HTTP: trusted roots
	// (--http-ca) and, for tests, a resolver.
	HTTP HTTPOptions
	// OnHTTPCall, if set, is called for each outbound HTTP request of a job once the
	// job's run ends, from the job's goroutine: it must be quick and must not block.
	// `wasmjobs run` counts them in its metrics.
	OnHTTPCall func(HTTPCall)
	// NoWait says the host's backend keeps no waiting jobs (it is no
	// backend.DependentPublisher): a module that imports the functions of fan-out and
	// fan-in (abi.IsWaitFunc) is refused at load, and a JS handler's WAIT fails, each
	// saying why, rather than being retried for ever.
	NoWait bool
	// Backend names the host's backend in those errors; empty means "the host's
	// backend".
	Backend string
	// TracerProvider traces the jobs' runs: a `run <module>` span of each, a child of
	// the span in the job's context (the worker's process span, given the module,
	// its version and canary role), the guest's log lines its events, and a Client
	// span of each outbound HTTP request, whose traceparent the request carries. Nil
	// turns tracing off: no span is made.
	TracerProvider trace.TracerProvider
	// TraceEventLimit is how many events a span keeps (the provider's limit,
	// OTEL_SPAN_EVENT_COUNT_LIMIT): the log lines of a run past it are counted in its
	// span's wasmjobs.logs.dropped. Zero means telemetry.DefaultEventLimit.
	TraceEventLimit int
	// NoServe calls a module's wasmjobs_handle once for each job even when it exports
	// wasmjobs_serve, the loop that runs a pooled instance's jobs in one call: for
	// telling a serve loop's fault from a handler's (the conformance suite runs both).
	NoServe bool
}

// HTTPOptions are the host's settings for every module's outbound HTTP client. The zero
// value is usable.
type HTTPOptions struct {
	// RootCAs are the trusted roots for https; nil means the system's.
	RootCAs *x509.CertPool
	// Resolver resolves host names; nil means net.DefaultResolver.
	Resolver Resolver
	// IdleConnsPerHost is how many idle connections to one destination a module's
	// client keeps for reuse; a request beyond them opens a new connection, closed
	// after use. Size it to the jobs that can call one destination at once (the
	// worker's concurrency). Zero means 64.
	IdleConnsPerHost int
}

// Resolver resolves host names for modules' outbound HTTP, as *net.Resolver does.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Engine compiles, validates and instantiates modules. It is safe for concurrent use.
type Engine struct {
	rt    wazero.Runtime
	cache wazero.CompilationCache
	log   *slog.Logger
	// wasiNames are the functions wasi_snapshot_preview1 provides.
	wasiNames map[string]bool
	// reclaiming is set while a reclaim is scheduled.
	reclaiming atomic.Bool
	// httpOpts are Config.HTTP, with the engine's limiters and breakers.
	httpOpts outbound.Options
	// onHTTPCall is Config.OnHTTPCall.
	onHTTPCall func(HTTPCall)
	// noWait, when not empty, says why the host cannot serve waits (Config.NoWait).
	noWait string
	// tracer makes the runs' spans; nil when tracing is off (Config.TracerProvider).
	tracer trace.Tracer
	// eventLimit is Config.TraceEventLimit, its default filled in.
	eventLimit int

	// runs counts the jobs running on the engine's modules; idle, made by a waiter
	// (waitRuns) while jobs run, is closed when it falls to zero (all under runsMu):
	// not made a job, when no one waits. Close waits for them: wazero's runtime must not
	// close under a guest still inside a host function (its WASI file table, say).
	runsMu sync.Mutex
	runs   int
	idle   chan struct{}

	// noServe is Config.NoServe.
	noServe bool
	// serveCtx is the parent of every serve loop's context: Close ends it, and waits
	// for serves, the loops running, before the runtime closes under them.
	serveCtx    context.Context
	serveCancel context.CancelFunc
	serves      sync.WaitGroup
	loops       atomic.Int64 // the serve loops running, for tests
}

// enter counts a job in; leave counts it out.
func (e *Engine) enter() {
	e.runsMu.Lock()
	e.runs++
	e.runsMu.Unlock()
}

func (e *Engine) leave() {
	e.runsMu.Lock()
	e.runs--
	if e.runs == 0 && e.idle != nil {
		close(e.idle)
		e.idle = nil
	}
	e.runsMu.Unlock()
}

// waitRuns returns once no job runs on the engine, or with ctx's error and the number
// still running when ctx ends first.
func (e *Engine) waitRuns(ctx context.Context) (int, error) {
	e.runsMu.Lock()
	if e.runs == 0 {
		e.runsMu.Unlock()
		return 0, nil
	}
	if e.idle == nil {
		e.idle = make(chan struct{})
	}
	idle := e.idle
	e.runsMu.Unlock()
	select {
	case <-idle:
		return 0, nil
	case <-ctx.Done():
		e.runsMu.Lock()
		defer e.runsMu.Unlock()
		return e.runs, ctx.Err()
	}
}

// reclaim returns freed memory to the OS a second after a burst of stack overflows. An
// overflow leaves behind the ~50 MB stack wazero grew for the guest, which the Go
// runtime would otherwise keep resident for minutes (RATIONALE.md).
// Both steps are logged, so that an operator (and the hostile e2e test) can tell when
// the memory of every overflow so far has been returned: as many "returned" lines as
// "scheduled" ones.
func (e *Engine) reclaim() {
	if e.reclaiming.CompareAndSwap(false, true) {
		e.log.Info("a guest's stack overflowed: returning freed memory to the OS in a second")
		time.AfterFunc(time.Second, func() {
			e.reclaiming.Store(false)
			debug.FreeOSMemory()
			e.log.Info("returned freed memory to the OS after a guest's stack overflow")
		})
	}
}

// NewEngine starts a wazero runtime in compiler mode with the compilation cache, the
// wasmjobs host functions, WASI and AssemblyScript's env.abort.
func NewEngine(ctx context.Context, cfg Config) (*Engine, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// One registry of limiters for the engine: a module's [http.limits] hold across its
	// versions (reloads, canaries), keyed by its name. Likewise the circuit breakers: a
	// reload does not close an open one.
	tracer := telemetry.Tracer(cfg.TracerProvider)
	opts := outbound.Options{RootCAs: cfg.HTTP.RootCAs, IdleConnsPerHost: cfg.HTTP.IdleConnsPerHost,
		Limiters: outbound.NewLimiters(), Breakers: outbound.NewBreakers(), Tracer: tracer}
	if cfg.HTTP.Resolver != nil {
		opts.Resolver = cfg.HTTP.Resolver // left nil otherwise: the default resolver
	}
	e := &Engine{log: log, httpOpts: opts, onHTTPCall: cfg.OnHTTPCall, tracer: tracer,
		eventLimit: cmp.Or(cfg.TraceEventLimit, telemetry.DefaultEventLimit), noServe: cfg.NoServe}
	e.serveCtx, e.serveCancel = context.WithCancel(context.WithoutCancel(ctx))
	if cfg.NoWait {
		name := "the host's backend"
		if cfg.Backend != "" {
			name = "backend " + cfg.Backend
		}
		e.noWait = name + " keeps no waiting jobs, so a WAIT could never resume"
	}
	rc := wazero.NewRuntimeConfigCompiler().WithCloseOnContextDone(true)
	if !cfg.NoCache {
		dir := cfg.CacheDir
		if dir == "" {
			if base, err := os.UserCacheDir(); err == nil {
				dir = filepath.Join(base, "wasmjobs", "wazero")
			}
		}
		if dir != "" {
			cache, err := wazero.NewCompilationCacheWithDir(dir)
			if err != nil {
				if cfg.CacheDir != "" {
					return nil, fmt.Errorf("compilation cache %s: %w", dir, err)
				}
				log.Warn("compilation cache unavailable; compiling in memory only", "dir", dir, "error", err)
			} else {
				e.cache = cache
				rc = rc.WithCompilationCache(cache)
			}
		}
	}
	e.rt = wazero.NewRuntimeWithConfig(ctx, rc)
	wasi, err := wasi_snapshot_preview1.Instantiate(ctx, e.rt)
	if err != nil {
		e.rt.Close(ctx)
		return nil, fmt.Errorf("instantiate WASI: %w", err)
	}
	e.wasiNames = make(map[string]bool)
	for name := range wasi.(api.Module).ExportedFunctionDefinitions() {
		e.wasiNames[name] = true
	}
	if err := e.instantiateHostModule(ctx); err != nil {
		e.rt.Close(ctx)
		return nil, err
	}
	if err := e.instantiateEnv(ctx); err != nil {
		e.rt.Close(ctx)
		return nil, err
	}
	return e, nil
}

// Close closes the runtime, every module and instance made by it, and the cache. It
// first waits, until ctx ends, for the jobs still running to return: a caller that
// gave up on them (a drain past its deadline) has ended their contexts, and each
// returns at the guest's next check. A job still running when ctx ends is closed under.
func (e *Engine) Close(ctx context.Context) error {
	if n, err := e.waitRuns(ctx); err != nil {
		e.log.Warn("closing the engine under jobs still running", "running", n, "error", err)
	}
	// The idle instances' serve loops wait inside a host function, and must return
	// before the runtime closes; they return at once, a running job's at the guest's
	// next check.
	e.serveCancel()
	loops := make(chan struct{})
	go func() {
		e.serves.Wait()
		close(loops)
	}()
	select {
	case <-loops:
	case <-ctx.Done():
		e.log.Warn("closing the engine under serve loops still running", "running", e.loops.Load(), "error", ctx.Err())
	}
	err := e.rt.Close(ctx)
	if e.cache != nil {
		err = errors.Join(err, e.cache.Close(ctx))
	}
	return err
}

// instantiateEnv provides the "env" functions AssemblyScript imports: abort turns into a
// failure with its message, trace into a debug log, seed into a random seed; and those
// the QuickJS engine of a JS handler imports (jsEnvFuncs).
func (e *Engine) instantiateEnv(ctx context.Context) error {
	i32, f64 := api.ValueTypeI32, api.ValueTypeF64
	b := e.rt.NewHostModuleBuilder("env")
	for name, fn := range jsEnvFuncs() {
		t := jsEnvImports[name]
		b.NewFunctionBuilder().WithGoModuleFunction(fn, t.params, t.results).Export(name)
	}
	_, err := b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(asAbort), []api.ValueType{i32, i32, i32, i32}, nil).
		WithParameterNames("message", "fileName", "lineNumber", "columnNumber").Export("abort").
		NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(asTrace), []api.ValueType{i32, i32, f64, f64, f64, f64, f64}, nil).
		WithParameterNames("message", "nArgs", "arg0", "arg1", "arg2", "arg3", "arg4").Export("trace").
		NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(_ context.Context, _ api.Module, stack []uint64) {
		var b [8]byte
		rand.Read(b[:])
		stack[0] = api.EncodeF64(float64(binary.LittleEndian.Uint64(b[:])>>11) / (1 << 53) * math.MaxUint32)
	}), nil, []api.ValueType{f64}).Export("seed").
		Instantiate(ctx)
	if err != nil {
		return fmt.Errorf("instantiate env: %w", err)
	}
	return nil
}

// importOK reports whether the engine provides the imported function module.name with
// the given type, and if not, why. The env.host_* functions are for JS handlers only.
func (e *Engine) importOK(def api.FunctionDefinition, js bool) error {
	module, name, _ := def.Import()
	switch module {
	case abi.ImportModule:
		want, ok := hostFuncs[name]
		if !ok {
			return fmt.Errorf("imports %s.%s, which ABI v1 does not define", module, name)
		}
		if e.noWait != "" && abi.IsWaitFunc(name) {
			return fmt.Errorf("imports %s.%s (fan-out and fan-in), which this host cannot serve: %s", module, name, e.noWait)
		}
		if !sameTypes(def.ParamTypes(), want.params) || !sameTypes(def.ResultTypes(), want.results) {
			return fmt.Errorf("imports %s.%s as %s, want %s", module, name,
				signature(def.ParamTypes(), def.ResultTypes()), signature(want.params, want.results))
		}
		return nil
	case wasi_snapshot_preview1.ModuleName:
		if !e.wasiNames[name] {
			return fmt.Errorf("imports %s.%s, which the host's WASI does not provide", module, name)
		}
		return nil
	case "env":
		if name == "abort" || name == "trace" || name == "seed" {
			return nil
		}
		if want, ok := jsEnvImports[name]; ok && js {
			if !sameTypes(def.ParamTypes(), want.params) || !sameTypes(def.ResultTypes(), want.results) {
				return fmt.Errorf("imports %s.%s as %s, want %s", module, name,
					signature(def.ParamTypes(), def.ResultTypes()), signature(want.params, want.results))
			}
			return nil
		}
	}
	return fmt.Errorf("imports %s.%s, which the host does not provide", module, name)
}

func sameTypes(a, b []api.ValueType) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// signature renders a function type in WAT-like form: (i32, i32) -> i32.
func signature(params, results []api.ValueType) string {
	name := func(ts []api.ValueType) string {
		s := "("
		for i, t := range ts {
			if i > 0 {
				s += ", "
			}
			s += api.ValueTypeName(t)
		}
		return s + ")"
	}
	return name(params) + " -> " + name(results)
}
