package worker

import (
	"context"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// EventKind names a moment in a job's life.
type EventKind int

// The events a worker reports.
const (
	// EventStarted: the worker took the job from its delivery: its handler is about to
	// run or, for a message that could not be decoded, it is about to be dead-lettered.
	EventStarted EventKind = iota
	// EventSettled: the job was settled; Event.Settle says how.
	EventSettled
	// EventSettleFailed: settling failed; the delivery stays unacknowledged and the
	// backend delivers the job again. Event.Err says why.
	EventSettleFailed
	// EventAbandoned: the drain timeout ran out while the job ran; it was left
	// unacknowledged for the backend to deliver again.
	EventAbandoned
)

var eventNames = [...]string{"started", "settled", "settle_failed", "abandoned"}

// String returns the event's name.
func (k EventKind) String() string {
	if k >= 0 && int(k) < len(eventNames) {
		return eventNames[k]
	}
	return "event?"
}

// Event reports a moment in a job's life to an Observer.
type Event struct {
	Kind EventKind
	// Job is the job; for a message that could not be decoded, what could be read.
	Job *Job
	// Result is the handler's result (EventSettled, EventSettleFailed, EventAbandoned).
	// It is the zero Result for a message that could not be decoded.
	Result Result
	// Settle, Reason and Delay say how the job was or was to be settled (Ack, Retry,
	// Defer, DeadLetter, Cancelled or Wait, never Failed: a failed attempt is settled as a
	// retry or a dead letter), the reason recorded and the delay before it runs again.
	Settle Outcome
	Reason string
	Delay  time.Duration
	// Duration is how long the handler ran.
	Duration time.Duration
	// Err is the settle's error, for EventSettleFailed.
	Err error
}

// Observer receives a worker's events. Observe is called from the goroutine that runs
// the job, synchronously: it must be quick and must not block.
//
// Every delivery the worker takes, decodable or not, reports EventStarted first and
// then exactly one of EventSettled, EventSettleFailed or EventAbandoned, in that order
// and from the same goroutine, so an observer may count what is in flight.
type Observer interface {
	Observe(Event)
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(Event)

// Observe calls f(e).
func (f ObserverFunc) Observe(e Event) { f(e) }

// Observers fans events out to several observers, in order.
func Observers(obs ...Observer) Observer {
	return ObserverFunc(func(e Event) {
		for _, o := range obs {
			o.Observe(e)
		}
	})
}

// LogObserver logs a line per settled, failed-to-settle or abandoned job on log, with
// the job id, queue, handler (logged as module), version, attempt, outcome, settle and
// duration. Settled acks are logged at debug level, other settles at info, failures to
// settle at error.
func LogObserver(log *slog.Logger) Observer {
	return ObserverFunc(func(e Event) {
		if e.Kind == EventStarted {
			return
		}
		level := slog.LevelInfo
		switch {
		case e.Kind == EventSettleFailed:
			level = slog.LevelError
		case e.Kind == EventSettled && e.Settle == Ack:
			level = slog.LevelDebug
		}
		// The job's span context, so that a log handler that joins logs to traces
		// (trace_id, span_id) finds it.
		ctx := context.Background()
		if sc := e.Job.SpanContext(); sc.IsValid() { // no context made with tracing off
			ctx = trace.ContextWithSpanContext(ctx, sc)
		}
		if !log.Enabled(ctx, level) {
			return
		}
		attrs := []slog.Attr{
			slog.String("job", e.Job.Envelope.ID),
			slog.String("queue", e.Job.Envelope.Queue),
			slog.String("module", e.Result.Handler), // a handler's name: the module under the Wasm host
			slog.String("version", e.Result.Version),
			slog.Int("attempt", e.Job.Attempt),
			slog.String("outcome", e.Result.Outcome.String()),
			slog.String("settle", e.Settle.String()),
			slog.Duration("duration", e.Duration),
		}
		if e.Reason != "" {
			attrs = append(attrs, slog.String("reason", e.Reason))
		}
		if e.Delay > 0 {
			attrs = append(attrs, slog.Duration("delay", e.Delay))
		}
		if e.Err != nil {
			attrs = append(attrs, slog.String("error", e.Err.Error()))
		}
		log.LogAttrs(ctx, level, "job "+e.Kind.String(), attrs...)
	})
}
