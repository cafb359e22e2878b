package host

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/sys"

	"github.com/wasmjobs/wasmjobs/abi"
	"github.com/wasmjobs/wasmjobs/internal/outbound"
	"github.com/wasmjobs/wasmjobs/worker"
)

// ErrInvalidModule is wrapped by every error that rejects a module at load.
var ErrInvalidModule = errors.New("invalid module")

// wasmMagic starts every WebAssembly binary.
var wasmMagic = []byte{0x00, 'a', 's', 'm'}

// Module is one version of one module: compiled, validated, with its manifest and a
// pool of warm instances. Its methods are safe for concurrent use.
type Module struct {
	e        *Engine
	name     string
	version  string
	manifest Manifest
	allowed  map[string]bool
	compiled wazero.CompiledModule
	hasInit  bool   // exports wasmjobs_init
	hasServe bool   // exports wasmjobs_serve
	jsSource []byte // a JS handler's bundle (the JSSection); nil for an ABI v1 module
	loadedAt time.Time
	http     *outbound.Client // the [http] grant's client; nil without a grant
	initSink LogFunc          // logInit

	mu      sync.Mutex
	idle    []*instance
	inUse   int
	retired bool
	closed  chan struct{} // closed when the module is retired and its last job ended

	// jsInterrupts counts the JS runs QuickJS's interrupt handler stopped (a test
	// tells them from wazero's backstop by it).
	jsInterrupts atomic.Int64
	// jsPrelude is the host's JS prelude compiled to the module's engine's bytecode,
	// by its first VM: each VM then loads it instead of parsing the source again.
	jsPrelude atomic.Pointer[[]byte]
	// jsBytecode says the module's engine compiles and loads bytecode (jsBytecodeExports).
	jsBytecode bool
	// jsSnap is a Fresh JS module's VM as the load set it up, which each job's VM
	// starts from; nil for others (and for an engine that cannot be snapshotted). Set
	// before the module is shared, read only after.
	jsSnap *jsSnapshot
	// spare holds the memory (*[]byte) of fresh JS VMs that ended, for the next ones:
	// no megabytes zeroed and collected a job.
	spare sync.Pool
}

// Name returns the module's name: its file name without .wasm.
func (m *Module) Name() string { return m.name }

// Version returns the sha256 of the module's bytes, in hex.
func (m *Module) Version() string { return m.version }

// Manifest returns the module's manifest, defaults filled in.
func (m *Module) Manifest() Manifest { return m.manifest }

// Queue returns the queue the module consumes.
func (m *Module) Queue() string { return m.manifest.Queue }

// Breakers returns the circuit breakers of the module's outbound HTTP on this host
// (shared by its versions), destinations in order; nil without an [http] grant.
func (m *Module) Breakers() []BreakerState {
	if m.http == nil {
		return nil
	}
	states := m.e.httpOpts.Breakers.States(m.name)
	out := make([]BreakerState, len(states))
	for i, st := range states {
		out[i] = BreakerState(st)
	}
	return out
}

// LoadedAt returns when the module was loaded.
func (m *Module) LoadedAt() time.Time { return m.loadedAt }

// Version returns the version of a module's bytes: their sha256 in hex.
func Version(wasm []byte) string {
	sum := sha256.Sum256(wasm)
	return hex.EncodeToString(sum[:])
}

