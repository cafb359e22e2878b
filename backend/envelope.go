package backend

import (
	"maps"
	"time"
)

// Envelope is a job as it travels through a backend.
type Envelope struct {
	// ID identifies the job. IDs made by NewID sort by creation time.
	ID string
	// Queue is the queue the job is published to.
	Queue string
	// Payload is the job's input, opaque bytes.
	Payload []byte
	// Headers are the job's string headers; keys are exact, case-sensitive.
	Headers map[string]string
	// Priority orders ready jobs on queues declared with priority levels: higher first,
	// FIFO among equals. Values above the queue's levels count as its highest level.
	Priority uint8
	// Attempt is the 1-based number of the execution this envelope starts. Zero, on a
	// job nobody has run yet, counts as 1.
	Attempt int
	// MaxAttempts is how many executions are allowed before the job is dead-lettered;
	// zero means the consumer's default.
	MaxAttempts int
	// Defers counts consecutive defers, so that a consumer can bound them.
	Defers int
	// EnqueuedAt is when the job was first enqueued.
	EnqueuedAt time.Time
	// Reason is the last failure reason, empty on a job that has not failed.
	Reason string
	// Key is the job's concurrency key, empty for none: a queue declared with
	// QueueConfig.KeyConcurrency N runs at most N jobs of one key at once, in the
	// order they were published. It is not the unique key of UniquePublication, which
	// makes a publish a duplicate: jobs of one concurrency key are all kept, and wait
	// their turn.
	Key string
	// Round counts the waits of the job that have ended: zero on a first run, n on the
	// run resumed after its n-th wait (WaitingDelivery). A backend without waiting
	// keeps it zero.
	Round int
	// Redelivered is set by a backend on a delivery it handed out before without its
	// being settled (a dropped stream, a lost connection). It is not published.
	Redelivered bool
}

// NewEnvelope returns a fresh job for queue with payload: a new ID, attempt 1 and
// EnqueuedAt now.
func NewEnvelope(queue string, payload []byte) Envelope {
	return Envelope{
		ID:         NewID(),
		Queue:      queue,
		Payload:    payload,
		Attempt:    1,
		EnqueuedAt: time.Now(),
	}
}

// Clone returns a copy of e whose payload and headers share no memory with e's.
func (e Envelope) Clone() Envelope {
	c := e
	if e.Payload != nil {
		c.Payload = append([]byte(nil), e.Payload...)
	}
	c.Headers = maps.Clone(e.Headers)
	return c
}
