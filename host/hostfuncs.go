package host

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode/utf16"

	"github.com/tetratelabs/wazero/api"
	"go.opentelemetry.io/otel/trace"

	"github.com/wasmjobs/wasmjobs/abi"
	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/worker"
)

// LogFunc receives a guest's log lines: from the log host function, and from its
// stdout (info) and stderr (warn), split on newlines.
type LogFunc func(level slog.Level, msg string)

// callState is what the host functions of one instance see during one call: the job's
// inputs and what the guest staged. An instance runs one call at a time.
type callState struct {
	job     *worker.Job
	meta    [4]string // job id, queue, module name, module version
	limits  *Limits
	allowed map[string]bool // queues it may enqueue into; nil: any
	sink    LogFunc         // nil: the lines are kept in logs
	logs    []Log
	noWait  bool // the host cannot serve waits (Config.NoWait)

	reason   string
	delayMs  int64 // -1: none staged
	output   []byte
	children []worker.Child
	logLines int
	dropped  int
	abort    string // AssemblyScript's abort message
	js       *jsVM  // the instance's JS VM, kept across calls; nil for an ABI v1 module
	http     httpState

	// span is the job's run span, whose events its log lines are (traceRun); nil
	// when tracing is off or outside a job. events counts those added, up to
	// eventLimit; eventsDropped those past it.
	span                              trace.Span
	events, eventsDropped, eventLimit int
}

// reset prepares the state for a new call. A session the last call left open is
// closed: its requests, and their slots of [http.limits], end with the call.
func (st *callState) reset(job *worker.Job, mod *Module, sink LogFunc) {
	st.http.close()
	*st = callState{
		job:     job,
		limits:  &mod.manifest.Limits,
		allowed: mod.allowed,
		sink:    sink,
		noWait:  mod.e != nil && mod.e.noWait != "",
		delayMs: -1,
		js:      st.js,
		http:    httpState{client: mod.http},
	}
	if job != nil {
		st.meta = [4]string{job.Envelope.ID, job.Envelope.Queue, mod.name, mod.version}
	} else {
		st.meta = [4]string{"", mod.manifest.Queue, mod.name, mod.version}
	}
}

// metaValue is the value of meta_read's key, and false for an unknown key. The trace
// keys read the span of ctx, the context the host calls the guest under, so that they
// name the span the host runs the guest in, whichever that is; outside a job, or with
// tracing off (no valid span context), they read as empty.
func (st *callState) metaValue(ctx context.Context, key int32) (string, bool) {
	switch key {
	case abi.MetaJobID, abi.MetaQueue, abi.MetaModuleName, abi.MetaModuleVersion:
		return st.meta[key], true
	case abi.MetaTraceID, abi.MetaSpanID:
		sc := trace.SpanContextFromContext(ctx)
		switch {
		case st.job == nil || !sc.IsValid():
			return "", true
		case key == abi.MetaTraceID:
			return sc.TraceID().String(), true
		default:
			return sc.SpanID().String(), true
		}
	}
	return "", false
}

// emit logs one line, truncated and counted against the job's limit.
func (st *callState) emit(level slog.Level, msg string) {
	if st.logLines >= st.limits.MaxLogLines {
		st.dropped++
		return
	}
	st.logLines++
	if max := st.limits.MaxLogMessage; len(msg) > max {
		msg = msg[:max] + fmt.Sprintf("... (truncated %d bytes)", len(msg)-max)
	}
	msg = strings.ToValidUTF8(msg, "\uFFFD")
	st.log(level, msg)
	if st.span != nil {
		st.event(level, msg)
	}
}

// finish reports the log lines the limit dropped.
func (st *callState) finish() {
	if st.dropped > 0 {
		st.log(slog.LevelWarn, fmt.Sprintf("%d log lines dropped (limit %d per job)", st.dropped, st.limits.MaxLogLines))
		st.dropped = 0
	}
}

// log sends a line to the sink, or keeps it in logs when there is none.
func (st *callState) log(level slog.Level, msg string) {
	if st.sink == nil {
		st.logs = append(st.logs, Log{level, msg})
		return
	}
	st.sink(level, msg)
}

// stateKey finds the callState in a call's context.
type stateKey struct{}

// callContext carries the callState to the host functions without an allocation
// per lookup.
type callContext struct {
	context.Context
	st *callState
}

func (c *callContext) Value(key any) any {
	if key == (stateKey{}) {
		return c.st
	}
	return c.Context.Value(key)
}

