// Package wasmjobstest holds the rigs for testing handler modules, and programs that
// embed a wasmjobs host, in ordinary Go tests: a host on the memory backend that the
// test's cleanup stops, modules made from WebAssembly text, and waits for a module to
// serve and for a job to reach a state.
//
// Every function takes the test's testing.TB and fails the test, with a message that
// says what it saw, rather than returning an error to check; each marks itself a
// helper, so that a failure names the test's line.
//
// # A test of a handler
//
//	func TestGreet(t *testing.T) {
//		h := wasmjobstest.NewHost(t, wasmjobstest.HostConfig{})
//		h.AddModule("greet", wasmjobstest.WAT(t, greetWAT), "") // waits until it serves
//		id := h.Enqueue("greet", []byte("world"))
//		job := h.WaitState(id, "succeeded")
//		if job.Output != "hello, world" {
//			t.Errorf("output %q", job.Output)
//		}
//	}
//
// NewHost builds a server.Server on a fresh memory backend (or the backend
// HostConfig.Backend names), with a temporary modules directory and compilation cache,
// serving its API on a loopback listener of its own, and starts it. The test's cleanup
// stops it (draining, as server.Server.Stop does) and fails the test when that Stop
// fails; when the test failed, the host's log is added to its output.
//
// Modules come from any source of bytes: a file a build of yours wrote (a Go, Rust or
// JavaScript guest), or WAT, which runs wabt's wat2wasm (the Debian package wabt) on
// the text of a module.
//
// Jobs go in through server.Server.Enqueue, under the rules POST /v1/jobs applies, and
// their state is read from the host's API (GET /v1/jobs/{id}), as a client's would;
// Host.Call reaches the rest of the API.
//
// # Compatibility
//
// wasmjobstest is one of the public packages (with server, host, worker, backend and
// abi); at v0 they may change, each change with an entry in the CHANGELOG.
package wasmjobstest
