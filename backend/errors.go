package backend

import (
	"errors"
	"fmt"
)

// Sentinel errors of the contract. Backends wrap them with the details (the queue's
// name, the delivery) so that errors.Is finds them.
var (
	// ErrShutDown is returned by every operation after Close.
	ErrShutDown = errors.New("backend shut down")
	// ErrUnknownQueue is returned for a queue that was never declared.
	ErrUnknownQueue = errors.New("unknown queue")
	// ErrAlreadySettled is returned by a second settle of the same delivery.
	ErrAlreadySettled = errors.New("delivery already settled")
	// ErrStreamClosed is returned when settling a delivery whose stream was dropped or
	// lost: the backend has already put it back on its queue.
	ErrStreamClosed = errors.New("stream closed: delivery returned to its queue")
	// ErrMalformed is returned by Delivery.Envelope for a message whose wire form
	// cannot be decoded.
	ErrMalformed = errors.New("malformed message")
	// ErrNotFound is returned when a named item, such as a dead letter, does not exist.
	ErrNotFound = errors.New("not found")
	// ErrDelayTooLong is returned by a publish, retry or defer whose delay passes the
	// longest the backend holds (at most MaxDelay).
	ErrDelayTooLong = errors.New("delay too long")
	// ErrJobState is returned by a job action (cancel, retry now, delete) that the
	// job's state does not allow, such as cancelling a running job.
	ErrJobState = errors.New("the job's state does not allow this")
	// ErrSettleUnknown is returned by a settle whose context ended while its write was
	// in flight: the outcome is unknown, the write may still land. The delivery must
	// not be settled again (a second settle gets ErrAlreadySettled); if the write
	// fails after all, the backend puts the job back on its queue.
	ErrSettleUnknown = errors.New("settle outcome unknown: the write may still land")
)

// UnknownQueue returns an error wrapping ErrUnknownQueue that names queue.
func UnknownQueue(queue string) error {
	return fmt.Errorf("%w %q (declare it first)", ErrUnknownQueue, queue)
}

// TransportError wraps a failure of the backend's transport (a broken connection, a
// refused publish), keeping the source for errors.Is and errors.As.
type TransportError struct {
	// Op is the operation that failed, such as "publish" or "consume".
	Op string
	// Queue is the queue involved, if any.
	Queue string
	// Err is the underlying error.
	Err error
}

// Error implements error.
func (e *TransportError) Error() string {
	if e.Queue != "" {
		return fmt.Sprintf("backend %s %q: %v", e.Op, e.Queue, e.Err)
	}
	return fmt.Sprintf("backend %s: %v", e.Op, e.Err)
}

// Unwrap returns the underlying error.
func (e *TransportError) Unwrap() error { return e.Err }