// Load compiles and validates the module name from its bytes and manifest, and makes
// its first instance, running _initialize and wasmjobs_init. Any problem is an error
// wrapping ErrInvalidModule that names it. A manifest without a queue consumes the
// queue name.
func (e *Engine) Load(ctx context.Context, name string, wasm []byte, man Manifest) (*Module, error) {
	invalid := func(format string, args ...any) error {
		return fmt.Errorf("%w %s: %s", ErrInvalidModule, name, fmt.Sprintf(format, args...))
	}
	if !bytes.HasPrefix(wasm, wasmMagic) {
		return nil, invalid("not a wasm module (no \\0asm header)")
	}
	if man.Queue == "" {
		man.Queue = name
	}
	if man.Limits == (Limits{}) {
		man.Limits = DefaultLimits()
	}
	jsSource, isJS := customSection(wasm, JSSection)
	if isJS && man.RecycleAfter == 0 {
		man.RecycleAfter = JSRecycleAfter
	}
	compiled, err := e.rt.CompileModule(ctx, wasm)
	if err != nil {
		return nil, invalid("%v", err)
	}
	m := &Module{
		e:        e,
		name:     name,
		version:  Version(wasm),
		manifest: man,
		compiled: compiled,
		loadedAt: time.Now(),
		closed:   make(chan struct{}),
	}
	m.initSink = m.logInit
	if isJS {
		m.jsSource = append([]byte{}, jsSource...) // empty but not nil: validateJS names it
	}
	if man.Enqueue != nil {
		m.allowed = make(map[string]bool, len(man.Enqueue))
		for _, q := range man.Enqueue {
			m.allowed[q] = true
		}
	}
	if err := m.validate(); err != nil {
		compiled.Close(ctx)
		return nil, invalid("%v", err)
	}
	if man.http != nil {
		opts := e.httpOpts
		opts.Scope = name
		m.http = outbound.NewClient(man.http, opts)
	}
	inst, err := m.instantiate(ctx, time.Time{})
	if err != nil {
		compiled.Close(ctx)
		if m.http != nil {
			m.http.Close()
		}
		return nil, invalid("%v", err)
	}
	if man.Isolation == Fresh {
		if inst.js != nil {
			// Fresh JS VMs start from this one's memory, set up and never given a job.
			var ok bool
			if m.jsSnap, ok = inst.js.snapshot(); !ok {
				e.log.Warn("fresh JS VMs of this module run the engine's start, the prelude and the bundle in every job: its engine exports no mutable "+jsStackPointer+", so it cannot be snapshotted",
					"module", name, "version", m.version)
			}
		}
		inst.close(ctx) // it proved the module initialises; fresh jobs never reuse it
	} else {
		m.idle = append(m.idle, inst)
	}
	return m, nil
}

// validate checks the module's exports and imports against ABI v1.
func (m *Module) validate() error {
	if m.jsSource != nil {
		return m.validateJS()
	}
	fns := m.compiled.ExportedFunctions()
	if _, ok := m.compiled.ExportedMemories()[abi.ExportMemory]; !ok {
		return fmt.Errorf("missing export %q (a memory)", abi.ExportMemory)
	}
	for _, want := range []struct {
		name     string
		required bool
		results  []api.ValueType
	}{
		{abi.ExportMarker, true, nil},
		{abi.ExportHandle, true, []api.ValueType{api.ValueTypeI32}},
		{abi.ExportInitialize, false, nil},
		{abi.ExportInit, false, []api.ValueType{api.ValueTypeI32}},
	} {
		def, ok := fns[want.name]
		switch {
		case !ok && want.required:
			if want.name == abi.ExportMarker {
				return fmt.Errorf("missing export %q: not an ABI v1 module", want.name)
			}
			return fmt.Errorf("missing export %q", want.name)
		case !ok:
			continue
		case len(def.ParamTypes()) != 0 || !sameTypes(def.ResultTypes(), want.results):
			return fmt.Errorf("export %q has type %s, want %s", want.name,
				signature(def.ParamTypes(), def.ResultTypes()), signature(nil, want.results))
		}
	}
	m.hasInit = fns[abi.ExportInit] != nil
	var err error
	if m.hasServe, err = serveExport(fns, m.compiled.ImportedFunctions()); err != nil {
		return err
	}
	if _, ok := fns["_start"]; ok && fns[abi.ExportInitialize] == nil {
		return errors.New("exports _start (a WASI command): build it as a reactor (Go: -buildmode=c-shared; C: -mexec-model=reactor)")
	}
	return m.checkImportsAndMemory(false)
}

