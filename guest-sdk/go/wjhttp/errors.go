package wjhttp

import (
	"errors"
	"fmt"
)

// The ABI's failure statuses of a request (the ABI specification's "Outbound HTTP (added)").
const (
	StatusDenied           int32 = -10
	StatusBlocked          int32 = -11
	StatusDNS              int32 = -12
	StatusRefused          int32 = -13
	StatusTLS              int32 = -14
	StatusTimeout          int32 = -15
	StatusTooLarge         int32 = -16
	StatusTooManyRequests  int32 = -17
	StatusRateLimited      int32 = -18
	StatusCircuitOpen      int32 = -19
	StatusConnection       int32 = -20
	StatusTooManyRedirects int32 = -21
)

// The kinds of failure, one per status: test a request's error with errors.Is, as in
// errors.Is(err, wjhttp.ErrDenied). The *Error behind it carries the status and the
// host's message.
var (
	// ErrDenied: the URL, or a redirect hop's, is outside the manifest's grant; nothing
	// was sent to it.
	ErrDenied = errors.New("denied")
	// ErrBlocked: every address the name resolved to is one the grant does not reach
	// (loopback, private, link-local...); no connection was made.
	ErrBlocked = errors.New("blocked address")
	// ErrDNS: the name did not resolve.
	ErrDNS = errors.New("DNS failure")
	// ErrRefused: the connection was refused.
	ErrRefused = errors.New("connection refused")
	// ErrTLS: the TLS handshake failed (an unknown authority, a wrong name).
	ErrTLS = errors.New("TLS failure")
	// ErrTimeout: the grant's timeout or the job's deadline passed on the host. A
	// deadline of the request's own context is context.DeadlineExceeded instead.
	ErrTimeout = errors.New("timeout")
	// ErrTooLarge: the response body passed the grant's max_response.
	ErrTooLarge = errors.New("response too large")
	// ErrTooManyRequests: this run of the handler already started max_requests requests.
	ErrTooManyRequests = errors.New("too many requests")
	// ErrRateLimited: a wait for a limit of [http.limits] would pass the request's
	// deadline; nothing was sent. wjhttp.RetryAfter is not for it: defer the job
	// yourself (wasmjobs.Defer).
	ErrRateLimited = errors.New("rate limited")
	// ErrCircuitOpen: the destination's circuit breaker is open.
	ErrCircuitOpen = errors.New("circuit open")
	// ErrConnection: the connection failed otherwise (reset, closed early, a protocol
	// error).
	ErrConnection = errors.New("connection failed")
	// ErrTooManyRedirects: the host followed 5 redirects and was sent to a sixth.
	ErrTooManyRedirects = errors.New("too many redirects")
)

var kinds = map[int32]error{
	StatusDenied: ErrDenied, StatusBlocked: ErrBlocked, StatusDNS: ErrDNS, StatusRefused: ErrRefused,
	StatusTLS: ErrTLS, StatusTimeout: ErrTimeout, StatusTooLarge: ErrTooLarge, StatusTooManyRequests: ErrTooManyRequests,
	StatusRateLimited: ErrRateLimited, StatusCircuitOpen: ErrCircuitOpen, StatusConnection: ErrConnection,
	StatusTooManyRedirects: ErrTooManyRedirects,
}

// Error is a request's failure as the host reports it. net/http hands it to the caller
// inside a *url.Error, so reach it with errors.As, or its kind with errors.Is.
type Error struct {
	// Code is the ABI's status, StatusDenied (-10) to StatusTooManyRedirects (-21).
	Code int32
	// Message is the host's account of the failure, such as
	// "denied: http://127.0.0.2:1 is not granted".
	Message string
}

// Error returns the host's message, or the kind and code when the host gave none.
func (e *Error) Error() string {
	if e.Message != "" {
		return e.Message
	}
	if k, ok := kinds[e.Code]; ok {
		return fmt.Sprintf("%v (status %d)", k, e.Code)
	}
	return fmt.Sprintf("http status %d", e.Code)
}

// Is reports whether target is the sentinel of e's kind.
func (e *Error) Is(target error) bool {
	k, ok := kinds[e.Code]
	return ok && k == target
}

// Timeout reports whether the host timed the request out, so that net.Error-style
// checks (url.Error.Timeout) see it.
func (e *Error) Timeout() bool { return e.Code == StatusTimeout }