func stateOf(ctx context.Context) *callState {
	switch c := ctx.(type) {
	case *callContext:
		return c.st
	case *serveContext:
		if c.loop.stopped {
			return &c.loop.dead
		}
		return c.st
	}
	st, _ := ctx.Value(stateKey{}).(*callState)
	return st
}

// memoryAccessError traps a guest that passed a pointer and length outside its memory.
type memoryAccessError struct{ fn string }

func (e *memoryAccessError) Error() string { return "invalid memory access in " + e.fn }

// guestBytes returns the guest's memory at [ptr, ptr+n), checked whole; outside it, it
// traps the guest.
func guestBytes(mod api.Module, fn string, ptr, n uint64) []byte {
	b, ok := mod.Memory().Read(uint32(ptr), uint32(n))
	if !ok {
		panic(&memoryAccessError{fn: fn})
	}
	return b
}

type funcType struct{ params, results []api.ValueType }

var i32, i64 = api.ValueTypeI32, api.ValueTypeI64

func status(s int32) uint64 { return uint64(uint32(s)) }

// hostFunc is a host function of ABI v1: its signature and its implementation.
type hostFunc struct {
	funcType
	fn api.GoModuleFunc
}

// hostFuncs are ABI v1's host functions, by name: these, and those of outbound HTTP.
var hostFuncs = withHTTPHostFuncs(map[string]hostFunc{
	abi.FuncNextJob: {funcType{[]api.ValueType{i32}, []api.ValueType{i32}}, nextJob},
	abi.FuncPayloadLen: {funcType{nil, []api.ValueType{i32}}, func(ctx context.Context, mod api.Module, stack []uint64) {
		stack[0] = uint64(uint32(len(stateOf(ctx).payload())))
	}},
	abi.FuncPayloadRead: {funcType{[]api.ValueType{i32, i32}, []api.ValueType{i32}}, func(ctx context.Context, mod api.Module, stack []uint64) {
		buf := guestBytes(mod, abi.FuncPayloadRead, stack[0], stack[1])
		stack[0] = uint64(uint32(copy(buf, stateOf(ctx).payload())))
	}},
	abi.FuncMetaRead: {funcType{[]api.ValueType{i32, i32, i32}, []api.ValueType{i32}}, func(ctx context.Context, mod api.Module, stack []uint64) {
		key := int32(stack[0])
		buf := guestBytes(mod, abi.FuncMetaRead, stack[1], stack[2])
		v, ok := stateOf(ctx).metaValue(ctx, key)
		if !ok {
			stack[0] = status(abi.StatusNotFound)
			return
		}
		copy(buf, v)
		stack[0] = uint64(uint32(len(v)))
	}},
	abi.FuncAttempt: {funcType{nil, []api.ValueType{i32}}, func(ctx context.Context, mod api.Module, stack []uint64) {
		if st := stateOf(ctx); st.job != nil {
			stack[0] = uint64(uint32(st.job.Attempt))
		} else {
			stack[0] = 0
		}
	}},
	abi.FuncMaxAttempts: {funcType{nil, []api.ValueType{i32}}, func(ctx context.Context, mod api.Module, stack []uint64) {
		if st := stateOf(ctx); st.job != nil {
			stack[0] = uint64(uint32(st.job.MaxAttempts))
		} else {
			stack[0] = 0
		}
	}},
	abi.FuncHeaderRead: {funcType{[]api.ValueType{i32, i32, i32, i32}, []api.ValueType{i32}}, func(ctx context.Context, mod api.Module, stack []uint64) {
		key := guestBytes(mod, abi.FuncHeaderRead, stack[0], stack[1])
		buf := guestBytes(mod, abi.FuncHeaderRead, stack[2], stack[3])
		st := stateOf(ctx)
		var v string
		ok := false
		if st.job != nil {
			v, ok = st.job.Envelope.Headers[string(key)]
		}
		if !ok {
			stack[0] = status(abi.StatusNotFound)
			return
		}
		copy(buf, v)
		stack[0] = uint64(uint32(len(v)))
	}},
	abi.FuncLog: {funcType{[]api.ValueType{i32, i32, i32}, nil}, func(ctx context.Context, mod api.Module, stack []uint64) {
		msg := guestBytes(mod, abi.FuncLog, stack[1], stack[2])
		level := min(max(int32(stack[0]), abi.LogDebug), abi.LogError)
		stateOf(ctx).emit(slogLevel(level), string(msg))
	}},
	abi.FuncSetReason: {funcType{[]api.ValueType{i32, i32}, nil}, func(ctx context.Context, mod api.Module, stack []uint64) {
		msg := guestBytes(mod, abi.FuncSetReason, stack[0], stack[1])
		st := stateOf(ctx)
		if max := st.limits.MaxReason; len(msg) > max {
			msg = msg[:max]
		}
		st.reason = strings.ToValidUTF8(string(msg), "\uFFFD")
	}},
	abi.FuncSetDelayMs: {funcType{[]api.ValueType{i64}, nil}, func(ctx context.Context, mod api.Module, stack []uint64) {
		if ms := int64(stack[0]); ms >= 0 {
			stateOf(ctx).delayMs = ms
		}
	}},
	abi.FuncOutputWrite: {funcType{[]api.ValueType{i32, i32}, []api.ValueType{i32}}, func(ctx context.Context, mod api.Module, stack []uint64) {
		buf := guestBytes(mod, abi.FuncOutputWrite, stack[0], stack[1])
		st := stateOf(ctx)
		if len(st.output)+len(buf) > st.limits.MaxOutput {
			stack[0] = status(abi.StatusLimitExceeded)
			return
		}
		st.output = append(st.output, buf...)
		stack[0] = uint64(uint32(len(buf)))
	}},
	abi.FuncEnqueue:        {enqueueType, enqueueFunc(abi.FuncEnqueue, false)},
	abi.FuncEnqueueAwaited: {enqueueType, enqueueFunc(abi.FuncEnqueueAwaited, true)},
	abi.FuncRound: {funcType{nil, []api.ValueType{i32}}, func(ctx context.Context, mod api.Module, stack []uint64) {
		stack[0] = 0
		if st := stateOf(ctx); st.job != nil {
			stack[0] = uint64(uint32(st.job.Round))
		}
	}},
	abi.FuncChildrenLen: {funcType{nil, []api.ValueType{i32}}, func(ctx context.Context, mod api.Module, stack []uint64) {
		stack[0] = uint64(uint32(len(stateOf(ctx).awaited())))
	}},
	abi.FuncChildRead: {funcType{[]api.ValueType{i32, i32, i32, i32}, []api.ValueType{i32}}, func(ctx context.Context, mod api.Module, stack []uint64) {
		buf := guestBytes(mod, abi.FuncChildRead, stack[2], stack[3])
		v, s := childField(stateOf(ctx).awaited(), int32(stack[0]), int32(stack[1]))
		if s < 0 {
			stack[0] = status(s)
			return
		}
		copy(buf, v)
		stack[0] = uint64(uint32(len(v)))
	}},
})

