// Package backend owns the contract between wasmjobs and the queues it consumes: the
// Backend, Stream and Delivery interfaces, the Envelope that travels through them, the
// per-queue configuration and the errors every backend reports.
//
// The package knows nothing of workers or WebAssembly. Implementations live in
// subpackages (memory, pebble, rabbitmq) and all pass the same contract suite in
// backend/backendtest.
//
// The contract, in short:
//   - Declare idempotently creates a queue with its delay, hold and dead-letter
//     infrastructure.
//   - Publish puts an envelope on env.Queue, after a delay when it is non-zero; Defer puts
//     it into a hold that releases it onto env.Queue after the delay. They differ only in
//     the priority the caller gave the envelope: both wait, only a deferred one (raised
//     priority) comes back to the front.
//   - Consume streams deliveries with the queue's prefetch: never more than Prefetch
//     unsettled deliveries at once. Dropping a stream loses nothing: what was pulled but
//     not delivered, and every delivery not yet settled, becomes available again.
//   - A Delivery is settled exactly once. Retry, Defer and DeadLetter publish first and
//     acknowledge second; if the publish fails the delivery stays unacknowledged.
//   - Delays never fire early: they are rounded up to the backend's granularity.
//   - After Close, every operation fails with ErrShutDown and streams end.
//   - A backend that knows ids drops a repeat publish of an id it still holds (ready,
//     delayed, deferred, or delivered and not settled) and reports success. Child jobs
//     get ids derived from their parent's id, their index, queue and payload
//     (ChildID), so a publish retried after a partial failure repeats ids instead of
//     making new jobs, while a different child at the same index is a new job. The
//     memory backend drops repeats, per queue; a durable backend that stores jobs by id
//     does too. RabbitMQ cannot look a message up by id: it publishes the repeat, with
//     the id as the AMQP message-id so that a consumer can tell. A repeat after the
//     first copy was settled is a new job on every backend: this makes a retried
//     publish safe, not a job exactly-once.
//
// Backends with a store of their own may implement optional interfaces: BatchPublisher
// (an all-or-nothing batch), AtomicDelivery (an ack committed with its children,
// settles that carry the job's record), CancellableDelivery (a running job settled as
// cancelled), DependentPublisher, WaitingDelivery, AwaitedDelivery, WaitCanceller and
// GroupStore (jobs that wait for other jobs: fan-in, workflows, batches) and
// JobRecordReader (records by id; such a
// backend drops a repeat publish of an id it still holds), UniquePublisher (jobs unique
// by key within their queue, exactly), JobLister, JobController and JobEnvelopeReader
// (an operator's view of the held jobs), ScheduleStore and SchedulePruner (the ticks of
// periodic jobs), DeadLetterStore and StatsReader; an embedded backend also tells its
// host what it is (DirReporter, QueueKeeper, HealthReporter, RecoveryReporter), a
// store may say how much it holds (StoreReporter), and
// CapabilityReporter says which parts of the contract a backend lacks. Callers
// type-assert and fall back to the plain contract (the API refuses a unique job where
// there is none to fall to).
package backend

import (
	"context"
	"strings"
	"time"
)

// Backend is a queue system that wasmjobs consumes jobs from and publishes jobs to.
// Implementations are safe for concurrent use.
type Backend interface {
	// Declare idempotently creates the queue named by q.Name, with whatever delay, hold
	// and dead-letter infrastructure the backend needs. Declaring a queue again with the
	// same configuration changes nothing and keeps its messages.
	Declare(ctx context.Context, q QueueConfig) error

	// Publish puts env on env.Queue, after delay when delay > 0. Delays are rounded up
	// to the backend's granularity, never down. Publishing to a queue that was never
	// declared fails with an error that wraps ErrUnknownQueue and names the queue.
	// A backend that knows ids drops a repeat of an env.ID it still holds and reports
	// success (see the package comment).
	Publish(ctx context.Context, env Envelope, delay time.Duration) error

	// Defer holds env for delay, then releases it onto env.Queue. The caller raises
	// env.Priority so that it returns ahead of the backlog. A delay <= 0 releases it at
	// once. A repeat is dropped as by Publish. Delivery.Retry and Delivery.Defer, which
	// put back the job they settle, are never repeats.
	Defer(ctx context.Context, env Envelope, delay time.Duration) error

	// Consume starts a stream of deliveries from the declared queue q.Name, with at most
	// q.Prefetch of them unsettled at once. The stream ends when ctx is done, when it is
	// dropped, when the backend closes or when the connection is lost.
	Consume(ctx context.Context, q QueueConfig) (Stream, error)

	// Close ends every stream, releases what they hold back to their queues where the
	// backend is durable, and closes connections. Afterwards every operation fails with
	// ErrShutDown. Close is idempotent.
	Close(ctx context.Context) error
}

// Stream is one consumer of one queue.
type Stream interface {
	// Deliveries yields the deliveries in the order the backend hands them out. The
	// channel is closed when the stream ends; Err then says why.
	Deliveries() <-chan Delivery

	// Err reports why the stream ended: nil while it is open and after Drop,
	// ErrShutDown after the backend closed, the context's error when the context passed
	// to Consume was done, or a transport error.
	Err() error

	// Drop ends the stream. Every delivery it pulled but did not hand out, and every
	// delivery it handed out that is not settled yet, returns to the queue (marked
	// redelivered). Settling one of those afterwards fails with ErrStreamClosed.
	// Drop is idempotent. It returns once the stream has released what it held, or,
	// for a stream whose context already ended (as the worker's shutdown does it), once
	// the release is under way: a broker then requeues the deliveries when it
	// confirms the close or the connection ends. Either way nothing is lost.
	Drop()
}

