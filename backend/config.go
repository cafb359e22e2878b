package backend

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"regexp"
	"time"
)

// Defaults and bounds of QueueConfig.
const (
	// DefaultPrefetch is the prefetch of a QueueConfig whose Prefetch is zero.
	DefaultPrefetch = 16
	// MaxPrefetch is the largest prefetch (AMQP's prefetch count is 16 bits).
	MaxPrefetch = 65535
	// MaxPriorityLevels is the most priority levels a queue may have. RabbitMQ advises
	// no more than a handful: each level costs memory and throughput.
	MaxPriorityLevels = 10
	// MinGranularity is the finest delay granularity a backend accepts.
	MinGranularity = time.Millisecond
)

// QueueConfig describes a queue. The zero value of every field but Name is usable.
type QueueConfig struct {
	// Name is the queue's name: 1 to 200 characters of letters, digits, '-', '_' and
	// '.', not ending in ".dead" (reserved for dead letters).
	Name string
	// Prefetch bounds the unsettled deliveries of one stream. Zero means
	// DefaultPrefetch; a negative value is clamped to 1, a value above MaxPrefetch to
	// MaxPrefetch.
	Prefetch int
	// PriorityLevels is the highest priority the queue orders by: priorities
	// 0..PriorityLevels are honoured, higher ones count as PriorityLevels. Zero makes a
	// plain FIFO queue. Values outside 0..MaxPriorityLevels are clamped.
	PriorityLevels int
	// KeyConcurrency, when positive, bounds the jobs of one concurrency key
	// (Envelope.Key) handed out at once: the others wait, holding no prefetch slot
	// and no claim, in the order they were published. A job holds its key from its
	// publish until it ends (acknowledged, dead-lettered, cancelled, deleted): one
	// retrying, deferred or delayed keeps it, so the key's next job does not overtake
	// it (a retry republished under another id or to another queue is a job of its
	// own, with a new place at the back). Zero is no bound; a negative value counts as zero. Unlike the priority
	// levels it may change: each Declare sets it (Consume ignores it), for the jobs
	// already queued too. A backend that cannot keep it exactly (RabbitMQ) refuses it
	// in Declare and Consume (CapKeyConcurrency).
	KeyConcurrency int
}

var queueNamePattern = regexp.MustCompile(`^[A-Za-z0-9_.\-]{1,200}$`)

// ValidateQueueName reports whether name can name a queue, and if not, why.
func ValidateQueueName(name string) error {
	if !queueNamePattern.MatchString(name) {
		return fmt.Errorf("invalid queue name %q: want 1 to 200 letters, digits, '-', '_' or '.'", name)
	}
	if len(name) >= len(".dead") && name[len(name)-len(".dead"):] == ".dead" {
		return fmt.Errorf("invalid queue name %q: the suffix .dead is reserved for dead letters", name)
	}
	return nil
}

// Normalize returns q with its values defaulted and clamped into range, logging every
// implausible value it changed on log (which may be nil). It never fails: a name is
// checked by ValidateQueueName, which Declare calls.
func (q QueueConfig) Normalize(log *slog.Logger) QueueConfig {
	// clamp moves *v into [lo, hi], logging the change.
	clamp := func(field string, v *int, lo, hi int) {
		to := max(lo, min(*v, hi))
		if to != *v && log != nil {
			log.LogAttrs(context.Background(), slog.LevelWarn, "queue config value clamped",
				slog.String("queue", q.Name), slog.String("field", field),
				slog.Int("from", *v), slog.Int("to", to))
		}
		*v = to
	}
	if q.Prefetch == 0 {
		q.Prefetch = DefaultPrefetch
	}
	clamp("Prefetch", &q.Prefetch, 1, MaxPrefetch)
	clamp("PriorityLevels", &q.PriorityLevels, 0, MaxPriorityLevels)
	q.KeyConcurrency = max(q.KeyConcurrency, 0)
	return q
}

// ClampGranularity returns g raised to MinGranularity when it is finer, logging the
// change on log (which may be nil).
func ClampGranularity(g time.Duration, log *slog.Logger) time.Duration {
	if g >= MinGranularity {
		return g
	}
	if log != nil && g != 0 {
		log.Warn("delay granularity clamped", slog.Duration("from", g), slog.Duration("to", MinGranularity))
	}
	return MinGranularity
}

// MaxDelay is the longest delay (of a publish, a retry, a defer) that any backend
// accepts: ten years. A longer one fails with ErrDelayTooLong, so that a due time never
// passes what time.Time's UnixNano can hold (the year 2262), even after a restart. A
// backend may hold less (RabbitMQ's delay chain: its own MaxDelay method) and then
// fails with ErrDelayTooLong as well.
const MaxDelay = 10 * 365 * 24 * time.Hour

// CheckDelay returns an error wrapping ErrDelayTooLong when d passes max.
func CheckDelay(d, max time.Duration) error {
	if d > max {
		return fmt.Errorf("%w: delay %v passes the longest delay accepted, %v", ErrDelayTooLong, d, max)
	}
	return nil
}

// RoundUp rounds d up to a whole multiple of unit (which must be positive): a delay is
// never shortened. A negative d counts as zero; a d whose rounding would overflow
// saturates at the largest Duration.
func RoundUp(d, unit time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	if r := d % unit; r != 0 {
		if d > math.MaxInt64-(unit-r) {
			return math.MaxInt64
		}
		d += unit - r
	}
	return d
}
