package host

import (
	"bytes"
	"context"
	"crypto/rand"
	_ "embed"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/tetratelabs/wazero/api"

	"github.com/wasmjobs/wasmjobs/abi"
)

// JSSection is the custom section that makes a module a JavaScript handler: the module
// is the QuickJS engine (npm's quickjs-wasi) and the section holds the handler's bundled
// source. The host runs such a module through the JS adapter below instead of calling
// wasmjobs_handle (abi/SPEC.md, "JavaScript handlers").
const JSSection = "wasmjobs.js"

// JSRecycleAfter is the number of jobs after which a pooled JS VM is replaced when the
// manifest sets no recycle_after: a JS heap keeps what a handler leaves in globals and
// fragments, so a VM is not kept for ever.
const JSRecycleAfter = 1000

// jsBackstop is how long past the job's deadline wazero closes a JS instance whose
// interrupt handler did not stop it (the engine polls the handler between bytecodes,
// not inside one long native call such as a huge JSON.parse).
const jsBackstop = 250 * time.Millisecond

//go:embed jsruntime/prelude.js
var jsPrelude string

// The ops of __wasmjobs_host, the one host function the prelude is given.
const (
	jsOpPayload     = 1  // () -> Uint8Array
	jsOpText        = 2  // () -> string
	jsOpMeta        = 3  // (key) -> string
	jsOpAttempt     = 4  // () -> number
	jsOpMaxAttempts = 5  // () -> number
	jsOpHeader      = 6  // (key) -> string | undefined
	jsOpLog         = 7  // (level, msg)
	jsOpOutput      = 8  // (string | ArrayBuffer) -> status
	jsOpEnqueue     = 9  // (queue, string | ArrayBuffer, delayMs, await) -> status
	jsOpSettle      = 10 // (code, reason, delayMs); code -1: a failure with reason; () alone: an ack
	jsOpLoadError   = 11 // (msg): the bundle did not load

	// Outbound HTTP and timers: fetch, AbortSignal and setTimeout.
	jsOpFetch       = 12 // (method, url, header lines, body) -> handle | status
	jsOpFetchHead   = 13 // (handle) -> a promise of the head's status
	jsOpFetchError  = 14 // (handle; -1: the last refused start) -> string | undefined
	jsOpFetchInfo   = 15 // (handle) -> "statusText\nredirected\nurl\nheader lines"
	jsOpFetchBody   = 16 // (handle, bound) -> Uint8Array | status | 1: not yet, yield and ask again
	jsOpFetchClose  = 17 // (handle)
	jsOpTimer       = 18 // (id, ms) -> a promise resolved after ms | undefined past the cap
	jsOpTimerCancel = 19 // (id)
	jsOpEncode      = 20 // (string) -> Uint8Array of its UTF-8
	jsOpDecode      = 21 // (ArrayBuffer, fatal) -> string | undefined (fatal and invalid)

	// Fan-out and fan-in.
	jsOpRound    = 22 // () -> number
	jsOpChildren = 23 // () -> JSON of [{id, queue, state, reason, output, truncated}]

	// The seed of Math.random.
	jsOpRandom = 24 // () -> Uint8Array of 16 random bytes
	jsOpLast   = jsOpRandom
)

// jsHostName is the name the host function is registered under in the engine.
const jsHostName = "wasmjobs"

// jsExports are the engine's exports the adapter calls, with their types. The outer
// ones drive a job; the inner ones are called from within host_call, so they are
// separate api.Function values (wazero's functions are not reentrant).
var jsExports = map[string]funcType{
	"qjs_init":                  {nil, []api.ValueType{i32}},
	"qjs_set_memory_limit":      {[]api.ValueType{i32}, nil},
	"qjs_set_interrupt_handler": {[]api.ValueType{i32}, nil},
	"qjs_set_max_stack_size":    {[]api.ValueType{i32}, nil},
	"qjs_get_allocated_size":    {nil, []api.ValueType{i32}},
	"qjs_eval":                  {[]api.ValueType{i32, i32, i32, i32}, []api.ValueType{i32}},
	"qjs_call":                  {[]api.ValueType{i32, i32, i32, i32}, []api.ValueType{i32}},
	"qjs_is_job_pending":        {nil, []api.ValueType{i32}},
	"qjs_execute_pending_job":   {nil, []api.ValueType{i32}},
	"qjs_is_exception":          {[]api.ValueType{i32}, []api.ValueType{i32}},
	"qjs_get_exception":         {nil, []api.ValueType{i32}},
	"qjs_get_global":            {nil, []api.ValueType{i32}},
	"qjs_get_prop_string":       {[]api.ValueType{i32, i32}, []api.ValueType{i32}},
	"qjs_set_prop_string":       {[]api.ValueType{i32, i32, i32}, []api.ValueType{i32}},
	"qjs_new_host_function":     {[]api.ValueType{i32, i32, i32}, []api.ValueType{i32}},
	"qjs_new_string":            {[]api.ValueType{i32, i32}, []api.ValueType{i32}},
	"qjs_new_number":            {[]api.ValueType{api.ValueTypeF64}, []api.ValueType{i32}},
	"qjs_new_uint8_array":       {[]api.ValueType{i32, i32}, []api.ValueType{i32}},
	"qjs_get_undefined":         {nil, []api.ValueType{i32}},
	"qjs_is_string":             {[]api.ValueType{i32}, []api.ValueType{i32}},
	"qjs_is_number":             {[]api.ValueType{i32}, []api.ValueType{i32}},
	"qjs_is_array_buffer":       {[]api.ValueType{i32}, []api.ValueType{i32}},
	"qjs_get_float64":           {[]api.ValueType{i32}, []api.ValueType{api.ValueTypeF64}},
	"qjs_get_string_len":        {[]api.ValueType{i32, i32}, []api.ValueType{i32}},
	"qjs_free_cstring":          {[]api.ValueType{i32}, nil},
	"qjs_get_array_buffer":      {[]api.ValueType{i32, i32}, []api.ValueType{i32}},
	"qjs_free_value":            {[]api.ValueType{i32}, nil},
	"qjs_new_promise":           {[]api.ValueType{i32, i32}, []api.ValueType{i32}},
	"malloc":                    {[]api.ValueType{i32}, []api.ValueType{i32}},
	"free":                      {[]api.ValueType{i32}, nil},
}

