//go:build wasip1

package wasmjobs

import "unsafe"

//go:wasmimport wasmjobs payload_len
func payloadLen() int32

//go:wasmimport wasmjobs payload_read
func payloadRead(buf *byte, n int32) int32

//go:wasmimport wasmjobs meta_read
func metaRead(key int32, buf *byte, n int32) int32

//go:wasmimport wasmjobs attempt
func attempt() int32

//go:wasmimport wasmjobs max_attempts
func maxAttempts() int32

//go:wasmimport wasmjobs header_read
func headerRead(key *byte, keyLen int32, buf *byte, n int32) int32

//go:wasmimport wasmjobs log
func logMsg(level int32, msg *byte, n int32)

//go:wasmimport wasmjobs set_reason
func setReasonRaw(msg *byte, n int32)

//go:wasmimport wasmjobs set_delay_ms
func setDelayMs(ms int64)

//go:wasmimport wasmjobs output_write
func outputWrite(buf *byte, n int32) int32

//go:wasmimport wasmjobs enqueue
func enqueue(queue *byte, queueLen int32, payload *byte, payloadLen int32, delayMs int64) int32

// The imports of fan-out and fan-in: Go's linker keeps an import only when the
// module calls it, so a module that never waits imports none of them and loads on
// every backend.

//go:wasmimport wasmjobs enqueue_awaited
func enqueueAwaited(queue *byte, queueLen int32, payload *byte, payloadLen int32, delayMs int64) int32

//go:wasmimport wasmjobs round
func round() int32

//go:wasmimport wasmjobs children_len
func childrenLen() int32

//go:wasmimport wasmjobs child_read
func childRead(index, field int32, buf *byte, n int32) int32

//go:wasmexport wasmjobs_abi_v1
func abiV1() {}

//go:wasmexport wasmjobs_handle
func handle() int32 { return run() }

//go:wasmimport wasmjobs next_job
func nextJob(outcome int32) int32

// serve runs the jobs a host hands a pooled instance in one call, each as handle
// would; the host may call handle once a job instead.
//
//go:wasmexport wasmjobs_serve
func serve() {
	var outcome int32
	for nextJob(outcome) != 0 {
		outcome = run()
	}
}

// ptr points at a string's bytes (nil for an empty one: the host reads nothing).
func ptr(s string) *byte { return unsafe.StringData(s) }

// bufPtr points at a slice's bytes (nil for an empty one).
func bufPtr(b []byte) *byte {
	if len(b) == 0 {
		return nil
	}
	return &b[0]
}
