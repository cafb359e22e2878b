// Package jobspec checks a job before it is enqueued. It is the one validation that
// every way in shares (the HTTP API and the CLI's direct path, `enqueue --backend`), so
// that no way in can put a job where the worker does not expect one: a reserved
// header, a priority in the lane kept for deferred jobs, a payload its module refuses.
package jobspec

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/wasmjobs/wasmjobs/abi"
	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/worker"
)

// Limits of a job.
const (
	// PriorityLevels is how many priorities a job may ask for: 0 to PriorityLevels-1.
	// The level above them is the worker's, for deferred jobs coming back.
	PriorityLevels = worker.DefaultPriorityLevels
	// ReservedHeaderPrefix begins the headers the worker keeps for itself (such as
	// worker.PriorityHeader); a job cannot set them.
	ReservedHeaderPrefix = "wasmjobs-"
	// DefaultMaxPayload is the payload limit of a module whose manifest sets none.
	DefaultMaxPayload = abi.DefaultMaxPayload
	// MaxUniqueKey bounds a unique key, in bytes.
	MaxUniqueKey = 512
	// MaxUniqueFor bounds how long a unique key is held after its job finished.
	MaxUniqueFor = 366 * 24 * time.Hour
	// MaxKey bounds a concurrency key, in bytes: every waiting job of a keyed queue
	// holds its key in memory.
	MaxKey = 512
)

// Sentinel errors of Validate, for callers that answer by kind (the API's 400 and 413).
var (
	// ErrInvalid is wrapped by every error of a job that cannot be enqueued as given.
	ErrInvalid = errors.New("invalid job")
	// ErrTooLarge is wrapped by the error of a payload over its limit.
	ErrTooLarge = errors.New("payload too large")
)

// Spec is a job as a client asks for it.
type Spec struct {
	Queue   string
	Payload []byte
	Headers map[string]string
	// Delay is how long the job waits before it runs; zero runs it at once.
	Delay time.Duration
	// Priority is 0 to PriorityLevels-1, higher first.
	Priority int
	// MaxAttempts is how many executions are allowed; zero means the queue's.
	MaxAttempts int
	// UniqueKey, when set, makes the job unique in its queue: while a job of the same
	// key and queue waits, runs or retries, or finished less than UniqueFor ago, the
	// enqueue is a duplicate and queues nothing (backend.UniquePublisher).
	UniqueKey string
	// UniqueFor is how long the key stays held after the job finished (acknowledged
	// or dead-lettered); zero frees it when the job finishes.
	UniqueFor time.Duration
	// Key is the job's concurrency key (backend.Envelope.Key): on a queue whose
	// module sets key_concurrency N, at most N jobs of one key run at once, in the
	// order they were enqueued. Unlike UniqueKey it never drops a job.
	Key string
}

// specError is an error of Validate: its message names the field and the problem; it
// unwraps to its kind.
type specError struct {
	kind error
	msg  string
}

func (e *specError) Error() string { return e.msg }
func (e *specError) Unwrap() error { return e.kind }

func invalid(format string, args ...any) error {
	return &specError{ErrInvalid, fmt.Sprintf(format, args...)}
}

// Validate reports the first problem of s, or nil. maxPayload is the payload limit of
// the module serving s.Queue; <= 0 means DefaultMaxPayload. Every error wraps
// ErrInvalid; one about the payload's size wraps ErrTooLarge too.
func Validate(s Spec, maxPayload int) error {
	if s.Queue == "" {
		return invalid("queue is required")
	}
	if err := backend.ValidateQueueName(s.Queue); err != nil {
		return invalid("%v", err)
	}
	if maxPayload <= 0 {
		maxPayload = DefaultMaxPayload
	}
	if len(s.Payload) > maxPayload {
		return &specError{errors.Join(ErrInvalid, ErrTooLarge),
			fmt.Sprintf("payload of %d bytes passes queue %s's limit of %d bytes", len(s.Payload), s.Queue, maxPayload)}
	}
	for k := range s.Headers {
		if k == "" {
			return invalid("headers: empty key")
		}
		if strings.HasPrefix(k, ReservedHeaderPrefix) {
			return invalid("headers: %q: the prefix %s is reserved", k, ReservedHeaderPrefix)
		}
	}
	if s.Delay < 0 {
		return invalid("delay %v is negative", s.Delay)
	}
	if s.Delay > backend.MaxDelay {
		return invalid("delay %v passes the longest delay accepted, %v", s.Delay, backend.MaxDelay)
	}
	if s.Priority < 0 || s.Priority >= PriorityLevels {
		return invalid("priority %d: want 0 to %d", s.Priority, PriorityLevels-1)
	}
	if s.MaxAttempts < 0 {
		return invalid("max_attempts %d: want 0 (the queue's) or more", s.MaxAttempts)
	}
	if err := validateUnique(s); err != nil {
		return err
	}
	return validateKey(s.Key)
}

// validateKey checks a concurrency key.
func validateKey(key string) error {
	switch {
	case len(key) > MaxKey:
		return invalid("key of %d bytes passes the limit of %d bytes", len(key), MaxKey)
	case !utf8.ValidString(key):
		return invalid("key %q is not valid UTF-8", key)
	}
	return nil
}

// validateUnique checks the unique key and its hold.
func validateUnique(s Spec) error {
	switch {
	case s.UniqueFor != 0 && s.UniqueKey == "":
		return invalid("unique_for %v without unique_key: give the key the hold is for", s.UniqueFor)
	case s.UniqueFor < 0:
		return invalid("unique_for %v is negative", s.UniqueFor)
	case s.UniqueFor > MaxUniqueFor:
		return invalid("unique_for %v passes the longest hold accepted, %v", s.UniqueFor, MaxUniqueFor)
	case len(s.UniqueKey) > MaxUniqueKey:
		return invalid("unique_key of %d bytes passes the limit of %d bytes", len(s.UniqueKey), MaxUniqueKey)
	case !utf8.ValidString(s.UniqueKey):
		return invalid("unique_key %q is not valid UTF-8", s.UniqueKey)
	}
	return nil
}

// Envelope returns the fresh job of a valid s: a new id, attempt 1.
func (s Spec) Envelope() backend.Envelope {
	env := backend.NewEnvelope(s.Queue, s.Payload)
	env.Headers, env.Priority, env.MaxAttempts, env.Key = s.Headers, uint8(s.Priority), s.MaxAttempts, s.Key
	return env
}

// Publication returns the publication of a valid s: its fresh job, delay, and unique
// key with its hold (none when UniqueKey is empty).
func (s Spec) Publication() backend.UniquePublication {
	return backend.UniquePublication{Publication: backend.Publication{Envelope: s.Envelope(), Delay: s.Delay}, Key: s.UniqueKey, For: s.UniqueFor}
}