// jsBytecodeExports are the engine's exports that compile and load bytecode, with their
// types: with both, the prelude is parsed once per module (jsVM.prelude); an engine
// without them has it evaluated from source by each VM.
var jsBytecodeExports = map[string]funcType{
	"qjs_compile":       {[]api.ValueType{i32, i32, i32, i32, i32, i32}, []api.ValueType{i32}},
	"qjs_eval_bytecode": {[]api.ValueType{i32, i32}, []api.ValueType{i32}},
}

// jsEnvImports are the env functions the engine imports, with their types.
var jsEnvImports = map[string]funcType{
	"host_call":                {[]api.ValueType{i32, i32, i32, i32, i32}, []api.ValueType{i32}},
	"host_interrupt":           {nil, []api.ValueType{i32}},
	"host_promise_rejection":   {[]api.ValueType{i32, i32, i32}, nil},
	"host_module_normalize":    {[]api.ValueType{i32, i32}, []api.ValueType{i32}},
	"host_module_load":         {[]api.ValueType{i32, i32}, []api.ValueType{i32}},
	"host_get_timezone_offset": {[]api.ValueType{i32, i32}, []api.ValueType{i32}},
}

// customSection returns the content of the first custom section called name in a
// WebAssembly binary. A binary it cannot walk has none; the compiler names its fault.
func customSection(wasm []byte, name string) ([]byte, bool) {
	if len(wasm) < 8 {
		return nil, false
	}
	p := wasm[8:]
	for len(p) > 0 {
		id := p[0]
		size, n := uleb32(p[1:])
		if n == 0 || uint64(size) > uint64(len(p)-1-n) {
			return nil, false
		}
		body := p[1+n : 1+n+int(size)]
		p = p[1+n+int(size):]
		if id != 0 {
			continue
		}
		nlen, m := uleb32(body)
		if m == 0 || uint64(nlen) > uint64(len(body)-m) {
			return nil, false
		}
		if string(body[m:m+int(nlen)]) == name {
			return body[m+int(nlen):], true
		}
	}
	return nil, false
}

// uleb32 decodes an unsigned LEB128 of at most 5 bytes; n is 0 when it is malformed.
func uleb32(b []byte) (v uint32, n int) {
	var shift uint
	for i := 0; i < len(b) && i < 5; i++ {
		v |= uint32(b[i]&0x7f) << shift
		if b[i]&0x80 == 0 {
			return v, i + 1
		}
		shift += 7
	}
	return 0, 0
}

// validateJS checks a JS module: the engine's exports and imports the adapter needs.
func (m *Module) validateJS() error {
	if _, ok := m.compiled.ExportedMemories()[abi.ExportMemory]; !ok {
		return fmt.Errorf("missing export %q (a memory)", abi.ExportMemory)
	}
	if len(m.jsSource) == 0 {
		return fmt.Errorf("custom section %q is empty: no handler was bundled", JSSection)
	}
	fns := m.compiled.ExportedFunctions()
	want := map[string]funcType{abi.ExportInitialize: {}}
	for k, v := range jsExports {
		want[k] = v
	}
	for name, t := range want {
		def, ok := fns[name]
		if !ok {
			return fmt.Errorf("has a %q section but is not the QuickJS engine of quickjs-wasi: missing export %q", JSSection, name)
		}
		if !sameTypes(def.ParamTypes(), t.params) || !sameTypes(def.ResultTypes(), t.results) {
			return fmt.Errorf("export %q has type %s, want %s", name,
				signature(def.ParamTypes(), def.ResultTypes()), signature(t.params, t.results))
		}
	}
	m.jsBytecode = true
	for name, t := range jsBytecodeExports {
		def, ok := fns[name]
		if !ok || !sameTypes(def.ParamTypes(), t.params) || !sameTypes(def.ResultTypes(), t.results) {
			m.jsBytecode = false
		}
	}
	return m.checkImportsAndMemory(true)
}

// jsVM is one QuickJS runtime and context in one instance of the engine, with the
// handler loaded. It runs one job at a time, like its instance.
type jsVM struct {
	inst *instance
	mem  api.Memory
	fn   *jsFuncs // outer calls
	in   *jsFuncs // calls from within host_call
	jsGuestRefs

	// Per call.
	deadline    time.Time
	done        <-chan struct{}
	interrupted bool
	settled     bool
	code        int32
	failMsg     string // the reason of code -1
	hostFail    string // the host could not pass a value in (guest memory exhausted)
	loadErr     string
	leftover    bool // promise jobs were still queued when the handler settled

	// Outbound HTTP and timers (fetch, AbortSignal, setTimeout), per call.
	outer    context.Context   // the job's: it ends when the host shuts down
	reqCtx   context.Context   // the requests': it ends at the job's deadline
	pending  []jsPending       // promises the host resolves: request heads and timers
	timers   int               // the timers of pending
	startErr string            // why the last fetch was refused before it had a handle
	bodies   map[int32]*jsBody // the bodies being read, by handle
	reads    sync.WaitGroup    // the chunk reads of bodies under way
}

// jsGuestRefs is what the adapter keeps of a VM's guest memory: addresses in it and
// what set-up found there. A snapshot keeps them with the memory they point into.
type jsGuestRefs struct {
	undef   uint32 // a JSValue* of undefined, kept
	run     uint32 // a JSValue* of __wasmjobs_run, kept
	scratch uint32 // 4 bytes of guest memory for out-lengths
	argv    uint32 // 4 bytes of guest memory: the argument of a resolve
	limit   uint32 // QuickJS's memory limit in bytes

	// boxed says a JSValue is the engine's 64-bit NaN-boxed word, its tag in the high
	// half (checked at setup on undefined): an int or undefined argument is then read
	// from guest memory, without the two calls of qjs_is_number and qjs_get_float64.
	boxed bool
	// buf is guest memory kept for the bytes of a value passed in (jsBufMax at most):
	// the engine's constructors copy them, so one buffer serves every value, without a
	// malloc and a free each.
	buf, bufCap uint32
}

// jsSetupMin is the least time a JS VM's setup gets (newJSVM).
const jsSetupMin = 10 * time.Second

// jsMaxStack is QuickJS's stack limit, in bytes.
const jsMaxStack = 512 << 10

// jsMinHeap is the least memory QuickJS may have; a smaller manifest limit is refused.
const jsMinHeap = 4 << 20

// jsBufMax bounds the guest buffer a VM keeps for values passed in (jsVM.buf); a larger
// value gets memory of its own for the call.
const jsBufMax = 64 << 10

// The tags of the engine's NaN-boxed JSValue (quickjs.h) the adapter reads itself.
const (
	jsTagInt       = 0
	jsTagUndefined = 3
)

// errJSSetupTimeout is a JS VM's setup that passed the job's deadline.
var errJSSetupTimeout = errors.New("timeout")

