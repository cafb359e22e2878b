package rabbitmq

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/wasmjobs/wasmjobs/backend"
)

// Header names of the wire format.
const (
	// hJob holds the job's numbers in one string, "v1 ATTEMPT MAX_ATTEMPTS DEFERS
	// ENQUEUED_AT_UNIX_NS": a table of integer headers costs the broker about a third
	// of its throughput (RATIONALE.md).
	hJob     = "x-wasmjobs"
	hReason  = "x-wasmjobs-reason"
	hHeaders = "x-wasmjobs-headers"
	// hKey is the job's concurrency key, absent for none: carried, never enforced
	// (no queue of this backend takes a key concurrency).
	hKey        = "x-wasmjobs-key"
	hDeadReason = "x-wasmjobs-dead-reason"
	hDeadAt     = "x-wasmjobs-dead-at"
)

// jobHeader formats the job's numbers.
func jobHeader(attempt, maxAttempts, defers int, enqueuedAt int64) string {
	return "v1 " + strconv.Itoa(attempt) + " " + strconv.Itoa(maxAttempts) + " " + strconv.Itoa(defers) + " " + strconv.FormatInt(enqueuedAt, 10)
}

// encode turns an envelope into a persistent message.
func encode(env backend.Envelope) amqp.Publishing {
	h := amqp.Table{hJob: jobHeader(max(env.Attempt, 1), env.MaxAttempts, env.Defers, env.EnqueuedAt.UnixNano())}
	if env.Reason != "" {
		h[hReason] = env.Reason
	}
	if env.Key != "" {
		h[hKey] = env.Key
	}
	if len(env.Headers) > 0 {
		t := make(amqp.Table, len(env.Headers))
		for k, v := range env.Headers {
			t[k] = v
		}
		h[hHeaders] = t
	}
	return amqp.Publishing{
		MessageId:    env.ID,
		Headers:      h,
		Body:         env.Payload,
		Priority:     env.Priority,
		DeliveryMode: amqp.Persistent,
		Timestamp:    env.EnqueuedAt,
	}
}

// parseJobHeader reads the job's numbers.
func parseJobHeader(v any) (attempt, maxAttempts, defers int, enqueuedAt int64, err error) {
	s, ok := v.(string)
	f := strings.Fields(s)
	// Built only when the header is bad: every delivery comes through here, and a
	// formatted error per message was a measurable part of the consumer's CPU.
	bad := func() error {
		return fmt.Errorf("%w: header %s is %q, want \"v1 ATTEMPT MAX_ATTEMPTS DEFERS ENQUEUED_AT_NS\"", backend.ErrMalformed, hJob, fmt.Sprint(v))
	}
	if !ok || len(f) != 5 || f[0] != "v1" {
		return 0, 0, 0, 0, bad()
	}
	var n [3]int
	for i := range n {
		if n[i], err = strconv.Atoi(f[i+1]); err != nil || n[i] < 0 {
			return 0, 0, 0, 0, bad()
		}
	}
	if enqueuedAt, err = strconv.ParseInt(f[4], 10, 64); err != nil {
		return 0, 0, 0, 0, bad()
	}
	if n[0] < 1 {
		return 0, 0, 0, 0, fmt.Errorf("%w: attempt %d in header %s, want 1 or more", backend.ErrMalformed, n[0], hJob)
	}
	return n[0], n[1], n[2], enqueuedAt, nil
}

// decode turns a delivery into an envelope for queue; on error the envelope holds what
// could be read, the body as payload.
func decode(queue string, d *amqp.Delivery) (backend.Envelope, error) {
	env := backend.Envelope{ID: d.MessageId, Queue: queue, Payload: d.Body, Priority: d.Priority, Redelivered: d.Redelivered}
	if env.ID == "" {
		return env, fmt.Errorf("%w: no message id", backend.ErrMalformed)
	}
	raw, ok := d.Headers[hJob]
	if !ok {
		return env, fmt.Errorf("%w: no %s header", backend.ErrMalformed, hJob)
	}
	attempt, maxAttempts, defers, enqueued, err := parseJobHeader(raw)
	if err != nil {
		return env, err
	}
	env.Attempt, env.MaxAttempts, env.Defers, env.EnqueuedAt = attempt, maxAttempts, defers, time.Unix(0, enqueued)
	if r, ok := d.Headers[hReason]; ok {
		s, isString := r.(string)
		if !isString {
			return env, fmt.Errorf("%w: header %s is a %T, want a string", backend.ErrMalformed, hReason, r)
		}
		env.Reason = s
	}
	if k, ok := d.Headers[hKey]; ok {
		s, isString := k.(string)
		if !isString {
			return env, fmt.Errorf("%w: header %s is a %T, want a string", backend.ErrMalformed, hKey, k)
		}
		env.Key = s
	}
	if raw, ok := d.Headers[hHeaders]; ok {
		t, isTable := raw.(amqp.Table)
		if !isTable {
			return env, fmt.Errorf("%w: header %s is a %T, want a table", backend.ErrMalformed, hHeaders, raw)
		}
		env.Headers = make(map[string]string, len(t))
		for k, v := range t {
			s, isString := v.(string)
			if !isString {
				return env, fmt.Errorf("%w: job header %q is a %T, want a string", backend.ErrMalformed, k, v)
			}
			env.Headers[k] = s
		}
	}
	return env, nil
}

// intHeader reads an integer header of any AMQP integer type.
func intHeader(h amqp.Table, name string) (int64, bool, error) {
	v, ok := h[name]
	if !ok {
		return 0, false, nil
	}
	switch n := v.(type) {
	case int64:
		return n, true, nil
	case int32:
		return int64(n), true, nil
	}
	return 0, false, fmt.Errorf("%w: header %s is %v (a %T), want an integer", backend.ErrMalformed, name, v, v)
}