// checkImportsAndMemory checks what every module shares, a Wasm handler's and the JS
// engine's alike: each imported function is one the host provides (jsEngine: with the
// engine's env.host_* too), the memory is the module's own, and it starts within the
// manifest's limit.
func (m *Module) checkImportsAndMemory(jsEngine bool) error {
	for _, def := range m.compiled.ImportedFunctions() {
		if err := m.e.importOK(def, jsEngine); err != nil {
			return err
		}
	}
	if mems := m.compiled.ImportedMemories(); len(mems) > 0 {
		mod, name, _ := mems[0].Import()
		return fmt.Errorf("imports memory %s.%s: a module must define its own memory", mod, name)
	}
	mem := m.compiled.ExportedMemories()[abi.ExportMemory]
	if limit := m.manifest.Limits.MemoryPages; mem.Min() > limit {
		return fmt.Errorf("memory starts at %d pages, above the limit of %d pages (%d MiB); raise memory in the manifest",
			mem.Min(), limit, limit/16)
	}
	return nil
}

// instance is one instantiation of a module. It runs one call at a time.
type instance struct {
	mod    api.Module
	handle api.Function
	st     callState
	stdout lineWriter
	stderr lineWriter
	jobs   int
	ctx    context.Context // the current call's, for sleep
	js     *jsVM           // a JS handler's VM; nil for an ABI v1 module
	serve  *serveLoop      // its serve loop; nil when it is called once for each job
	memory *limitedMemory  // its linear memory's bytes
	// interrupts is its module's jsInterrupts.
	interrupts *atomic.Int64
}

// sleep is the instance's WASI sleep: when the call's context ends first, it ends the
// guest there, as wazero's close on the context's end would at the guest's next check
// (the exit code says which end: a cancel or the deadline). Returning early instead left
// a Go guest's runtime to find its timer not due and sleep again, spinning through
// poll_oneoff until that check came: on a loaded machine, up to seconds after a cancel.
func (inst *instance) sleep(ns int64) {
	ctx := inst.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	t := time.NewTimer(time.Duration(ns))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		code := uint32(sys.ExitCodeContextCanceled)
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			code = sys.ExitCodeDeadlineExceeded
		}
		// As WASI's proc_exit ends a guest from within a host function.
		_ = inst.mod.CloseWithExitCode(context.Background(), code)
		panic(sys.NewExitError(code))
	}
}

// instantiate makes a new instance and runs its initialisation: the module's
// _initialize and wasmjobs_init each under the manifest's timeout, and a JS module's VM
// setup until deadline, the job's own (zero at load: the setup then gets at least
// jsSetupMin, see newJSVM).
func (m *Module) instantiate(ctx context.Context, deadline time.Time) (*instance, error) {
	inst := &instance{interrupts: &m.jsInterrupts}
	inst.st.reset(nil, m, m.initSink)
	inst.stdout = lineWriter{st: &inst.st, level: slog.LevelInfo}
	inst.stderr = lineWriter{st: &inst.st, level: slog.LevelWarn}
	cfg := wazero.NewModuleConfig().
		WithName("").
		WithStartFunctions(). // _initialize is called below, to report its failure precisely
		WithStdout(&inst.stdout).
		WithStderr(&inst.stderr).
		WithSysWalltime().
		WithSysNanotime().
		WithNanosleep(inst.sleep).
		WithRandSource(rand.Reader)
	for k, v := range m.manifest.Env {
		cfg = cfg.WithEnv(k, v)
	}
	if len(m.manifest.Dirs) > 0 {
		fs := wazero.NewFSConfig()
		for _, d := range m.manifest.Dirs {
			fs = fs.WithReadOnlyDirMount(d.Host, d.Guest)
		}
		cfg = cfg.WithFSConfig(fs)
	}
	limit := uint64(m.manifest.Limits.MemoryPages) * 65536
	lm := &limitedMemory{limit: limit}
	if m.jsSnap != nil {
		// The snapshot's memory is its size at once (no grow copies it), in the memory of
		// a VM of the module that ended when there is one. Instantiation zeroes what it
		// is given (a start function runs in it); restore's grow to the snapshot's size
		// does not, since restore overwrites those bytes before the guest runs again.
		lm.hint = uint64(len(m.jsSnap.mem))
		if b, ok := m.spare.Get().(*[]byte); ok {
			lm.reuse = *b
		}
	}
	inst.memory = lm
	ictx := experimental.WithMemoryAllocator(ctx, experimental.MemoryAllocatorFunc(func(cap, max uint64) experimental.LinearMemory {
		return lm
	}))
	mod, err := m.e.rt.InstantiateModule(ictx, m.compiled, cfg)
	if err != nil {
		return nil, fmt.Errorf("instantiate: %w", err)
	}
	inst.mod = mod
	inst.handle = mod.ExportedFunction(abi.ExportHandle)
	if m.jsSnap != nil {
		// Its initialisation and set-up are in the snapshot's memory.
		if err := m.jsSnap.restore(inst, m); err != nil {
			mod.Close(ctx)
			return nil, err
		}
		return inst, nil
	}
	for _, fn := range []string{abi.ExportInitialize, abi.ExportInit} {
		f := mod.ExportedFunction(fn)
		if f == nil {
			continue
		}
		res, fail := inst.call(ctx, f, m.manifest.Limits.Timeout)
		inst.st.finish()
		if fail != nil {
			mod.Close(ctx)
			return nil, fmt.Errorf("%s failed: %s", fn, fail.reason)
		}
		if fn == abi.ExportInit && res != 0 {
			mod.Close(ctx)
			return nil, fmt.Errorf("%s returned %d", fn, res)
		}
	}
	if m.jsSource != nil {
		vm, err := newJSVM(ctx, inst, m, deadline)
		if err != nil {
			mod.Close(ctx)
			return nil, err
		}
		inst.js = vm
	}
	if m.hasServe && m.manifest.Isolation == Pooled && !m.e.noServe {
		// One call for the instance's jobs; a fresh instance runs one job, called.
		if err := inst.startServe(ctx, m, mod.ExportedFunction(abi.ExportServe), m.manifest.Limits.Timeout); err != nil {
			mod.Close(ctx)
			return nil, err
		}
	}
	return inst, nil
}