// newJSVM starts QuickJS in a freshly initialised instance, with the memory limit and
// interrupt handler, the host function, the prelude and the handler's bundle. In a job
// it runs until the job's deadline; at load (deadline zero) it gets the manifest's
// timeout but at least jsSetupMin.
func newJSVM(ctx context.Context, inst *instance, m *Module, deadline time.Time) (*jsVM, error) {
	vm := bindJSVM(inst, m)
	// At load, the engine's start and the bundle's evaluation take a few milliseconds,
	// more on a loaded machine (compiling): they get at least jsSetupMin, whatever the
	// job's timeout. In a job, the job's timeout is a promise: setup and run share it.
	timeout := m.manifest.Limits.Timeout
	if deadline.IsZero() {
		deadline = time.Now().Add(max(timeout, jsSetupMin))
		timeout = max(timeout, jsSetupMin)
	}
	cctx, cancel := context.WithDeadline(ctx, deadline.Add(jsBackstop))
	defer cancel()
	vm.deadline, vm.done = deadline, ctx.Done()
	c := &callContext{Context: cctx, st: &inst.st}
	rctx, rcancel := context.WithDeadline(c, deadline)
	defer rcancel()
	vm.outer, vm.reqCtx = ctx, rctx
	// Requests the setup left open end with it, as a call's do (instance.call); the
	// promises of a fetch or timer started by the bundle's top level never resolve
	// (the drive loop runs in jobs only). The setup's requests are reported to
	// OnHTTPCall as a job's are: the next job's reset would drop their records.
	defer func() { m.calls(inst.st.http.end()) }()
	err := vm.setup(c, m)
	if err == nil {
		err = vm.dropPending(c, vm.fn)
	}
	inst.stdout.flush()
	inst.stderr.flush()
	if err != nil {
		if vm.interrupted || time.Now().After(deadline) {
			return nil, fmt.Errorf("loading the JS handler: %w after %v", errJSSetupTimeout, timeout)
		}
		var fe *jsSetupError
		if errors.As(err, &fe) {
			return nil, err
		}
		return nil, fmt.Errorf("loading the JS handler: %s", classify(ctx, err, timeout).reason)
	}
	return vm, nil
}

// bindJSVM is a VM of the engine in inst, not yet set up, and the instance's calls
// pointed at it.
func bindJSVM(inst *instance, m *Module) *jsVM {
	vm := &jsVM{inst: inst, mem: inst.mod.Memory(), fn: newJSFuncs(inst.mod), in: newJSFuncs(inst.mod)}
	inst.st.js = vm
	return vm
}

// jsFuncs are the engine's exported functions for one kind of call (a VM keeps two
// sets: a wazero Function is not reentrant, and host_call calls the engine from within
// a call), each made at its first use: a VM uses a few of the engine's fifty-odd in most
// jobs, and making them all was a tenth of a fresh VM's start.
type jsFuncs struct {
	mod api.Module
	fns map[string]api.Function
}

func newJSFuncs(mod api.Module) *jsFuncs {
	return &jsFuncs{mod: mod, fns: make(map[string]api.Function, 16)}
}

// get returns the export name (the load checked that the engine has it).
func (f *jsFuncs) get(name string) api.Function {
	fn, ok := f.fns[name]
	if !ok {
		fn = f.mod.ExportedFunction(name)
		f.fns[name] = fn
	}
	return fn
}

// jsStackPointer is the engine's one mutable global (wasi-libc's C stack pointer),
// which a snapshot keeps beside the memory.
const jsStackPointer = "__stack_pointer"

// jsSnapshot is a JS VM as its set-up left it, before any job: the engine's whole
// memory (QuickJS's runtime and context, the prelude, the handler's bundle evaluated),
// its stack pointer, and the guest addresses the adapter keeps. A Fresh module's VMs
// start from it (restore): a copy of memory in place of the engine's start, the
// prelude and the bundle, milliseconds each job. Nothing of a job is in it: it is taken
// from the VM the module's load sets up, which runs none.
type jsSnapshot struct {
	mem  []byte
	sp   uint64
	refs jsGuestRefs // into mem
}

// snapshot takes vm's snapshot, or reports that it cannot: an engine without an
// exported mutable stack pointer (its state would not all be in its memory).
func (vm *jsVM) snapshot() (*jsSnapshot, bool) {
	sp, ok := vm.inst.mod.ExportedGlobal(jsStackPointer).(api.MutableGlobal)
	if !ok {
		return nil, false
	}
	b, ok := vm.mem.Read(0, vm.mem.Size())
	if !ok {
		return nil, false
	}
	return &jsSnapshot{mem: bytes.Clone(b), sp: sp.Get(), refs: vm.jsGuestRefs}, true
}

// restore makes the engine in inst, just instantiated and not initialised, the VM s was
// taken from: its memory grown to the snapshot's size and overwritten whole, its stack
// pointer set. Math.random is seeded again at the VM's first draw (the prelude's
// __wasmjobs_load left it unseeded), so fresh VMs never share its numbers.
func (s *jsSnapshot) restore(inst *instance, m *Module) error {
	mem := inst.mod.Memory()
	// The bytes up to the snapshot's size are overwritten below, before the guest runs:
	// a reused memory's need no zeroing as it grows to them.
	inst.memory.setOverwrite(uint64(len(s.mem)))
	defer inst.memory.setOverwrite(0)
	if have, want := uint64(mem.Size()), uint64(len(s.mem)); want > have {
		if _, ok := mem.Grow(uint32((want - have) / 65536)); !ok {
			return fmt.Errorf("starting the JS VM from its snapshot: memory cannot grow to the snapshot's %d bytes", want)
		}
	}
	if mem.Size() != uint32(len(s.mem)) || !mem.Write(0, s.mem) {
		return fmt.Errorf("starting the JS VM from its snapshot: its %d bytes are not its memory's %d", len(s.mem), mem.Size())
	}
	sp, ok := inst.mod.ExportedGlobal(jsStackPointer).(api.MutableGlobal)
	if !ok {
		return fmt.Errorf("starting the JS VM from its snapshot: no mutable global %q", jsStackPointer)
	}
	sp.Set(s.sp)
	vm := bindJSVM(inst, m)
	vm.jsGuestRefs = s.refs
	inst.js = vm
	return nil
}

type jsSetupError struct{ msg string }

func (e *jsSetupError) Error() string { return e.msg }

