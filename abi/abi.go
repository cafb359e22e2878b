// Package abi holds the constants of the wasmjobs guest ABI, version 1: the names a
// module exports and imports, the outcome codes its handler returns, the statuses host
// functions return, the metadata keys, and the default limits. SPEC.md beside this file
// is the normative text; CHANGELOG.md records every change.
//
// The package has no dependencies and builds for GOOS=wasip1, so guests and tools can
// use the same names as the host.
package abi

// Version is the ABI version this package describes.
const Version = 1

// ImportModule is the module name of the host functions.
const ImportModule = "wasmjobs"

// Exports of a module.
const (
	// ExportMemory is the guest's linear memory (required).
	ExportMemory = "memory"
	// ExportMarker, a () -> () function, says the module speaks ABI v1; it is never
	// called (required).
	ExportMarker = "wasmjobs_abi_v1"
	// ExportHandle, a () -> i32 function, runs one job and returns an outcome code
	// (required).
	ExportHandle = "wasmjobs_handle"
	// ExportInitialize, a () -> () function, is the WASI reactor initialisation,
	// called once per instance, first (optional).
	ExportInitialize = "_initialize"
	// ExportInit, a () -> i32 function, is called once per instance after
	// _initialize; a non-zero result makes the module invalid (optional).
	ExportInit = "wasmjobs_init"
	// ExportServe, a () -> () function added to ABI v1, runs many jobs in one call:
	// it loops on FuncNextJob, running a job each time that returns 1, and returns
	// when it returns 0 (optional; a module that exports it still exports
	// ExportHandle, and behaves the same whichever the host calls).
	ExportServe = "wasmjobs_serve"
)

// Outcome codes returned by wasmjobs_handle. Any other value is a failure.
const (
	OutcomeAck        int32 = 0
	OutcomeRetry      int32 = 1
	OutcomeDefer      int32 = 2
	OutcomeDeadLetter int32 = 3
	// OutcomeWait publishes the staged children and holds the job, holding no
	// capacity, until every awaited one (FuncEnqueueAwaited) has ended; the job then
	// runs again at the same attempt, one round higher (SPEC.md, "Fan-out and fan-in").
	// WAIT without an awaited child staged is a failure.
	OutcomeWait int32 = 4
)

// Statuses returned by host functions: >= 0 is success (a length where one is
// returned).
const (
	StatusNotFound      int32 = -1
	StatusBadArgument   int32 = -2
	StatusLimitExceeded int32 = -3
	StatusNotPermitted  int32 = -4
)

// Metadata keys of meta_read.
const (
	MetaJobID         int32 = 0
	MetaQueue         int32 = 1
	MetaModuleName    int32 = 2
	MetaModuleVersion int32 = 3
	// MetaTraceID and MetaSpanID, added to ABI v1, are the trace id (32 lowercase hex
	// digits) and span id (16) of the host's span the handler runs under; both read as
	// empty, not as unknown keys, with tracing off and outside a job.
	MetaTraceID int32 = 4
	MetaSpanID  int32 = 5
)

// Log levels of the log host function; values outside the range are clamped into it.
const (
	LogDebug int32 = 0
	LogInfo  int32 = 1
	LogWarn  int32 = 2
	LogError int32 = 3
)

// Host functions, imported from ImportModule.
const (
	FuncPayloadLen  = "payload_len"  // () -> i32
	FuncPayloadRead = "payload_read" // (buf, buf_len i32) -> i32
	FuncMetaRead    = "meta_read"    // (key, buf, buf_len i32) -> i32
	FuncAttempt     = "attempt"      // () -> i32
	FuncMaxAttempts = "max_attempts" // () -> i32
	FuncHeaderRead  = "header_read"  // (key, key_len, buf, buf_len i32) -> i32
	FuncLog         = "log"          // (level, msg, msg_len i32) -> ()
	FuncSetReason   = "set_reason"   // (msg, msg_len i32) -> ()
	FuncSetDelayMs  = "set_delay_ms" // (ms i64) -> ()
	FuncOutputWrite = "output_write" // (buf, buf_len i32) -> i32
	FuncEnqueue     = "enqueue"      // (queue, queue_len, payload, payload_len i32, delay_ms i64) -> i32
	// FuncNextJob, added to ABI v1 for ExportServe, passes the outcome code of the job
	// it last returned 1 for (ignored on the first call) and waits for the next: 1
	// when there is one to run, 0 when wasmjobs_serve is to return. Outside
	// wasmjobs_serve it returns 0 at once.
	FuncNextJob = "next_job" // (outcome i32) -> i32
)