// logInit sends logs of calls without a job (initialisation) to the engine's logger;
// initSink is it, made once.
func (m *Module) logInit(level slog.Level, msg string) {
	m.e.log.Log(context.Background(), level, msg, "module", m.name, "version", m.version)
}

// failure is a call that did not return normally.
type failure struct {
	cause  Cause
	reason string
}

// Error returns the failure's reason: a run's span records it as its error.
func (f *failure) Error() string { return f.reason }

// call runs f on the instance under timeout and classifies how it ended.
func (inst *instance) call(ctx context.Context, f api.Function, timeout time.Duration) (int32, *failure) {
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	inst.ctx = cctx
	res, err := f.Call(&callContext{Context: cctx, st: &inst.st})
	inst.st.http.close() // requests the guest left open end with its call
	inst.ctx = nil
	inst.stdout.flush()
	inst.stderr.flush()
	if err == nil && cctx.Err() != nil {
		// The limit passed while the guest was in the host (asleep, say) and it returned
		// without reaching another check: wazero has closed it; the call failed.
		err = cctx.Err()
	}
	if err == nil {
		if len(res) == 0 {
			return 0, nil // _initialize returns nothing
		}
		return int32(res[0]), nil
	}
	return 0, classify(ctx, err, timeout)
}

// cancelled is the failure of a run whose context ctx was cancelled: by an operator
// (worker.Worker.Cancel, whose cause is worker.ErrCancelled), never retried, or by the
// host's drain, retried elsewhere.
func cancelled(ctx context.Context) *failure {
	if errors.Is(context.Cause(ctx), worker.ErrCancelled) {
		return &failure{CauseCancelled, worker.ErrCancelled.Error()}
	}
	return &failure{CauseTimeout, "cancelled: the host is shutting down"}
}

// timedOut is the failure of a run whose limit of timeout passed.
func timedOut(timeout time.Duration) *failure {
	return &failure{CauseTimeout, fmt.Sprintf("timeout after %v", timeout)}
}

// classify names how a call under ctx failed.
func classify(ctx context.Context, err error, timeout time.Duration) *failure {
	var exit *sys.ExitError
	var mem *memoryAccessError
	var abort *abortError
	switch {
	case errors.As(err, &exit):
		switch exit.ExitCode() {
		case sys.ExitCodeDeadlineExceeded:
			return timedOut(timeout)
		case sys.ExitCodeContextCanceled:
			return cancelled(ctx)
		}
		return &failure{CauseExit, fmt.Sprintf("exit code %d", exit.ExitCode())}
	case errors.As(err, &mem):
		return &failure{CauseTrap, "trap: " + mem.Error()}
	case errors.As(err, &abort):
		return &failure{CauseTrap, "trap: " + abort.msg}
	case errors.Is(err, context.DeadlineExceeded):
		return timedOut(timeout)
	case errors.Is(err, context.Canceled):
		return cancelled(ctx)
	}
	msg := err.Error()
	if line, _, _ := strings.Cut(msg, "\n"); line != "" {
		msg = line
	}
	msg = strings.TrimPrefix(msg, "wasm error: ")
	return &failure{CauseTrap, "trap: " + msg}
}