func (vm *jsVM) call(ctx context.Context, name string, params ...uint64) (uint32, error) {
	res, err := vm.fn.get(name).Call(ctx, params...)
	if err != nil {
		return 0, err
	}
	if len(res) == 0 {
		return 0, nil
	}
	return uint32(res[0]), nil
}

// cstring puts s, NUL-terminated, into guest memory; the caller frees it.
func (vm *jsVM) cstring(ctx context.Context, s string) (uint32, error) {
	p, err := vm.call(ctx, "malloc", uint64(len(s)+1))
	if err != nil {
		return 0, err
	}
	if p == 0 || !vm.mem.Write(p, append([]byte(s), 0)) {
		return 0, &jsSetupError{"loading the JS handler: out of memory"}
	}
	return p, nil
}

func (vm *jsVM) setup(ctx context.Context, m *Module) error {
	if r, err := vm.call(ctx, "qjs_init"); err != nil {
		return err
	} else if r != 0 {
		return &jsSetupError{fmt.Sprintf("qjs_init returned %d", int32(r))}
	}
	// The manifest's memory bounds the instance (limitedMemory); QuickJS gets what is
	// left of it after the engine's own start, less a sixteenth for the allocator's
	// overhead, so that a greedy handler meets QuickJS's clean "out of memory" before
	// the wasm allocator fails.
	limit := uint64(m.manifest.Limits.MemoryPages) * 65536
	base := uint64(vm.mem.Size())
	heap := int64(limit) - int64(base) - int64(limit/16)
	if heap < jsMinHeap {
		return &jsSetupError{fmt.Sprintf("a memory limit of %d pages leaves QuickJS %d KiB, less than the %d MiB it needs; raise memory in the manifest",
			m.manifest.Limits.MemoryPages, max(heap, 0)/1024, jsMinHeap>>20)}
	}
	vm.limit = uint32(min(heap, math.MaxUint32))
	if _, err := vm.call(ctx, "qjs_set_memory_limit", uint64(vm.limit)); err != nil {
		return err
	}
	if _, err := vm.call(ctx, "qjs_set_interrupt_handler", 1); err != nil {
		return err
	}
	// The engine's C stack is 1 MiB of its linear memory (quickjs-wasi's link), below
	// which it would run into its data: QuickJS's own check stops JS recursion well
	// before, with a RangeError the handler can catch.
	if _, err := vm.call(ctx, "qjs_set_max_stack_size", jsMaxStack); err != nil {
		return err
	}
	var err error
	if vm.scratch, err = vm.call(ctx, "malloc", 8); err != nil {
		return err
	}
	if vm.argv, err = vm.call(ctx, "malloc", 4); err != nil {
		return err
	}
	if vm.undef, err = vm.call(ctx, "qjs_get_undefined"); err != nil {
		return err
	}
	if w, ok := vm.mem.ReadUint64Le(vm.undef); ok && w == jsTagUndefined<<32 {
		vm.boxed = true
	}
	global, err := vm.call(ctx, "qjs_get_global")
	if err != nil {
		return err
	}
	name, err := vm.cstring(ctx, jsHostName)
	if err != nil {
		return err
	}
	fn, err := vm.call(ctx, "qjs_new_host_function", uint64(name), uint64(len(jsHostName)), 0)
	if err != nil {
		return err
	}
	prop, err := vm.cstring(ctx, "__wasmjobs_host")
	if err != nil {
		return err
	}
	if _, err := vm.call(ctx, "qjs_set_prop_string", uint64(global), uint64(prop), uint64(fn)); err != nil {
		return err
	}
	if _, err := vm.call(ctx, "qjs_free_value", uint64(fn)); err != nil {
		return err
	}
	if err := vm.prelude(ctx, m); err != nil {
		return err
	}
	load, err := vm.global(ctx, global, "__wasmjobs_load")
	if err != nil {
		return err
	}
	if vm.run, err = vm.global(ctx, global, "__wasmjobs_run"); err != nil {
		return err
	}
	src, err := vm.newString(ctx, vm.fn, m.jsSource)
	if err != nil {
		return err
	}
	if src == 0 {
		return &jsSetupError{"loading the JS handler: out of memory"}
	}
	binary := [4]byte{byte(src), byte(src >> 8), byte(src >> 16), byte(src >> 24)}
	if !vm.mem.Write(vm.scratch, binary[:]) {
		return &jsSetupError{"loading the JS handler: bad scratch pointer"}
	}
	res, err := vm.call(ctx, "qjs_call", uint64(load), uint64(vm.undef), 1, uint64(vm.scratch))
	if err != nil {
		return err
	}
	if exc, err := vm.takeException(ctx, res); err != nil {
		return err
	} else if exc {
		return &jsSetupError{"loading the JS handler: it threw an uncatchable exception (interrupted or out of memory)"}
	}
	for _, p := range []uint32{load, src, global, name, prop} {
		f := "qjs_free_value"
		if p == name || p == prop {
			f = "free"
		}
		if _, err := vm.call(ctx, f, uint64(p)); err != nil {
			return err
		}
	}
	if vm.loadErr != "" {
		return &jsSetupError{vm.loadErr}
	}
	return nil
}

// global returns a JSValue* of a named property of obj (the global object, mostly).
func (vm *jsVM) global(ctx context.Context, global uint32, name string) (uint32, error) {
	c, err := vm.cstring(ctx, name)
	if err != nil {
		return 0, err
	}
	v, err := vm.call(ctx, "qjs_get_prop_string", uint64(global), uint64(c))
	if err != nil {
		return 0, err
	}
	_, err = vm.call(ctx, "free", uint64(c))
	return v, err
}

// jsPreludeFile is the prelude's file name in stack traces.
const jsPreludeFile = "wasmjobs-prelude.js"

// prelude evaluates the host's prelude at global scope, from the bytecode the module's
// first VM compiled: parsing its source took most of a VM's setup (14 of 21 ms here),
// which a pooled VM pays every recycle_after jobs and a fresh one every job.
func (vm *jsVM) prelude(ctx context.Context, m *Module) error {
	if !m.jsBytecode {
		return vm.eval(ctx, jsPrelude, jsPreludeFile)
	}
	bc := m.jsPrelude.Load()
	if bc == nil {
		b, err := vm.compile(ctx, jsPrelude, jsPreludeFile)
		switch {
		case err != nil:
			return err
		case b == nil:
			// The engine would not compile it (or made more bytecode than the prelude
			// can be): this VM evaluates the source, and so does the next, which tries
			// again.
			return vm.eval(ctx, jsPrelude, jsPreludeFile)
		}
		bc = &b
		m.jsPrelude.Store(bc)
	}
	p, own, err := vm.bytesIn(ctx, vm.fn, len(*bc))
	if err != nil {
		return err
	}
	if p == 0 || !vm.mem.Write(p, *bc) {
		return &jsSetupError{"loading the JS handler: out of memory"}
	}
	res, err := vm.call(ctx, "qjs_eval_bytecode", uint64(p), uint64(len(*bc)))
	if err != nil {
		return err
	}
	if own {
		if _, err := vm.call(ctx, "free", uint64(p)); err != nil {
			return err
		}
	}
	if exc, err := vm.takeException(ctx, res); err != nil {
		return err
	} else if exc {
		return &jsSetupError{"evaluating the host's JS prelude failed"}
	}
	return nil
}