// Host functions of fan-out and fan-in, added to ABI v1 (SPEC.md, "Fan-out and
// fan-in"). A host whose backend keeps no waiting jobs refuses, at load, a module that
// imports any of them.
const (
	FuncEnqueueAwaited = "enqueue_awaited" // (queue, queue_len, payload, payload_len i32, delay_ms i64) -> i32
	FuncRound          = "round"           // () -> i32
	FuncChildrenLen    = "children_len"    // () -> i32
	FuncChildRead      = "child_read"      // (index, field, buf, buf_len i32) -> i32
)

// IsWaitFunc reports whether name is a host function of fan-out and fan-in: a module
// that imports one of them needs a host that can hold a waiting job.
func IsWaitFunc(name string) bool {
	switch name {
	case FuncEnqueueAwaited, FuncRound, FuncChildrenLen, FuncChildRead:
		return true
	}
	return false
}

// Fields of child_read: how one awaited child of the last wait ended.
const (
	ChildID        int32 = 0 // the child's job id
	ChildQueue     int32 = 1 // its queue
	ChildState     int32 = 2 // succeeded, dead, cancelled, or unfinished when the wait timed out
	ChildReason    int32 = 3 // why it did not succeed; empty when it did
	ChildOutput    int32 = 4 // its last run's output, up to MaxChildOutput bytes
	ChildTruncated int32 = 5 // one byte: 1 when its output was cut at MaxChildOutput, else 0
)

// MaxChildOutput is how much of each awaited child's output a resumed parent reads;
// ChildTruncated says whether the rest was cut.
const MaxChildOutput = 16 << 10

// Host functions of outbound HTTP, added to ABI v1 (SPEC.md, "Outbound HTTP"). A
// module without an [http] grant may import them: http_start then returns
// StatusNotPermitted.
const (
	FuncHTTPStart       = "http_start"        // (method, method_len, url, url_len, headers, headers_len, body, body_len i32) -> i32
	FuncHTTPStatus      = "http_status"       // (handle i32) -> i32
	FuncHTTPErrorRead   = "http_error_read"   // (handle, buf, buf_len i32) -> i32
	FuncHTTPHeadersRead = "http_headers_read" // (handle, buf, buf_len i32) -> i32
	FuncHTTPURLRead     = "http_url_read"     // (handle, buf, buf_len i32) -> i32
	FuncHTTPBodyRead    = "http_body_read"    // (handle, buf, buf_len i32) -> i32
	FuncHTTPClose       = "http_close"        // (handle i32) -> i32
	FuncHTTPWait        = "http_wait"         // (handles, n i32, timeout_ms i64) -> i32
)

// Statuses of the outbound HTTP functions: how a request failed. Each is distinct, so
// that a guest (and its SDK) can tell them apart; http_error_read gives the message.
const (
	StatusHTTPDenied           int32 = -10 // the URL, or a redirect hop's, is outside the grant; nothing was sent to it
	StatusHTTPBlocked          int32 = -11 // the name resolved only to addresses the grant does not allow (private, loopback, ...)
	StatusHTTPDNS              int32 = -12 // the name did not resolve
	StatusHTTPRefused          int32 = -13 // the connection was refused
	StatusHTTPTLS              int32 = -14 // the TLS handshake failed
	StatusHTTPTimeout          int32 = -15 // the grant's timeout or the job's deadline passed
	StatusHTTPTooLarge         int32 = -16 // the body passed max_response
	StatusHTTPTooManyRequests  int32 = -17 // the run already started max_requests requests
	StatusHTTPRateLimited      int32 = -18 // a wait for a limit of [http.limits] would pass the request's deadline
	StatusHTTPCircuitOpen      int32 = -19 // the destination's circuit breaker is open (or half-open, its probe out)
	StatusHTTPConnection       int32 = -20 // the connection failed otherwise (reset, closed early, protocol error)
	StatusHTTPTooManyRedirects int32 = -21 // more than 5 redirects
)

// Default limits per module, each overridable in the module's manifest.
const (
	DefaultTimeoutMs     = 30_000
	DefaultMemoryPages   = 1024 // 64 MiB
	DefaultMaxPayload    = 1 << 20
	DefaultMaxOutput     = 1 << 20
	DefaultMaxLogMessage = 4 << 10
	DefaultMaxLogLines   = 1000
	DefaultMaxChildren   = 100
	DefaultMaxReason     = 1 << 10
	DefaultMaxAttempts   = 25
)