var enqueueType = funcType{[]api.ValueType{i32, i32, i32, i32, i64}, []api.ValueType{i32}}

// enqueueFunc is enqueue, or enqueue_awaited when await is set: the two stage children
// alike, under one max_children.
func enqueueFunc(name string, await bool) api.GoModuleFunc {
	return func(ctx context.Context, mod api.Module, stack []uint64) {
		queue := guestBytes(mod, name, stack[0], stack[1])
		payload := guestBytes(mod, name, stack[2], stack[3])
		delayMs := int64(stack[4])
		s := stateOf(ctx).stage(string(queue), payload, delayMs, await)
		stack[0] = status(s)
	}
}

// stage stages a child job, as enqueue and enqueue_awaited do, and returns the status:
// 0, or why it was refused. The payload is copied.
func (st *callState) stage(q string, payload []byte, delayMs int64, await bool) int32 {
	switch {
	case delayMs < 0 || backend.ValidateQueueName(q) != nil:
		return abi.StatusBadArgument
	case st.allowed != nil && !st.allowed[q]:
		return abi.StatusNotPermitted
	case len(st.children) >= st.limits.MaxChildren || len(payload) > st.limits.MaxPayload:
		return abi.StatusLimitExceeded
	}
	st.children = append(st.children, worker.Child{
		Queue:   q,
		Payload: append([]byte(nil), payload...),
		Delay:   time.Duration(delayMs) * time.Millisecond,
		Await:   await,
	})
	return 0
}

// awaited returns the results of the job's last wait: none outside a job or on a
// first run.
func (st *callState) awaited() []backend.AwaitResult {
	if st.job == nil {
		return nil
	}
	return st.job.Awaited
}

// childJSON is an awaited child as a JS handler's job.children() gives it.
type childJSON struct {
	ID        string `json:"id"`
	Queue     string `json:"queue"`
	State     string `json:"state"`
	Reason    string `json:"reason"`
	Output    string `json:"output"`
	Truncated bool   `json:"truncated"`
}

