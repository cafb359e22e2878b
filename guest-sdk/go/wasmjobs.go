// Package wasmjobs writes wasmjobs job handlers in Go, compiled to WebAssembly.
//
// A handler is a function from a job to an error: nil acknowledges the job, an error
// made by Retry, Defer or DeadLetter settles it that way, and any other error retries
// it with the error's text as the reason. Register it in an init function; the SDK
// exports the ABI's functions, so a module is just:
//
//	package main
//
//	import wasmjobs "github.com/wasmjobs/wasmjobs/guest-sdk/go"
//
//	func init() {
//		wasmjobs.Handle(func(job *wasmjobs.Job) error {
//			job.Infof("hello, %s", job.Text())
//			return nil
//		})
//	}
//
//	func main() {}
//
// Build it as a WASI reactor with the plain Go toolchain:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o hello.wasm .
//
// For outbound HTTP, where the module's manifest grants it, import the subpackage
// github.com/wasmjobs/wasmjobs/guest-sdk/go/wjhttp: it makes net/http's client work
// through the host, and its RetryAfter settles a job after a 429 or 503. This package
// does not import net/http, so a handler that makes no requests does not carry it.
//
// Fan-out and fan-in: stage children with EnqueueAwaited and return
// WaitForChildren(); the job runs again at the same attempt once they have ended,
// Round one higher, Children saying how each ended. A module that calls them
// loads only where the backend keeps waiting jobs (not RabbitMQ); one that does not
// imports nothing of them.
package wasmjobs

import (
	"errors"
	"fmt"
	"time"
)

// HandlerFunc handles one job.
type HandlerFunc func(job *Job) error

var handler HandlerFunc

// Handle registers the module's handler. Call it once, from an init function.
func Handle(h HandlerFunc) { handler = h }

// Job is the job being handled. Its methods read the job and stage what the host does
// once the handler returns; they are valid only during the handler's call.
type Job struct {
	payload []byte
	read    bool
}

// Outcome is how a job is settled.
type Outcome int32

// The outcomes, with the ABI's codes.
const (
	Ack           Outcome = Outcome(outcomeAck)
	RetryJob      Outcome = Outcome(outcomeRetry)
	DeferJob      Outcome = Outcome(outcomeDefer)
	DeadLetterJob Outcome = Outcome(outcomeDeadLetter)
	WaitJob       Outcome = Outcome(outcomeWait)
)

// SettleError is an error that settles a job a given way.
type SettleError struct {
	Outcome Outcome
	Reason  string
	// Delay is the wait before the job runs again (Retry, Defer); zero leaves a retry
	// to the queue's backoff.
	Delay time.Duration
}

func (e *SettleError) Error() string { return e.Reason }

// Retry asks for the job to run again after delay (zero: the queue's backoff), with
// reason recorded.
func Retry(reason string, delay time.Duration) error {
	return &SettleError{Outcome: RetryJob, Reason: reason, Delay: delay}
}

// Defer puts the job back at the front of its queue after delay, without using up an
// attempt: for rate limits and waiting on something else. delay must be positive.
func Defer(delay time.Duration, reason string) error {
	return &SettleError{Outcome: DeferJob, Reason: reason, Delay: delay}
}

// DeadLetter moves the job to the dead letters with reason: retrying cannot help.
func DeadLetter(reason string) error {
	return &SettleError{Outcome: DeadLetterJob, Reason: reason}
}

// WaitForChildren settles the job as waiting for the children it staged with
// EnqueueAwaited: they are published with the settle, and once every one has ended the
// job runs again at the same attempt, Round one higher, Children saying how each
// ended. Return it from the handler. A wait without an awaited child is a failure.
func WaitForChildren() error {
	return &SettleError{Outcome: WaitJob, Reason: "waiting for children"}
}

// Errors of the staging methods, from the host's statuses.
var (
	ErrBadArgument   = errors.New("wasmjobs: bad argument")
	ErrLimitExceeded = errors.New("wasmjobs: limit exceeded")
	ErrNotPermitted  = errors.New("wasmjobs: not permitted")
	ErrNotFound      = errors.New("wasmjobs: not found")
)

func statusError(s int32) error {
	switch s {
	case statusBadArgument:
		return ErrBadArgument
	case statusLimitExceeded:
		return ErrLimitExceeded
	case statusNotPermitted:
		return ErrNotPermitted
	case statusNotFound:
		return ErrNotFound
	}
	if s < 0 {
		return fmt.Errorf("wasmjobs: status %d", s)
	}
	return nil
}

// settle turns the handler's error into an outcome code, staging reason and delay.
func settle(err error) int32 {
	if err == nil {
		return outcomeAck
	}
	var se *SettleError
	if !errors.As(err, &se) {
		se = &SettleError{Outcome: RetryJob, Reason: err.Error()}
	}
	if se.Reason != "" && se.Outcome != WaitJob {
		setReason(se.Reason)
	}
	if se.Delay > 0 {
		setDelayMs(se.Delay.Milliseconds())
	}
	return int32(se.Outcome)
}

// run calls the handler, turning a panic into a retry with its message.
func run() (code int32) {
	if handler == nil {
		setReason("no handler registered: call wasmjobs.Handle from an init function")
		return outcomeRetry
	}
	defer func() {
		if p := recover(); p != nil {
			code = settle(fmt.Errorf("panic: %v", p))
		}
	}()
	return settle(handler(&Job{}))
}