// maxPreludeBytecode bounds the bytecode compile keeps: the prelude's is a few tens of
// KiB, and an engine (the module's own, not trusted) that claims more than this is not
// copied out of its memory, let alone into every later VM.
const maxPreludeBytecode = 1 << 20

// compile compiles trusted source (the prelude) to the engine's bytecode, as a script:
// nil (and no error) when the engine could not compile it, or claims more than
// maxPreludeBytecode, for the caller to evaluate the source instead. The bytecode is
// freed with the engine's free, not through the runtime that allocated it, so the
// runtime's memory count keeps its size for the VM's life (tens of KiB of a limit of
// several MiB): the engine exports no way to free it through the runtime.
func (vm *jsVM) compile(ctx context.Context, src, file string) ([]byte, error) {
	code, err := vm.cstring(ctx, src)
	if err != nil {
		return nil, err
	}
	fname, err := vm.cstring(ctx, file)
	if err != nil {
		return nil, err
	}
	p, err := vm.call(ctx, "qjs_compile", uint64(code), uint64(len(src)), uint64(fname), 0, 0, uint64(vm.scratch))
	if err != nil {
		return nil, err
	}
	for _, q := range []uint32{code, fname} {
		if _, err := vm.call(ctx, "free", uint64(q)); err != nil {
			return nil, err
		}
	}
	if p == 0 {
		if e, err := vm.call(ctx, "qjs_get_exception"); err != nil {
			return nil, err
		} else if _, err := vm.call(ctx, "qjs_free_value", uint64(e)); err != nil {
			return nil, err
		}
		return nil, nil
	}
	n, okn := vm.mem.ReadUint32Le(vm.scratch)
	if okn && n > maxPreludeBytecode {
		_, err = vm.call(ctx, "free", uint64(p))
		return nil, err
	}
	b, okb := vm.mem.Read(p, n)
	if !okn || !okb {
		return nil, fmt.Errorf("reading the prelude's bytecode: %d bytes at %#x are outside the guest's memory", n, p)
	}
	b = bytes.Clone(b)
	_, err = vm.call(ctx, "free", uint64(p))
	return b, err
}

// eval evaluates trusted source (the prelude) at global scope.
func (vm *jsVM) eval(ctx context.Context, src, file string) error {
	code, err := vm.cstring(ctx, src)
	if err != nil {
		return err
	}
	fname, err := vm.cstring(ctx, file)
	if err != nil {
		return err
	}
	res, err := vm.call(ctx, "qjs_eval", uint64(code), uint64(len(src)), uint64(fname), 0)
	if err != nil {
		return err
	}
	exc, err := vm.takeException(ctx, res)
	if err != nil {
		return err
	}
	if exc {
		return &jsSetupError{"evaluating the host's JS prelude failed"}
	}
	vm.call(ctx, "free", uint64(code))
	_, err = vm.call(ctx, "free", uint64(fname))
	return err
}

// takeException frees a result and reports whether it was an exception; the pending
// exception is then taken and freed, so that the VM can go on.
func (vm *jsVM) takeException(ctx context.Context, res uint32) (bool, error) {
	exc, err := vm.call(ctx, "qjs_is_exception", uint64(res))
	if err != nil {
		return false, err
	}
	if _, err := vm.call(ctx, "qjs_free_value", uint64(res)); err != nil {
		return false, err
	}
	if exc == 0 {
		return false, nil
	}
	e, err := vm.call(ctx, "qjs_get_exception")
	if err != nil {
		return true, err
	}
	_, err = vm.call(ctx, "qjs_free_value", uint64(e))
	return true, err
}

// runJob runs the job staged in the instance's callState: __wasmjobs_run, then the
// VM's pending jobs until the handler settles, until deadline (the job's start plus
// its timeout, which names it in the reason). The interrupt handler stops the JS at
// the deadline; wazero closes the instance jsBackstop later if the engine did not
// reach a check.
func (vm *jsVM) runJob(ctx context.Context, deadline time.Time, timeout time.Duration) (int32, *failure) {
	inst := vm.inst
	// wazero closes the instance when cctx ends: jsBackstop after the deadline, or after
	// ctx is cancelled (the host shutting down), so that the interrupt stops it first.
	cctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline.Add(jsBackstop))
	defer cancel()
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(jsBackstop, cancel) })
	defer stop()
	vm.deadline, vm.done = deadline, ctx.Done()
	vm.interrupted, vm.settled, vm.code, vm.failMsg, vm.hostFail = false, false, 0, "", ""
	vm.leftover = false
	inst.ctx = cctx
	c := &callContext{Context: cctx, st: &inst.st}
	rctx, rcancel := context.WithDeadline(c, deadline)
	defer rcancel()
	vm.outer, vm.reqCtx, vm.startErr = ctx, rctx, ""
	err := vm.drive(c)
	if err == nil {
		// Fetches and timers the handler did not await die with its job: their
		// promises never resolve, and its requests are closed below.
		err = vm.dropPending(c, vm.fn)
	}
	vm.pending, vm.timers = vm.pending[:0], 0
	inst.st.http.close() // requests the handler left open end with its job
	vm.reads.Wait()      // their bodies' reads end with them
	vm.bodies = nil
	inst.ctx = nil
	inst.stdout.flush()
	inst.stderr.flush()
	switch {
	case err != nil:
		return 0, classify(ctx, err, timeout)
	case vm.interrupted && ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded):
		return 0, cancelled(ctx)
	case vm.interrupted:
		return 0, &failure{CauseTimeout, fmt.Sprintf("timeout after %v", timeout)}
	case vm.hostFail != "":
		return 0, &failure{CauseTrap, "trap: " + vm.hostFail}
	case !vm.settled:
		return 0, &failure{CauseTrap, "trap: the handler's promise never settled"}
	case vm.code < 0:
		return 0, &failure{CauseTrap, "trap: " + vm.failMsg}
	}
	return vm.code, nil
}