// childrenJSON encodes the results of the job's last wait for job.children(): each
// output as text (invalid UTF-8 replaced), cut at abi.MaxChildOutput.
func childrenJSON(awaited []backend.AwaitResult) ([]byte, error) {
	out := make([]childJSON, len(awaited))
	for i := range awaited {
		o, _ := childField(awaited, int32(i), abi.ChildOutput)
		t, _ := childField(awaited, int32(i), abi.ChildTruncated)
		c := &awaited[i]
		out[i] = childJSON{ID: c.ID, Queue: c.Queue, State: string(c.State), Reason: c.Reason,
			Output: strings.ToValidUTF8(string(o), "\uFFFD"), Truncated: t[0] == 1}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("encoding the awaited children: %w", err)
	}
	return b, nil
}

// childField returns the field of child_read for the awaited child index, or the
// status that refuses it: NOT_FOUND for an index out of range, BAD_ARGUMENT for an
// unknown field. An output is cut at abi.MaxChildOutput, whatever the backend kept.
func childField(awaited []backend.AwaitResult, index, field int32) ([]byte, int32) {
	if index < 0 || int(index) >= len(awaited) {
		return nil, abi.StatusNotFound
	}
	c := &awaited[index]
	switch field {
	case abi.ChildID:
		return []byte(c.ID), 0
	case abi.ChildQueue:
		return []byte(c.Queue), 0
	case abi.ChildState:
		return []byte(c.State), 0
	case abi.ChildReason:
		return []byte(c.Reason), 0
	case abi.ChildOutput:
		return c.Output[:min(len(c.Output), abi.MaxChildOutput)], 0
	case abi.ChildTruncated:
		if c.OutputTruncated || len(c.Output) > abi.MaxChildOutput {
			return []byte{1}, 0
		}
		return []byte{0}, 0
	}
	return nil, abi.StatusBadArgument
}

func (st *callState) payload() []byte {
	if st.job == nil {
		return nil
	}
	return st.job.Envelope.Payload
}

func slogLevel(l int32) slog.Level {
	switch l {
	case abi.LogDebug:
		return slog.LevelDebug
	case abi.LogInfo:
		return slog.LevelInfo
	case abi.LogWarn:
		return slog.LevelWarn
	}
	return slog.LevelError
}

// instantiateHostModule provides the wasmjobs import module.
func (e *Engine) instantiateHostModule(ctx context.Context) error {
	b := e.rt.NewHostModuleBuilder(abi.ImportModule)
	for name, f := range hostFuncs {
		b.NewFunctionBuilder().WithGoModuleFunction(f.fn, f.params, f.results).Export(name)
	}
	if _, err := b.Instantiate(ctx); err != nil {
		return fmt.Errorf("instantiate the %s host module: %w", abi.ImportModule, err)
	}
	return nil
}

// abortError is AssemblyScript's abort, a failure of the job with its message.
type abortError struct{ msg string }

func (e *abortError) Error() string { return e.msg }

// asAbort implements AssemblyScript's env.abort(message, fileName, line, column).
func asAbort(ctx context.Context, mod api.Module, stack []uint64) {
	msg := asString(mod, uint32(stack[0]))
	file := asString(mod, uint32(stack[1]))
	text := "abort"
	if msg != "" {
		text += ": " + msg
	}
	if file != "" {
		text += fmt.Sprintf(" at %s:%d:%d", file, uint32(stack[2]), uint32(stack[3]))
	}
	panic(&abortError{msg: text})
}

// asTrace implements AssemblyScript's env.trace as a debug log line.
func asTrace(ctx context.Context, mod api.Module, stack []uint64) {
	msg := asString(mod, uint32(stack[0]))
	n := min(int(uint32(stack[1])), 5)
	for i := range n {
		msg += fmt.Sprintf(" %v", api.DecodeF64(stack[2+i]))
	}
	if st := stateOf(ctx); st != nil {
		st.emit(slog.LevelDebug, msg)
	}
}

// asString reads an AssemblyScript string: UTF-16LE, its byte length in the 4 bytes
// before ptr. A string that does not fit in memory reads as empty.
func asString(mod api.Module, ptr uint32) string {
	if ptr < 4 {
		return ""
	}
	n, ok := mod.Memory().ReadUint32Le(ptr - 4)
	if !ok || n%2 != 0 || n > 4096 {
		return ""
	}
	b, ok := mod.Memory().Read(ptr, n)
	if !ok {
		return ""
	}
	u := make([]uint16, n/2)
	for i := range u {
		u[i] = uint16(b[2*i]) | uint16(b[2*i+1])<<8
	}
	return string(utf16.Decode(u))
}
