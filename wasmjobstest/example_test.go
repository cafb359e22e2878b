package wasmjobstest_test

import (
	"testing"

	"github.com/wasmjobs/wasmjobs/wasmjobstest"
)

// echoWAT is a handler that writes its payload back as its output.
const echoWAT = `(module
  (import "wasmjobs" "payload_len" (func $payload_len (result i32)))
  (import "wasmjobs" "payload_read" (func $payload_read (param i32 i32) (result i32)))
  (import "wasmjobs" "output_write" (func $output_write (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "wasmjobs_abi_v1"))
  (func (export "wasmjobs_handle") (result i32)
    (local $n i32)
    (local.set $n (call $payload_len))
    (drop (call $payload_read (i32.const 0) (local.get $n)))
    (drop (call $output_write (i32.const 0) (local.get $n)))
    (i32.const 0)))`

// A test of a handler: a host on the memory backend serves the module, a job goes in
// through its API and its output is checked. The body is a test's (it needs the test's
// *testing.T), so this example is compiled, not run.
func Example() {
	var t *testing.T // in a test: func TestEcho(t *testing.T) { ... }

	h := wasmjobstest.NewHost(t, wasmjobstest.HostConfig{}) // stopped by t's cleanup
	h.AddModule("echo", wasmjobstest.WAT(t, echoWAT), "")   // serves the queue "echo"
	id := h.Enqueue("echo", []byte("hello"))
	if job := h.WaitState(id, "succeeded"); job.Output != "hello" {
		t.Errorf("output %q, want hello", job.Output)
	}
}
