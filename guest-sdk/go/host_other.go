//go:build !wasip1

package wasmjobs

import "unsafe"

// On other targets the host functions are a stand-in, so that the SDK's tests run
// natively with `go test`: a handler built with the SDK only runs under wasmjobs.

// fakeHost is the stand-in host of the native tests.
type fakeHost struct {
	payload  []byte
	meta     [6]string // job id, queue, module, version, trace id, span id
	headers  map[string]string
	attempt  int32
	max      int32
	logs     []string
	reason   string
	delayMs  int64
	output   []byte
	children []string
	round    int32
	awaited  [][6]string // per child: id, queue, state, reason, output, truncated ("\x00" or "\x01")
}

var host = &fakeHost{delayMs: -1}

func bytesAt(p *byte, n int32) []byte {
	if n == 0 || p == nil {
		return nil
	}
	return unsafe.Slice(p, n)
}

func payloadLen() int32                    { return int32(len(host.payload)) }
func payloadRead(buf *byte, n int32) int32 { return int32(copy(bytesAt(buf, n), host.payload)) }
func metaRead(key int32, buf *byte, n int32) int32 {
	if key < 0 || int(key) >= len(host.meta) {
		return statusNotFound
	}
	copy(bytesAt(buf, n), host.meta[key])
	return int32(len(host.meta[key]))
}
func attempt() int32     { return host.attempt }
func maxAttempts() int32 { return host.max }
func headerRead(key *byte, keyLen int32, buf *byte, n int32) int32 {
	v, ok := host.headers[string(bytesAt(key, keyLen))]
	if !ok {
		return statusNotFound
	}
	copy(bytesAt(buf, n), v)
	return int32(len(v))
}
func logMsg(level int32, msg *byte, n int32) {
	host.logs = append(host.logs, string(rune('0'+level))+" "+string(bytesAt(msg, n)))
}
func setReasonRaw(msg *byte, n int32) { host.reason = string(bytesAt(msg, n)) }
func setDelayMs(ms int64)             { host.delayMs = ms }
func outputWrite(buf *byte, n int32) int32 {
	host.output = append(host.output, bytesAt(buf, n)...)
	return n
}
func enqueue(queue *byte, queueLen int32, payload *byte, payloadLen int32, delayMs int64) int32 {
	if queueLen == 0 || delayMs < 0 {
		return statusBadArgument
	}
	host.children = append(host.children, string(bytesAt(queue, queueLen))+":"+string(bytesAt(payload, payloadLen)))
	return 0
}

func enqueueAwaited(queue *byte, queueLen int32, payload *byte, payloadLen int32, delayMs int64) int32 {
	if s := enqueue(queue, queueLen, payload, payloadLen, delayMs); s < 0 {
		return s
	}
	host.children[len(host.children)-1] += " (awaited)"
	return 0
}
func round() int32       { return host.round }
func childrenLen() int32 { return int32(len(host.awaited)) }
func childRead(index, field int32, buf *byte, n int32) int32 {
	if index < 0 || int(index) >= len(host.awaited) {
		return statusNotFound
	}
	if field < 0 || field > 5 {
		return statusBadArgument
	}
	v := host.awaited[index][field]
	copy(bytesAt(buf, n), v)
	return int32(len(v))
}

func ptr(s string) *byte { return unsafe.StringData(s) }

func bufPtr(b []byte) *byte {
	if len(b) == 0 {
		return nil
	}
	return &b[0]
}

// Trap panics on other targets: there is no instance to end.
func Trap() { panic("wasmjobs.Trap") }
