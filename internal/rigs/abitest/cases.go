// Package abitest is the conformance table of ABI v1: each case names a module of
// testdata/, the job to run on it, and exactly what must come out. The host's tests run
// every case through the host API and the command's tests through `wasmjobs invoke
// --json`, so that both report the same facts.
package abitest

import (
	"fmt"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"

	"github.com/wasmjobs/wasmjobs/backend"
)

// Log is an expected log line: level is debug, info, warn or error.
type Log struct {
	Level, Msg string
}

// Child is an expected staged child job; Await marks one staged by enqueue_awaited.
type Child struct {
	Queue, Payload string
	DelayMs        int64
	Await          bool
}

// Case is one conformance case.
type Case struct {
	Name string
	// Module is the module's path under testdata/, without .wasm.
	Module string
	// Manifest is the text of the module's manifest; empty for none.
	Manifest string
	// The job.
	Payload     string
	Headers     map[string]string
	Attempt     int // 0 means 1
	MaxAttempts int // 0 means the manifest's or the default
	// Round and Awaited make the job a resumed run: its round, and how the children
	// of its last wait ended. `wasmjobs invoke` runs first runs only.
	Round   int
	Awaited []backend.AwaitResult

	// Invalid, when set, is a fragment of the error that must reject the module at load.
	Invalid string
	// Stateful says the module's output counts what its instance has run: a second
	// job on the same instance has another, so the case is run once on an instance.
	Stateful bool
	// ServeOnly says the case is the serve loop's (wasmjobs_serve): a host that calls a
	// module once a job (host.Config.NoServe) never starts one, so it does not apply.
	ServeOnly bool

	// What must come out.
	Kind   string
	Code   *int32 // nil: no code returned
	Settle string
	Reason string
	// DelayMs is the staged delay; nil when none.
	DelayMs *int64
	// Output is the exact output, with {id}, {version} and {queue} standing for the
	// job's id, the module's version and its queue.
	Output string
	Logs   []Log
	// Enqueued are the children published: an Ack's, or a Wait's.
	Enqueued []Child
}

func code(c int32) *int32 { return &c }
func ms(d int64) *int64   { return &d }

// Dir returns the repository's testdata directory.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "testdata")
}

// Path returns the .wasm file of a case's module.
func (c Case) Path() string { return filepath.Join(Dir(), filepath.FromSlash(c.Module)+".wasm") }

// ModuleName is the module's name: its file name without .wasm.
func (c Case) ModuleName() string { return filepath.Base(c.Module) }

// OutputMatches reports whether got is the case's output, given the job's id and the
// module's version and queue.
func (c Case) OutputMatches(got, id, version, queue string) bool {
	want := strings.NewReplacer("{id}", id, "{version}", version, "{queue}", queue).Replace(c.Output)
	return got == want
}

var idPattern = regexp.MustCompile(`^[0-9A-HJKMNP-TV-Z]{26}$`)

// ValidID reports whether id looks like a job id made by backend.NewID.
func ValidID(id string) bool { return idPattern.MatchString(id) }