// Delivery is one message handed to a consumer. It is settled exactly once, by one of
// Ack, Retry, Defer or DeadLetter; a second settle fails with ErrAlreadySettled and
// changes nothing.
type Delivery interface {
	// Envelope decodes the delivery. A delivery whose wire form cannot be decoded
	// returns an error wrapping ErrMalformed, together with whatever fields could be
	// read; it must still be settled, normally with DeadLetter.
	Envelope() (Envelope, error)

	// Ack acknowledges the delivery: the job is done and leaves the queue.
	Ack(ctx context.Context) error

	// Retry publishes next onto next.Queue after delay, then acknowledges this delivery.
	// If the publish fails the delivery stays unacknowledged and unsettled.
	Retry(ctx context.Context, next Envelope, delay time.Duration) error

	// Defer holds next for delay (see Backend.Defer), then acknowledges this delivery.
	// If the hold fails the delivery stays unacknowledged and unsettled.
	Defer(ctx context.Context, next Envelope, delay time.Duration) error

	// DeadLetter moves the delivery to its queue's dead letters with reason, then
	// acknowledges it. If the move fails the delivery stays unacknowledged and unsettled.
	DeadLetter(ctx context.Context, reason string) error
}

// LeasedDelivery is implemented by deliveries held under a lease that the backend
// renews while the job runs, and that can lapse (the PostgreSQL backend's, when its
// host cannot reach the database for most of the lease): Lost is closed once the
// delivery is no longer the consumer's, before another consumer can take its job, and
// its settle is then refused. The worker stops the job's handler when it closes,
// rather than let it run on beside the job's next delivery.
type LeasedDelivery interface {
	Delivery
	Lost() <-chan struct{}
}

// DeadLetter is a message that was dead-lettered, with why.
type DeadLetter struct {
	// Envelope is the message as it was when it was dead-lettered. For a message that
	// could not be decoded it holds what could be read, with the raw bytes as Payload.
	Envelope Envelope
	// Reason says why it was dead-lettered.
	Reason string
	// At is when it was dead-lettered.
	At time.Time
}

// DeadLetterStore is implemented by backends whose dead letters can be inspected and
// replayed. Both backends in this repository implement it.
type DeadLetterStore interface {
	// DeadLetters lists up to limit dead letters of the declared queue, oldest first.
	// limit <= 0 means all of them.
	DeadLetters(ctx context.Context, queue string, limit int) ([]DeadLetter, error)

	// ReplayDeadLetter moves the dead letter with the job id id back onto its queue,
	// as a fresh job: attempt 1, no reason, its defer count cleared. It fails with an error wrapping
	// ErrNotFound when no such dead letter exists.
	ReplayDeadLetter(ctx context.Context, queue, id string) error

	// PurgeDeadLetters deletes every dead letter of the queue and reports how many
	// there were.
	PurgeDeadLetters(ctx context.Context, queue string) (int, error)
}

// QueueStats counts a queue's messages by state, as far as the backend knows them; a
// count the backend cannot tell is -1.
type QueueStats struct {
	// Pending messages are ready to be delivered.
	Pending int `json:"pending"`
	// Unacked deliveries were taken by a consumer and are not settled yet.
	Unacked int `json:"unacked"`
	// Delayed messages wait for their delay; Deferred ones were deferred.
	Delayed  int `json:"delayed"`
	Deferred int `json:"deferred"`
	// Dead counts the dead letters.
	Dead int `json:"dead"`
	// KeyWaiting messages are ready but wait for their concurrency key
	// (QueueConfig.KeyConcurrency); they are not counted in Pending.
	KeyWaiting int `json:"key_waiting"`
	// Waiting jobs wait for other jobs to end (JobWaiting), counted on the queue they
	// will run on; they are in no other count.
	Waiting int `json:"waiting"`
}

// StatsReader is implemented by backends that can count a queue's messages.
type StatsReader interface {
	QueueStats(ctx context.Context, queue string) (QueueStats, error)
}

// Capabilities are the parts of the contract that a backend, or a configuration of one,
// may lack; a bit set means the backend has that part. The contract suite
// (backendtest) checks a part only on backends that declare it.
type Capabilities uint

const (
	// CapPriority: deliveries follow priority where the queue has levels, FIFO among
	// equals, so that a deferred job (raised to the top level by the worker) comes back
	// ahead of the backlog. Without it every queue is FIFO: priorities are ignored and a
	// deferred job waits its turn like a delayed one. RabbitMQ's quorum queues lack it.
	CapPriority Capabilities = 1 << iota
	// CapKeyConcurrency: a queue declared with QueueConfig.KeyConcurrency hands out at
	// most that many jobs of one key at once, in publish order, each holding its key
	// until it ends. Without it Declare and Consume refuse a KeyConcurrency, saying
	// why. RabbitMQ lacks it.
	CapKeyConcurrency
)

// AllCapabilities is every part of the contract.
const AllCapabilities = CapPriority | CapKeyConcurrency

// String names the capabilities set in c, joined by "+".
func (c Capabilities) String() string {
	var names []string
	if c&CapPriority != 0 {
		names = append(names, "priority")
	}
	if c&CapKeyConcurrency != 0 {
		names = append(names, "key-concurrency")
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, "+")
}

// CapabilityReporter is implemented by a backend that may lack parts of the contract:
// it reports the ones it has. A backend that does not implement it has them all.
type CapabilityReporter interface {
	Capabilities() Capabilities
}

// CapabilitiesOf returns what b declares through CapabilityReporter, or
// AllCapabilities when it does not implement it.
func CapabilitiesOf(b Backend) Capabilities {
	if r, ok := b.(CapabilityReporter); ok {
		return r.Capabilities()
	}
	return AllCapabilities
}