func (vm *jsVM) drive(ctx context.Context) error {
	if threw, err := vm.callJS(ctx, "qjs_call", uint64(vm.run), uint64(vm.undef), 0, 0); threw || err != nil {
		return err
	}
	for {
		pending, err := vm.call(ctx, "qjs_is_job_pending")
		if err != nil {
			return err
		}
		if pending == 0 {
			if vm.settled || len(vm.pending) == 0 {
				return nil
			}
			// The handler waits on the host: a request's head or a timer.
			if err := vm.wait(ctx); err != nil || vm.interrupted {
				return err
			}
			continue
		}
		if vm.settled {
			// Promise work the handler left behind would run in the VM's next job,
			// before it: the VM is not reused (healthy), so none crosses jobs.
			vm.leftover = true
			return nil
		}
		r, err := vm.call(ctx, "qjs_execute_pending_job")
		if err != nil {
			return err
		}
		if int32(r) < 0 {
			return vm.uncatchable(ctx)
		}
	}
}

// isException frees a result and reports whether it was an exception, leaving the
// exception pending.
// callJS calls the export name, which runs JS and returns a value, and frees that
// value. threw reports that an exception escaped the prelude: err is then the
// uncatchable's failure (nil when the run was interrupted, which ends it anyway).
func (vm *jsVM) callJS(ctx context.Context, name string, params ...uint64) (threw bool, err error) {
	res, err := vm.call(ctx, name, params...)
	if err != nil {
		return false, err
	}
	if w, ok := vm.mem.ReadUint64Le(res); vm.boxed && ok && w == jsTagUndefined<<32 {
		// What the prelude's functions return: no exception, and nothing to free but
		// the result's cell.
		_, err := vm.call(ctx, "free", uint64(res))
		return false, err
	}
	if exc, err := vm.isException(ctx, res); err != nil || exc {
		if err == nil {
			err = vm.uncatchable(ctx)
		}
		return exc, err
	}
	return false, nil
}

func (vm *jsVM) isException(ctx context.Context, res uint32) (bool, error) {
	exc, err := vm.call(ctx, "qjs_is_exception", uint64(res))
	if err != nil {
		return false, err
	}
	_, err = vm.call(ctx, "qjs_free_value", uint64(res))
	return exc != 0, err
}

// uncatchable takes the pending exception that escaped the prelude: QuickJS-ng makes
// an interrupt and an "out of memory" uncatchable. The failure's reason names it
// ("InternalError: out of memory"); by then the JS stack has unwound and its memory
// is free again, so reading the name and message can allocate.
func (vm *jsVM) uncatchable(ctx context.Context) error {
	e, err := vm.call(ctx, "qjs_get_exception")
	if err != nil {
		return err
	}
	defer vm.call(ctx, "qjs_free_value", uint64(e))
	if vm.interrupted {
		return nil
	}
	var parts []string
	for _, prop := range []string{"name", "message"} {
		v, err := vm.global(ctx, e, prop)
		if err != nil {
			return err
		}
		s, ok, err := vm.argString(ctx, v)
		vm.call(ctx, "qjs_free_value", uint64(v))
		if err != nil {
			return err
		}
		if ok && s != "" {
			parts = append(parts, s)
		}
	}
	vm.hostFail = "uncaught exception in the JS runtime"
	if len(parts) > 0 {
		vm.hostFail = strings.Join(parts, ": ")
	}
	return nil
}

// healthy reports whether the VM may take another job: the handler left no promise
// work queued (it would run in the next job), and its heap is not near QuickJS's
// limit (a handler that caught an "out of memory" leaves a VM that will fail again).
func (vm *jsVM) healthy(ctx context.Context) bool {
	if vm.leftover {
		return false
	}
	used, err := vm.call(ctx, "qjs_get_allocated_size")
	return err == nil && uint64(used) < uint64(vm.limit)/8*7
}

// Values passed in from the host. Each returns a fresh JSValue*, which host_call hands
// to the engine's trampoline (it frees it), or 0 with vm.hostFail set when the guest's
// memory is exhausted.

func (vm *jsVM) newString(ctx context.Context, fns *jsFuncs, b []byte) (uint32, error) {
	return vm.newBytes(ctx, fns, "qjs_new_string", b)
}

func (vm *jsVM) newBytes(ctx context.Context, fns *jsFuncs, ctor string, b []byte) (uint32, error) {
	p, own, err := vm.bytesIn(ctx, fns, len(b))
	if err != nil || p == 0 {
		return 0, err
	}
	if !vm.mem.Write(p, b) {
		vm.hostFail = "out of memory passing a value to the handler"
		return 0, nil
	}
	res, err := fns.get(ctor).Call(ctx, uint64(p), uint64(len(b)))
	if err != nil {
		return 0, err
	}
	if own {
		if _, err := fns.get("free").Call(ctx, uint64(p)); err != nil {
			return 0, err
		}
	}
	return uint32(res[0]), nil
}

// bytesIn returns guest memory for n bytes passed in: the VM's buffer, grown (in
// powers of two, up to jsBufMax) when n passes it, or for a larger n memory of the
// call's own (own: the caller frees it). p is 0 with vm.hostFail set when the guest's
// memory is exhausted.
func (vm *jsVM) bytesIn(ctx context.Context, fns *jsFuncs, n int) (p uint32, own bool, err error) {
	if vm.buf != 0 && uint64(n) <= uint64(vm.bufCap) {
		return vm.buf, false, nil
	}
	size := uint64(max(n, 1))
	own = size > jsBufMax
	if !own {
		size = max(256, uint64(1)<<bits.Len64(size-1))
	}
	res, err := fns.get("malloc").Call(ctx, size)
	if err != nil {
		return 0, false, err
	}
	if p = uint32(res[0]); p == 0 {
		vm.hostFail = "out of memory passing a value to the handler"
		return 0, false, nil
	}
	if own {
		return p, true, nil
	}
	if vm.buf != 0 {
		if _, err := fns.get("free").Call(ctx, uint64(vm.buf)); err != nil {
			return 0, false, err
		}
	}
	vm.buf, vm.bufCap = p, uint32(size)
	return p, false, nil
}

func (vm *jsVM) in1(ctx context.Context, name string, params ...uint64) (uint64, error) {
	res, err := vm.in.get(name).Call(ctx, params...)
	if err != nil || len(res) == 0 {
		return 0, err
	}
	return res[0], nil
}

