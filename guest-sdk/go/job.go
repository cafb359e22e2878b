package wasmjobs

import (
	"fmt"
	"time"
)

// Payload returns the job's payload.
func (j *Job) Payload() []byte {
	if !j.read {
		j.payload = make([]byte, payloadLen())
		if len(j.payload) > 0 {
			n := payloadRead(&j.payload[0], int32(len(j.payload)))
			j.payload = j.payload[:n]
		}
		j.read = true
	}
	return j.payload
}

// Text returns the job's payload as a string.
func (j *Job) Text() string { return string(j.Payload()) }

// ID returns the job's id.
func (j *Job) ID() string { return meta(metaJobID) }

// Queue returns the job's queue.
func (j *Job) Queue() string { return meta(metaQueue) }

// Module returns the name of the module running the job.
func (j *Job) Module() string { return meta(metaModuleName) }

// Version returns the version (sha256) of the module running the job.
func (j *Job) Version() string { return meta(metaModuleVersion) }

// TraceID returns the trace id of the host's span the job runs in, as 32 lowercase hex
// digits, for a handler's own telemetry or logs to join the host's trace; "" when the
// host traces nothing.
func (j *Job) TraceID() string { return meta(metaTraceID) }

// SpanID returns the span id of the host's span the job runs in, as 16 lowercase hex
// digits: the parent of any span the handler reports; "" when the host traces nothing.
func (j *Job) SpanID() string { return meta(metaSpanID) }

// Attempt returns the 1-based number of this execution of the job.
func (j *Job) Attempt() int { return int(attempt()) }

// MaxAttempts returns how many executions the job may have.
func (j *Job) MaxAttempts() int { return int(maxAttempts()) }

// Header returns the job's header key and whether it is set. Keys are exact bytes.
func (j *Job) Header(key string) (string, bool) {
	buf := make([]byte, 256)
	for {
		n := headerRead(ptr(key), int32(len(key)), bufPtr(buf), int32(len(buf)))
		if n < 0 {
			return "", false
		}
		if int(n) <= len(buf) {
			return string(buf[:n]), true
		}
		buf = make([]byte, n)
	}
}

// Level is a log level.
type Level int32

// The log levels.
const (
	Debug Level = 0
	Info  Level = 1
	Warn  Level = 2
	Error Level = 3
)

// Log writes msg to the job's log at level.
func (j *Job) Log(level Level, msg string) { logMsg(int32(level), ptr(msg), int32(len(msg))) }

// Debugf, Infof, Warnf and Errorf log a formatted message.
func (j *Job) Debugf(format string, args ...any) { j.Log(Debug, fmt.Sprintf(format, args...)) }

// Infof logs a formatted message at info level.
func (j *Job) Infof(format string, args ...any) { j.Log(Info, fmt.Sprintf(format, args...)) }

// Warnf logs a formatted message at warn level.
func (j *Job) Warnf(format string, args ...any) { j.Log(Warn, fmt.Sprintf(format, args...)) }

// Errorf logs a formatted message at error level.
func (j *Job) Errorf(format string, args ...any) { j.Log(Error, fmt.Sprintf(format, args...)) }

// Write appends p to the job's output; it fails with ErrLimitExceeded, writing nothing,
// when that would pass the module's output limit. Job is an io.Writer.
func (j *Job) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if s := outputWrite(&p[0], int32(len(p))); s < 0 {
		return 0, statusError(s)
	}
	return len(p), nil
}

// Enqueue stages a child job on queue, published after delay if this job succeeds.
func (j *Job) Enqueue(queue string, payload []byte, delay time.Duration) error {
	return statusError(enqueue(ptr(queue), int32(len(queue)), bufPtr(payload), int32(len(payload)), delay.Milliseconds()))
}

// EnqueueAwaited stages a child job on queue, as Job.Enqueue does, that the job's
// WaitForChildren waits for; if the job acknowledges instead, the child is published as
// Enqueue's are. A module that calls it loads only on a host whose backend keeps
// waiting jobs.
//
// EnqueueAwaited, Round and Children are functions, not methods of Job, so that a
// module that never waits imports none of fan-in's functions even when reflection
// keeps every method of Job (text/template does), and loads on every backend.
func EnqueueAwaited(queue string, payload []byte, delay time.Duration) error {
	return statusError(enqueueAwaited(ptr(queue), int32(len(queue)), bufPtr(payload), int32(len(payload)), delay.Milliseconds()))
}

// Round returns 0 on a first run of the job, n on the run after its n-th wait.
func Round() int { return int(round()) }

// Child is how one child that the job's last wait awaited ended.
type Child struct {
	// ID and Queue name the child job.
	ID, Queue string
	// State is "succeeded", "dead", "cancelled", or "unfinished" when the wait timed
	// out before the child ended.
	State string
	// Reason is why it did not succeed; empty when it did.
	Reason string
	// Output is its last run's output, up to 16 KiB; Truncated says it was cut.
	Output    []byte
	Truncated bool
}

// Children returns how each child the job's last wait awaited ended, in the order they
// were staged: none on a first run.
func Children() []Child {
	n := int(childrenLen())
	if n <= 0 {
		return nil
	}
	out := make([]Child, n)
	for i := range out {
		c := &out[i]
		c.ID = string(childField(i, childID))
		c.Queue = string(childField(i, childQueue))
		c.State = string(childField(i, childState))
		c.Reason = string(childField(i, childReason))
		c.Output = childField(i, childOutput)
		t := childField(i, childTruncated)
		c.Truncated = len(t) == 1 && t[0] == 1
	}
	return out
}

// childField reads a field of child_read whole.
func childField(i int, field int32) []byte {
	buf := make([]byte, 64)
	for {
		n := childRead(int32(i), field, bufPtr(buf), int32(len(buf)))
		if n < 0 {
			return nil
		}
		if int(n) <= len(buf) {
			return buf[:n]
		}
		buf = make([]byte, n)
	}
}

func meta(key int32) string {
	buf := make([]byte, 64)
	for {
		n := metaRead(key, bufPtr(buf), int32(len(buf)))
		if n < 0 {
			return ""
		}
		if int(n) <= len(buf) {
			return string(buf[:n])
		}
		buf = make([]byte, n)
	}
}

func setReason(s string) { setReasonRaw(ptr(s), int32(len(s))) }