// Cases returns the conformance table.
func Cases() []Case {
	flood := make([]Log, 0, 1001)
	for range 1000 {
		flood = append(flood, Log{"info", "flood"})
	}
	flood = append(flood, Log{"warn", "4001 log lines dropped (limit 1000 per job)"})

	cases := []Case{
		{Name: "ack", Module: "abi/ack", Kind: "ack", Code: code(0), Settle: "ack"},
		{Name: "ack served", Module: "abi/ack_serve", Kind: "ack", Code: code(0), Settle: "ack"},
		{Name: "retry with reason and delay", Module: "abi/retry", MaxAttempts: 3,
			Kind: "retry", Code: code(1), Settle: "retry", Reason: "try later", DelayMs: ms(1500)},
		{Name: "retry at the last attempt dead-letters", Module: "abi/retry", Attempt: 3, MaxAttempts: 3,
			Kind: "retry", Code: code(1), Settle: "dead_letter", Reason: "max attempts (3) exceeded: try later", DelayMs: ms(1500)},
		{Name: "retry honours the manifest's max attempts", Module: "abi/retry", Manifest: "max_attempts = 2", Attempt: 2,
			Kind: "retry", Code: code(1), Settle: "dead_letter", Reason: "max attempts (2) exceeded: try later", DelayMs: ms(1500)},
		{Name: "defer", Module: "abi/defer",
			Kind: "defer", Code: code(2), Settle: "defer", Reason: "rate limited", DelayMs: ms(2000)},
		{Name: "defer at the last attempt still defers", Module: "abi/defer", Attempt: 5, MaxAttempts: 5,
			Kind: "defer", Code: code(2), Settle: "defer", Reason: "rate limited", DelayMs: ms(2000)},
		{Name: "defer without delay is a failure", Module: "abi/defer_nodelay",
			Kind: "defer", Code: code(2), Settle: "retry", Reason: "defer without delay"},
		{Name: "dead letter ignores children", Module: "abi/dead_letter",
			Kind: "dead_letter", Code: code(3), Settle: "dead_letter", Reason: "bad input", DelayMs: ms(100)},
		{Name: "echo", Module: "abi/echo", Payload: `{"to":"ada@example.com","body":"héllo"}`,
			Kind: "ack", Code: code(0), Settle: "ack", Output: `{"to":"ada@example.com","body":"héllo"}`},
		{Name: "echo of an empty payload", Module: "abi/echo",
			Kind: "ack", Code: code(0), Settle: "ack"},
		{Name: "metadata", Module: "abi/meta", Manifest: `queue = "mail"`, Attempt: 2, MaxAttempts: 5,
			Kind: "ack", Code: code(0), Settle: "ack", Output: "{id}\nmail\nmeta\n{version}\n\n\n-1\n64\n0\n2\n5\n"},
		{Name: "headers", Module: "abi/headers", Headers: map[string]string{"Trace-Id": "abc123", "Other": "x"},
			Kind: "ack", Code: code(0), Settle: "ack", Output: "abc123\n-1\n06\n"},
		{Name: "logs and stdio", Module: "abi/log",
			Kind: "ack", Code: code(0), Settle: "ack", Logs: []Log{
				{"debug", "debug line"}, {"info", "info line"}, {"warn", "warn line"}, {"error", "error line"},
				{"error", "clamped high"}, {"debug", "clamped low"},
				{"info", "out 1"}, {"warn", "err 1"}, {"info", "out 2"}}},
		{Name: "enqueue statuses and children", Module: "abi/enqueue", Manifest: "enqueue = [\"child\"]\nmax_children = 4",
			Kind: "ack", Code: code(0), Settle: "ack", Output: "0\n0\n-2\n-2\n-4\n-3\n", Enqueued: []Child{
				{"child", "payload-1", 0, false}, {"child", "payload-2", 250, false}, {"child", "payload-1", 0, false}, {"child", "payload-1", 0, false}}},
		{Name: "wait: statuses, awaited and plain children", Module: "abi/wait", Manifest: "enqueue = [\"child\"]\nmax_children = 4",
			Kind: "wait", Code: code(4), Settle: "wait", Output: "0\n0\n-1\n0\n0\n-2\n-4\n-3\n", Enqueued: []Child{
				{"child", "payload-1", 0, true}, {"child", "payload-2", 250, false}, {"child", "payload-2", 0, true}, {"child", "payload-2", 0, true}}},
		{Name: "wait without an awaited child is a failure", Module: "abi/wait", Payload: "nowait",
			Kind: "wait", Code: code(4), Settle: "retry", Reason: "wait without an awaited child"},
		{Name: "resumed run reads its children", Module: "abi/wait", Round: 1, Awaited: []backend.AwaitResult{
			{ID: "01JCHILD000000000000000000", Queue: "child", State: backend.JobSucceeded, Output: []byte("out 1")},
			{ID: "01JCHILD000000000000000001", Queue: "child", State: backend.JobDead, Reason: "no page"},
			{ID: "01JCHILD000000000000000002", Queue: "child", State: backend.JobUnfinished, Output: []byte(strings.Repeat("x", 100)), OutputTruncated: true},
		}, Kind: "ack", Code: code(0), Settle: "ack", Output: "1\n" +
			"01JCHILD000000000000000000 child succeeded  out 1 0\n" +
			"01JCHILD000000000000000001 child dead no page  0\n" +
			"01JCHILD000000000000000002 child unfinished  " + strings.Repeat("x", 100) + " 1\n" +
			"-1\n-2\n"},
		{Name: "resumed run: an output past the cap is cut and flagged", Module: "abi/wait", Round: 2, Awaited: []backend.AwaitResult{
			{ID: "01JCHILD000000000000000000", Queue: "child", State: backend.JobSucceeded, Output: []byte(strings.Repeat("y", backend.MaxAwaitOutput+10))},
		}, Kind: "ack", Code: code(0), Settle: "ack", Output: "2\n" +
			"01JCHILD000000000000000000 child succeeded  " + strings.Repeat("y", backend.MaxAwaitOutput) + " 1\n-1\n-2\n"},
		{Name: "wait: enqueue_awaited's bad delay and payload limit", Module: "abi/wait_limits", Manifest: "enqueue = [\"child\"]\nmax_payload = 8",
			Kind: "wait", Code: code(4), Settle: "wait", Output: "-2\n-3\n0\n", Enqueued: []Child{{"child", "payload-", 250, true}}},
		{Name: "resumed run: child_read's short buffer and bad index and field", Module: "abi/wait_limits", Round: 1, Awaited: []backend.AwaitResult{
			{ID: "01JCHILD000000000000000000", Queue: "child", State: backend.JobSucceeded, Output: []byte("out 1")},
		}, Kind: "ack", Code: code(0), Settle: "ack", Output: "26\n01JC#\n26\n@\n-1\n-1\n-2\n"},
		{Name: "output cap", Module: "abi/output_cap", Manifest: "max_output = 1000",
			Kind: "ack", Code: code(0), Settle: "ack", Output: strings.Repeat("\x00", 600)},
		{Name: "sleep, then ack", Module: "abi/sleep_ms", Payload: "20",
			Kind: "ack", Code: code(0), Settle: "ack", Output: "slept"},
		{Name: "initialisation runs once, in order", Module: "abi/init_ok", Stateful: true,
			Kind: "ack", Code: code(0), Settle: "ack", Output: "1"},
		{Name: "trace keys empty in init and with tracing off", Module: "abi/init_meta", Manifest: `isolation = "fresh"`,
			Kind: "ack", Code: code(0), Settle: "ack", Output: "0\n0\n0\n0\n"},

		{Name: "infinite loop times out", Module: "hostile/loop", Manifest: `timeout = "100ms"`,
			Kind: "timeout", Settle: "retry", Reason: "timeout after 100ms"},
		{Name: "an hour's sleep times out", Module: "hostile/sleep", Manifest: `timeout = "100ms"`,
			Kind: "timeout", Settle: "retry", Reason: "timeout after 100ms"},
		{Name: "memory bomb", Module: "hostile/membomb", Manifest: `memory = "4MiB"`,
			Kind: "trap", Settle: "retry", Reason: "trap: unreachable"},
		{Name: "deep recursion", Module: "hostile/recursion",
			Kind: "trap", Settle: "retry", Reason: "trap: stack overflow"},
		{Name: "trap", Module: "hostile/trap", Kind: "trap", Settle: "retry", Reason: "trap: unreachable"},
		{Name: "trap at the last attempt", Module: "hostile/trap", Attempt: 4, MaxAttempts: 4,
			Kind: "trap", Settle: "dead_letter", Reason: "max attempts (4) exceeded: trap: unreachable"},
		{Name: "AssemblyScript abort", Module: "hostile/abort",
			Kind: "trap", Settle: "retry", Reason: "trap: abort: boom at a.ts:3:7"},
		{Name: "invalid outcome code", Module: "hostile/invalid_code",
			Kind: "invalid_code", Code: code(7), Settle: "retry", Reason: "invalid outcome code 7"},
		{Name: "proc_exit 2", Module: "hostile/exit", Payload: "2", Kind: "exit", Settle: "retry", Reason: "exit code 2"},
		{Name: "proc_exit 0", Module: "hostile/exit", Payload: "0", Kind: "exit", Settle: "retry", Reason: "exit code 0"},
		{Name: "log flood", Module: "hostile/logflood", Kind: "ack", Code: code(0), Settle: "ack", Logs: flood},
		{Name: "long log line", Module: "hostile/longlog", Kind: "ack", Code: code(0), Settle: "ack",
			Logs: []Log{{"warn", strings.Repeat("x", 4096) + "... (truncated 5904 bytes)"}}},
		{Name: "output flood", Module: "hostile/outflood", Manifest: `max_output = "256KiB"`,
			Kind: "ack", Code: code(0), Settle: "ack", Output: strings.Repeat("\x00", 256<<10)},
	}
	for _, oob := range []struct{ sel, fn string }{
		{"a", "payload_read"}, {"b", "meta_read"}, {"c", "header_read"}, {"d", "header_read"}, {"e", "log"},
		{"f", "set_reason"}, {"g", "output_write"}, {"h", "enqueue"}, {"i", "enqueue"}, {"j", "payload_read"}, {"k", "meta_read"},
		{"l", "http_start"}, {"m", "http_error_read"}, {"n", "http_headers_read"}, {"o", "http_url_read"},
		{"p", "http_body_read"}, {"q", "http_wait"}, {"r", "http_wait"}, {"s", "enqueue_awaited"}, {"t", "child_read"},
		{"u", "enqueue_awaited"},
	} {
		module := "hostile/oob"
		if oob.sel >= "s" {
			module = "hostile/oob_wait" // the imports of fan-in, apart: refused where waits cannot be served
		}
		cases = append(cases, Case{Name: fmt.Sprintf("out-of-bounds pointer %s (%s)", oob.sel, oob.fn), Module: module,
			Payload: oob.sel, Kind: "trap", Settle: "retry", Reason: "trap: invalid memory access in " + oob.fn})
	}
	for _, bad := range []struct {
		module, manifest, err string
		serveOnly             bool
	}{
		{"hostile/no_marker", "", `missing export "wasmjobs_abi_v1": not an ABI v1 module`, false},
		{"hostile/no_handle", "", `missing export "wasmjobs_handle"`, false},
		{"hostile/no_memory", "", `missing export "memory" (a memory)`, false},
		{"hostile/wrong_handle", "", `export "wasmjobs_handle" has type (i32) -> (i32), want () -> (i32)`, false},
		{"hostile/wrong_init_type", "", `export "wasmjobs_init" has type () -> (), want () -> (i32)`, false},
		{"hostile/bad_import", "", "imports wasmjobs.launch_missiles, which ABI v1 does not define", false},
		{"hostile/wrong_import_type", "", "imports wasmjobs.payload_len as (i32) -> (i64), want () -> (i32)", false},
		{"hostile/foreign_import", "", "imports os.system, which the host does not provide", false},
		{"hostile/command", "", "exports _start (a WASI command): build it as a reactor", false},
		{"hostile/big_memory", "", "memory starts at 2048 pages, above the limit of 1024 pages", false},
		{"hostile/init_trap", "", "_initialize failed: trap: unreachable", false},
		{"hostile/init_fail", "", "wasmjobs_init returned 5", false},
		{"hostile/init_loop", `timeout = "100ms"`, "wasmjobs_init failed: timeout after 100ms", false},
		{"hostile/serve_wrong_type", "", `export "wasmjobs_serve" has type () -> (i32), want () -> ()`, false},
		{"hostile/serve_no_next_job", "", `exports "wasmjobs_serve" without importing wasmjobs.next_job`, false},
		{"hostile/serve_no_ask", `timeout = "100ms"`, "wasmjobs_serve did not ask for a job (next_job) within the timeout of 100ms", true},
		{"hostile/serve_return_early", "", "wasmjobs_serve returned before it asked for a job (next_job)", true},
		{"hostile/not_wasm", "", "not a wasm module", false},
		{"hostile/truncated", "", "invalid module truncated", false},
	} {
		cases = append(cases, Case{Name: "invalid " + filepath.Base(bad.module), Module: bad.module, Manifest: bad.manifest, Invalid: bad.err, ServeOnly: bad.serveOnly})
	}
	return cases
}