// argString reads a string argument; ok is false for any other type.
func (vm *jsVM) argString(ctx context.Context, v uint32) (s string, ok bool, err error) {
	if is, err := vm.in1(ctx, "qjs_is_string", uint64(v)); err != nil || is == 0 {
		return "", false, err
	}
	p, err := vm.in1(ctx, "qjs_get_string_len", uint64(v), uint64(vm.scratch))
	if err != nil || p == 0 {
		return "", false, err
	}
	n, okn := vm.mem.ReadUint32Le(vm.scratch)
	b, okb := vm.mem.Read(uint32(p), n)
	s = strings.ToValidUTF8(string(b), "\uFFFD") // lone surrogates come as WTF-8
	if _, err = vm.in1(ctx, "qjs_free_cstring", p); err != nil {
		return "", false, err
	}
	if !okn || !okb {
		return "", false, fmt.Errorf("reading a string argument: %d bytes at %#x are outside the guest's memory", n, p)
	}
	return s, true, nil
}

// argBytes reads a string or ArrayBuffer argument.
func (vm *jsVM) argBytes(ctx context.Context, v uint32) ([]byte, bool, error) {
	if s, ok, err := vm.argString(ctx, v); err != nil || ok {
		return []byte(s), ok, err
	}
	if is, err := vm.in1(ctx, "qjs_is_array_buffer", uint64(v)); err != nil || is == 0 {
		return nil, false, err
	}
	p, err := vm.in1(ctx, "qjs_get_array_buffer", uint64(v), uint64(vm.scratch))
	if err != nil {
		return nil, false, err
	}
	n, _ := vm.mem.ReadUint32Le(vm.scratch)
	if n == 0 {
		return []byte{}, true, nil
	}
	b, ok := vm.mem.Read(uint32(p), n)
	if !ok {
		return nil, false, nil
	}
	return append([]byte(nil), b...), true, nil
}

// argBytesUpTo reads a string or ArrayBuffer argument, copied once, if it is at most
// most bytes long; n is its length (0 for any other type), and a longer one is not
// copied (b is nil).
func (vm *jsVM) argBytesUpTo(ctx context.Context, v uint32, most int64) (b []byte, n int64, err error) {
	if is, err := vm.in1(ctx, "qjs_is_string", uint64(v)); err != nil || is != 0 {
		if err != nil {
			return nil, 0, err
		}
		p, err := vm.in1(ctx, "qjs_get_string_len", uint64(v), uint64(vm.scratch))
		if err != nil || p == 0 {
			return nil, 0, err
		}
		size, okn := vm.mem.ReadUint32Le(vm.scratch)
		if okn && int64(size) <= most {
			view, ok := vm.mem.Read(uint32(p), size)
			if !ok {
				okn = false
			} else if utf8.Valid(view) {
				b = bytes.Clone(view)
			} else {
				b = bytes.ToValidUTF8(view, []byte("\uFFFD")) // lone surrogates come as WTF-8
			}
		}
		if _, err = vm.in1(ctx, "qjs_free_cstring", p); err != nil {
			return nil, 0, err
		}
		if !okn {
			return nil, 0, fmt.Errorf("reading a string argument: %d bytes at %#x are outside the guest's memory", size, p)
		}
		return b, int64(size), nil
	}
	if is, err := vm.in1(ctx, "qjs_is_array_buffer", uint64(v)); err != nil || is == 0 {
		return nil, 0, err
	}
	p, err := vm.in1(ctx, "qjs_get_array_buffer", uint64(v), uint64(vm.scratch))
	if err != nil {
		return nil, 0, err
	}
	size, _ := vm.mem.ReadUint32Le(vm.scratch)
	if int64(size) > most {
		return nil, int64(size), nil
	}
	view, ok := vm.mem.Read(uint32(p), size)
	if !ok {
		return nil, 0, nil
	}
	return bytes.Clone(view), int64(size), nil
}

// argNumber reads a number argument; NaN for any other type.
func (vm *jsVM) argNumber(ctx context.Context, v uint32) (float64, error) {
	if vm.boxed {
		if w, ok := vm.mem.ReadUint64Le(v); ok {
			switch w >> 32 {
			case jsTagInt:
				return float64(int32(uint32(w))), nil
			case jsTagUndefined:
				return math.NaN(), nil
			}
		}
	}
	if is, err := vm.in1(ctx, "qjs_is_number", uint64(v)); err != nil || is == 0 {
		return math.NaN(), err
	}
	f, err := vm.in1(ctx, "qjs_get_float64", uint64(v))
	return api.DecodeF64(f), err
}

func (vm *jsVM) number(ctx context.Context, f float64) (uint32, error) {
	r, err := vm.in1(ctx, "qjs_new_number", api.EncodeF64(f))
	return uint32(r), err
}

// jsHostCall is env.host_call: the engine calls it when JS calls a host function. The
// one function the adapter registers, __wasmjobs_host, dispatches on its first
// argument (jsOp*). Arguments are borrowed; the result is a fresh JSValue*.
func jsHostCall(ctx context.Context, mod api.Module, stack []uint64) {
	st := stateOf(ctx)
	if st == nil || st.js == nil {
		panic(&abortError{msg: "env.host_call outside a JS handler"})
	}
	vm := st.js
	name := guestBytes(mod, "host_call", stack[0], stack[1])
	argc := uint32(stack[3])
	if argc > 16 {
		argc = 16
	}
	raw := guestBytes(mod, "host_call", stack[4], uint64(argc)*4)
	args := make([]uint32, argc)
	for i := range args {
		args[i] = uint32(raw[4*i]) | uint32(raw[4*i+1])<<8 | uint32(raw[4*i+2])<<16 | uint32(raw[4*i+3])<<24
	}
	res, err := vm.hostCall(ctx, st, string(name), args)
	if err != nil {
		panic(err) // a failure of the engine itself (wazero closed it, a trap): the call fails
	}
	if res == 0 {
		res, err = vm.in1u(ctx, "qjs_get_undefined")
		if err != nil {
			panic(err)
		}
	}
	stack[0] = uint64(res)
}

func (vm *jsVM) in1u(ctx context.Context, name string, params ...uint64) (uint32, error) {
	r, err := vm.in1(ctx, name, params...)
	return uint32(r), err
}