// close ends the instance, and its serve loop first.
func (inst *instance) close(ctx context.Context) {
	if inst.serve != nil {
		inst.serve.stop()
	}
	inst.mod.Close(ctx)
}

// alive reports whether the instance can take another job: its module is open, and
// its serve loop, if it has one, was not ended.
func (inst *instance) alive() bool {
	return !inst.mod.IsClosed() && (inst.serve == nil || !inst.serve.killed && inst.serve.ctx.Err() == nil)
}

// errRetired is returned by begin for a module that was retired: the caller takes the
// queue's current module instead.
var errRetired = errors.New("module version retired")

// begin counts a job in, unless the module is retired.
func (m *Module) begin() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.retired {
		return errRetired
	}
	m.inUse++
	return nil
}

// instanceFor takes an instance for a job counted in by begin: a warm one, or a new one.
// On error the job is counted out.
func (m *Module) instanceFor(ctx context.Context, deadline time.Time) (*instance, error) {
	m.mu.Lock()
	var inst *instance
	if m.manifest.Isolation == Pooled && len(m.idle) > 0 {
		inst = m.idle[len(m.idle)-1]
		m.idle = m.idle[:len(m.idle)-1]
	}
	m.mu.Unlock()
	if inst != nil {
		return inst, nil
	}
	inst, err := m.instantiate(ctx, deadline)
	if err != nil {
		m.release(nil, false)
		return nil, err
	}
	return inst, nil
}

// release returns an instance after a job: to the pool if it is healthy and pooled,
// closed otherwise. It closes the module's compiled code once the module is retired and
// its last job has ended.
func (m *Module) release(inst *instance, healthy bool) {
	ctx := context.Background()
	m.mu.Lock()
	m.inUse--
	keep := inst != nil && healthy && !m.retired && m.manifest.Isolation == Pooled &&
		(m.manifest.RecycleAfter == 0 || inst.jobs < m.manifest.RecycleAfter)
	if keep {
		m.idle = append(m.idle, inst)
	}
	last := m.retired && m.inUse == 0
	m.mu.Unlock()
	if inst != nil && !keep {
		// A fresh JS VM's memory serves the next one: its run has returned, and nothing
		// else touches a VM's memory outside its runs (a JS run waits for its body reads).
		// Taken before the close, whose Free would drop it; not one that grew well past
		// the snapshot (a pool of them would hold the manifest's limit each).
		var b []byte
		if m.jsSnap != nil {
			b = inst.memory.take(4 * uint64(len(m.jsSnap.mem)))
		}
		inst.close(ctx)
		if b != nil {
			m.spare.Put(&b)
		}
	}
	if last {
		m.closeCompiled(ctx)
	}
}

// Retire stops the module from taking new jobs and closes it once the jobs running on
// it have ended; Done is closed then. Retire is idempotent.
func (m *Module) Retire() {
	m.mu.Lock()
	if m.retired {
		m.mu.Unlock()
		return
	}
	m.retired = true
	idle := m.idle
	m.idle = nil
	// Closing a served instance waits for its loop's call to return, which is guest
	// code: the loops all end at once, and the caller (a registry under its lock) does
	// not wait for them. Their closing counts as a job in use, so that Done (closed by
	// the last release) says when they have ended.
	served := len(idle) > 0 && idle[0].serve != nil
	if served {
		m.inUse++
	}
	last := m.inUse == 0
	m.mu.Unlock()
	if served {
		for _, inst := range idle {
			inst.serve.cancel()
		}
		go func() {
			for _, inst := range idle {
				inst.close(context.Background())
			}
			m.release(nil, false)
		}()
		return
	}
	for _, inst := range idle {
		inst.close(context.Background())
	}
	if last {
		m.closeCompiled(context.Background())
	}
}

