package inspect

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
)

// QueueInfo describes a served queue in GET /v1/queues. A count of -1 is one the
// backend cannot tell (RabbitMQ does not count unacked, delayed or deferred messages).
// When reading the counts failed, they are absent (QueueStats is nil) and Error says
// why: "unknown" and "failed" are never the same value.
type QueueInfo struct {
	Name    string `json:"name"`
	Module  string `json:"module"`
	Running int    `json:"running"`
	*backend.QueueStats
	// Error is why the counts could not be read, empty when they were.
	Error string `json:"error,omitempty"`
}

// unknownStats are the counts of a backend that cannot count at all.
var unknownStats = backend.QueueStats{Pending: -1, Unacked: -1, Delayed: -1, Deferred: -1, Dead: -1, KeyWaiting: -1, Waiting: -1}

// Queues describes every served queue with its counts, as GET /v1/queues and the
// dashboard's overview show them. A count that fails is logged.
func (in *Inspector) Queues(ctx context.Context) []QueueInfo {
	run := map[string]int{}
	if in.cfg.Running != nil {
		run = in.cfg.Running()
	}
	out := []QueueInfo{}
	for _, m := range in.modules() {
		if !m.Serving() {
			continue
		}
		qi := QueueInfo{Name: m.Queue, Module: m.Name, Running: run[m.Queue], QueueStats: &backend.QueueStats{}}
		if in.stats == nil {
			*qi.QueueStats = unknownStats
		} else if st, err := in.stats.QueueStats(ctx, m.Queue); err != nil {
			in.log.Error("counting a queue's messages failed", "queue", m.Queue, "error", err)
			qi.QueueStats, qi.Error = nil, fmt.Sprintf("counting the messages of queue %s: %v", m.Queue, err)
		} else {
			*qi.QueueStats = st
		}
		out = append(out, qi)
	}
	return out
}

// Stats returns queue's counts, or an error wrapping ErrUnavailable where the backend
// cannot count.
func (in *Inspector) Stats(ctx context.Context, queue string) (backend.QueueStats, error) {
	if in.stats == nil {
		return backend.QueueStats{}, fmt.Errorf("counting the messages of queue %s: %w", queue, ErrUnavailable)
	}
	return in.stats.QueueStats(ctx, queue)
}

// DeadLetterInfo is a dead letter in GET /v1/dead-letters.
type DeadLetterInfo struct {
	ID            string            `json:"id"`
	Queue         string            `json:"queue"`
	Reason        string            `json:"reason"`
	At            time.Time         `json:"at"`
	Attempt       int               `json:"attempt"`
	Headers       map[string]string `json:"headers,omitempty"`
	Payload       string            `json:"payload"`
	PayloadBase64 string            `json:"payload_base64"`
}

// DeadLetterInfos describes a queue's dead letters as the API shows them.
func DeadLetterInfos(queue string, dead []backend.DeadLetter) []DeadLetterInfo {
	out := make([]DeadLetterInfo, 0, len(dead))
	for _, d := range dead {
		out = append(out, DeadLetterInfo{ID: d.Envelope.ID, Queue: queue, Reason: d.Reason, At: d.At, Attempt: d.Envelope.Attempt,
			Headers: d.Envelope.Headers, Payload: strings.ToValidUTF8(string(d.Envelope.Payload), "\uFFFD"),
			PayloadBase64: base64.StdEncoding.EncodeToString(d.Envelope.Payload)})
	}
	return out
}

// errNoDeadLetters is the answer of a backend without a dead-letter store.
var errNoDeadLetters = errorf(ErrUnavailable, "this backend cannot list dead letters")

// DeadLetters lists up to limit of queue's dead letters (all of them for 0), served
// or not, as the API shows them (DeadLetterInfos).
func (in *Inspector) DeadLetters(ctx context.Context, queue string, limit int) ([]DeadLetterInfo, error) {
	dead, err := in.DeadLetterList(ctx, queue, limit)
	if err != nil {
		return nil, err
	}
	return DeadLetterInfos(queue, dead), nil
}

// DeadLetterList lists up to limit of queue's dead letters (all of them for 0), served
// or not: a queue no module serves any more may still hold some. An error wraps
// ErrUnavailable where the backend keeps no dead letters it can list.
func (in *Inspector) DeadLetterList(ctx context.Context, queue string, limit int) ([]backend.DeadLetter, error) {
	if in.dead == nil {
		return nil, errNoDeadLetters
	}
	return in.dead.DeadLetters(ctx, queue, limit)
}

// ReplayDeadLetter puts dead letter id back in its queue as a fresh job, and returns
// the queue: the one given, which must be served, or, when queue is empty, the first
// of the served queues that holds it. The host's memory knows the job again (attempt
// 1, pending) from before the replay, since it may run at once. It fails with
// ErrDraining while the host takes no new jobs, and with an error wrapping
// backend.ErrNotFound when no queue holds the dead letter.
func (in *Inspector) ReplayDeadLetter(ctx context.Context, id, queue string) (string, error) {
	if err := in.Refusal(); err != nil {
		return "", err
	}
	if in.dead == nil {
		return "", errNoDeadLetters
	}
	queues := []string{}
	if queue != "" {
		if _, err := in.Served(queue); err != nil {
			return "", err
		}
		queues = append(queues, queue)
	} else {
		queues = append(queues, in.ServedQueues()...)
	}
	for _, q := range queues {
		err := in.replay(ctx, id, q)
		if err == nil {
			return q, nil
		}
		if !errors.Is(err, backend.ErrNotFound) {
			return "", err
		}
	}
	return "", errorf(backend.ErrNotFound, "no dead letter %q in queues %s", id, joinComma(queues))
}

// replay puts dead letter id of queue q back, known to the host's memory from before
// the replay (it may run at once), and forgotten again if the replay failed.
func (in *Inspector) replay(ctx context.Context, id, q string) error {
	before, known := in.mem.get(id)
	in.mem.Enqueued(backend.Envelope{ID: id, Queue: q, Attempt: 1}, false)
	err := in.dead.ReplayDeadLetter(in.replayContext(ctx), q, id)
	switch {
	case err != nil && known: // a failed action changes nothing: the job is still dead
		in.mem.restore(id, before.rec)
	case err != nil:
		in.mem.Forget(id)
	}
	return err
}

// ReplayAll replays every dead letter of the served queue, each with the bookkeeping of
// ReplayDeadLetter, and returns how many it replayed; one that went meanwhile is
// skipped.
func (in *Inspector) ReplayAll(ctx context.Context, queue string) (int, error) {
	if err := in.Refusal(); err != nil {
		return 0, err
	}
	if _, err := in.Served(queue); err != nil {
		return 0, err
	}
	dead, err := in.DeadLetters(ctx, queue, 0)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, d := range dead {
		if err := in.replay(ctx, d.ID, queue); err == nil {
			n++
		} else if !errors.Is(err, backend.ErrNotFound) {
			return n, fmt.Errorf("replayed %d of %d, then: %w", n, len(dead), err)
		}
	}
	return n, nil
}

// PurgeDeadLetters drops every dead letter of the served queue and returns how many.
func (in *Inspector) PurgeDeadLetters(ctx context.Context, queue string) (int, error) {
	if _, err := in.Served(queue); err != nil {
		return 0, err
	}
	if in.dead == nil {
		return 0, errNoDeadLetters
	}
	return in.dead.PurgeDeadLetters(ctx, queue)
}