func (vm *jsVM) hostCall(ctx context.Context, st *callState, name string, args []uint32) (uint32, error) {
	if name != jsHostName || len(args) == 0 {
		return 0, nil
	}
	arg := func(i int) uint32 {
		if i < len(args) {
			return args[i]
		}
		return vm.undef
	}
	opf, err := vm.argNumber(ctx, args[0])
	if err != nil || !(opf >= 0 && opf <= jsOpLast) {
		return 0, err
	}
	if int(opf) >= jsOpFetch && int(opf) < jsOpRound {
		return vm.fetchOp(ctx, st, int(opf), arg)
	}
	switch int(opf) {
	case jsOpRandom:
		var seed [16]byte
		rand.Read(seed[:]) // never fails (crypto/rand)
		return vm.newBytes(ctx, vm.in, "qjs_new_uint8_array", seed[:])
	case jsOpRound:
		n := 0
		if st.job != nil {
			n = st.job.Round
		}
		return vm.number(ctx, float64(n))
	case jsOpChildren:
		b, err := childrenJSON(st.awaited())
		if err != nil {
			return 0, err
		}
		return vm.newString(ctx, vm.in, b)
	case jsOpPayload:
		return vm.newBytes(ctx, vm.in, "qjs_new_uint8_array", st.payload())
	case jsOpText:
		b := st.payload()
		if !utf8.Valid(b) {
			b = bytes.ToValidUTF8(b, []byte("\uFFFD"))
		}
		return vm.newString(ctx, vm.in, b)
	case jsOpMeta:
		k, err := vm.argNumber(ctx, arg(1))
		if err != nil || k != math.Trunc(k) || !(k >= 0 && k <= float64(abi.MetaSpanID)) {
			return 0, err
		}
		v, _ := st.metaValue(ctx, int32(k))
		return vm.newString(ctx, vm.in, []byte(v))
	case jsOpAttempt, jsOpMaxAttempts:
		n := 0
		if st.job != nil {
			n = st.job.Attempt
			if int(opf) == jsOpMaxAttempts {
				n = st.job.MaxAttempts
			}
		}
		return vm.number(ctx, float64(n))
	case jsOpHeader:
		k, ok, err := vm.argString(ctx, arg(1))
		if err != nil || !ok || st.job == nil {
			return 0, err
		}
		v, found := st.job.Envelope.Headers[k]
		if !found {
			return 0, nil
		}
		return vm.newString(ctx, vm.in, []byte(v))
	case jsOpLog:
		level, err := vm.argNumber(ctx, arg(1))
		if err != nil {
			return 0, err
		}
		msg, _, err := vm.argString(ctx, arg(2))
		if err != nil {
			return 0, err
		}
		l := int32(abi.LogInfo)
		if !math.IsNaN(level) {
			l = int32(min(max(level, float64(abi.LogDebug)), float64(abi.LogError)))
		}
		st.emit(slogLevel(l), msg)
		return 0, nil
	case jsOpOutput:
		b, ok, err := vm.argBytes(ctx, arg(1))
		if err != nil {
			return 0, err
		}
		s := int32(len(b))
		switch {
		case !ok:
			s = abi.StatusBadArgument
		case len(st.output)+len(b) > st.limits.MaxOutput:
			s = abi.StatusLimitExceeded
		default:
			st.output = append(st.output, b...)
		}
		return vm.number(ctx, float64(s))
	case jsOpEnqueue:
		q, okq, err := vm.argString(ctx, arg(1))
		if err != nil {
			return 0, err
		}
		b, okb, err := vm.argBytes(ctx, arg(2))
		if err != nil {
			return 0, err
		}
		d, err := vm.argNumber(ctx, arg(3))
		if err != nil {
			return 0, err
		}
		await, err := vm.argNumber(ctx, arg(4))
		if err != nil {
			return 0, err
		}
		var s int32
		switch {
		case !okq || !okb || math.IsNaN(d) || d < 0 || d > math.MaxInt64/float64(time.Millisecond):
			s = abi.StatusBadArgument
		case await == 1 && st.noWait:
			// The module could not be refused at load (the engine imports nothing of
			// fan-in): its awaited child is refused here.
			s = abi.StatusNotPermitted
		default:
			s = st.stage(q, b, int64(d), await == 1)
		}
		return vm.number(ctx, float64(s))
	case jsOpSettle:
		if len(args) == 1 { // a plain ack: no code, reason or delay to read
			if !vm.settled {
				vm.settled, vm.code, st.reason = true, 0, ""
			}
			return 0, nil
		}
		code, err := vm.argNumber(ctx, arg(1))
		if err != nil {
			return 0, err
		}
		reason, _, err := vm.argString(ctx, arg(2))
		if err != nil {
			return 0, err
		}
		d, err := vm.argNumber(ctx, arg(3))
		if err != nil {
			return 0, err
		}
		if max := st.limits.MaxReason; len(reason) > max {
			reason = strings.ToValidUTF8(reason[:max], "")
		}
		if vm.settled {
			return 0, nil // the first settle wins: a later one comes from a stray promise
		}
		vm.settled = true
		switch code {
		case 0, 1, 2, 3, 4:
			vm.code = int32(code)
			st.reason = reason
			if d >= 0 && d <= math.MaxInt64/float64(time.Millisecond) {
				st.delayMs = int64(d)
			}
		default:
			vm.code, vm.failMsg = -1, reason
		}
		return 0, nil
	case jsOpLoadError:
		msg, _, err := vm.argString(ctx, arg(1))
		if err != nil {
			return 0, err
		}
		vm.loadErr = msg
		return 0, nil
	}
	return 0, nil
}

// jsInterrupt is env.host_interrupt, which QuickJS polls while it runs: it stops the
// JS once the job's deadline passes or the host shuts down.
func jsInterrupt(ctx context.Context, _ api.Module, stack []uint64) {
	stack[0] = 0
	st := stateOf(ctx)
	if st == nil || st.js == nil {
		return
	}
	vm := st.js
	if vm.interrupted {
		stack[0] = 1
		return
	}
	select {
	case <-vm.done:
		vm.interrupted = true
	default:
		vm.interrupted = time.Now().After(vm.deadline)
	}
	if vm.interrupted {
		vm.inst.interrupts.Add(1)
		stack[0] = 1
	}
}

// jsEnvFuncs are the engine's env imports: host_call and host_interrupt as above; the promise-rejection tracker and the module loader are
// never enabled, and time zones are UTC.
func jsEnvFuncs() map[string]api.GoModuleFunc {
	zero := func(_ context.Context, _ api.Module, stack []uint64) { stack[0] = 0 }
	return map[string]api.GoModuleFunc{
		"host_call":                jsHostCall,
		"host_interrupt":           jsInterrupt,
		"host_promise_rejection":   func(context.Context, api.Module, []uint64) {},
		"host_module_normalize":    zero,
		"host_module_load":         zero,
		"host_get_timezone_offset": zero,
	}
}