// Done is closed when a retired module has been closed.
func (m *Module) Done() <-chan struct{} { return m.closed }

// InUse reports how many jobs are running on the module.
func (m *Module) InUse() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.inUse
}

func (m *Module) closeCompiled(ctx context.Context) {
	m.compiled.Close(ctx)
	if m.http != nil {
		m.http.Close()
	}
	close(m.closed)
}

// limitedMemory backs an instance's linear memory and refuses to grow past limit, so
// that memory.grow returns -1 to the guest.
type limitedMemory struct {
	// mu guards buf against a Free from another goroutine (the runtime's close while a
	// run ends) racing take.
	mu    sync.Mutex
	buf   []byte
	limit uint64
	hint  uint64 // the capacity to give the first allocation, within limit

	// reuse is the memory of an instance that ended, for the first allocation: its
	// bytes are another VM's, and every byte of it the guest is given is zeroed first,
	// as Wasm requires of new memory, except those below overwrite, which the caller
	// sets only while it overwrites them itself (restore) and puts back to 0 before
	// the guest runs.
	reuse     []byte
	overwrite uint64
	dirty     bool // buf's bytes past its length are not all zero
}

// take returns the memory's bytes, at their whole capacity, for another instance,
// and forgets them; nil when they were freed, or when their capacity passes most.
func (l *limitedMemory) take(most uint64) []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buf
	if b == nil || uint64(cap(b)) > most {
		return nil
	}
	l.buf = nil
	return b[:cap(b)]
}

func (l *limitedMemory) Reallocate(size uint64) []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	if size > l.limit && l.buf != nil {
		return nil
	}
	if l.buf == nil && l.reuse != nil {
		if size <= uint64(cap(l.reuse)) {
			l.buf, l.dirty = l.reuse[:0], true
		}
		l.reuse = nil
	}
	if size <= uint64(cap(l.buf)) {
		from := uint64(len(l.buf))
		l.buf = l.buf[:size]
		if l.dirty && size > max(from, l.overwrite) {
			clear(l.buf[max(from, l.overwrite):])
		}
		return l.buf
	}
	// Grow geometrically, within the limit, so that repeated grows copy little.
	newCap := max(size, min(max(2*uint64(cap(l.buf)), l.hint), l.limit))
	buf := make([]byte, size, newCap)
	copy(buf, l.buf)
	l.buf, l.dirty = buf, false
	return buf
}

// setOverwrite sets overwrite (see reuse).
func (l *limitedMemory) setOverwrite(n uint64) {
	l.mu.Lock()
	l.overwrite = n
	l.mu.Unlock()
}

func (l *limitedMemory) Free() {
	l.mu.Lock()
	l.buf = nil
	l.mu.Unlock()
}

// lineWriter turns a guest's stdout or stderr into log lines of the current call.
type lineWriter struct {
	st       *callState
	loop     *serveLoop // the instance's serve loop, if it has one: once it has stopped, lines are dropped
	level    slog.Level
	buf      []byte
	skipping bool // the current line passed the message limit: drop to its end
}

func (w *lineWriter) Write(p []byte) (int, error) {
	n := len(p)
	if w.loop != nil && w.loop.stopped {
		return n, nil // a guest running on past next_job's 0 writes to no job
	}
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		chunk := p
		if i >= 0 {
			chunk = p[:i]
		}
		if !w.skipping {
			w.buf = append(w.buf, chunk...)
			if max := w.st.limits.MaxLogMessage; len(w.buf) > max {
				w.st.emit(w.level, string(w.buf[:max])+" ... (truncated)")
				w.buf, w.skipping = w.buf[:0], true
			}
		}
		if i < 0 {
			break
		}
		if !w.skipping {
			w.st.emit(w.level, string(w.buf))
		}
		w.buf, w.skipping = w.buf[:0], false
		p = p[i+1:]
	}
	return n, nil
}

// flush emits a trailing partial line.
func (w *lineWriter) flush() {
	if len(w.buf) > 0 && !w.skipping {
		w.st.emit(w.level, string(w.buf))
	}
	w.buf, w.skipping = w.buf[:0], false
}
