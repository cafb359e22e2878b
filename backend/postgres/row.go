package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
)

// jobRow is a job as the columns of its row hold it: what an insert writes.
type jobRow struct {
	queue, id     string
	priority      int16 // capped at the queue's levels
	delay         int64 // microseconds, rounded up to the granularity
	deferred      bool
	payload       []byte            // never nil: the column is NOT NULL
	headers       map[string]string // nil for none (NULL)
	attempt, max  int
	defers, round int
	enqueuedAt    int64 // Unix nanoseconds, 0 for none
	reason, key   string
}

// newJobRow is env's row on a queue of levels priority levels, due after delay. Text
// goes through pgText; an empty id gets a new one (a job of its own, as on the other
// backends, not a repeat of "").
func newJobRow(env backend.Envelope, levels int, delay time.Duration, deferred bool) jobRow {
	r := jobRow{
		queue: env.Queue, id: pgText(env.ID), priority: int16(min(int(env.Priority), levels)),
		delay: backend.RoundUp(delay, granularity).Microseconds(), deferred: deferred,
		payload: env.Payload, attempt: env.Attempt, max: env.MaxAttempts, defers: env.Defers,
		round: env.Round, reason: pgText(env.Reason), key: pgText(env.Key),
	}
	if r.payload == nil {
		r.payload = []byte{}
	}
	if len(env.Headers) > 0 {
		r.headers = make(map[string]string, len(env.Headers))
		for k, v := range env.Headers {
			r.headers[pgText(k)] = pgText(v)
		}
	}
	if r.id == "" {
		r.id = backend.NewID()
	}
	if !env.EnqueuedAt.IsZero() {
		r.enqueuedAt = env.EnqueuedAt.UnixNano()
	}
	return r
}

// jobRows checks pubs' delays and queues and returns their rows, without repeats
// (distinct), and the set of their queues.
func (b *Backend) jobRows(ctx context.Context, pubs []backend.Publication, deferred bool) ([]jobRow, map[string]bool, error) {
	queues := make(map[string]bool)
	rows := make([]jobRow, 0, len(pubs))
	for _, p := range pubs {
		r, err := b.jobRow(ctx, p, deferred)
		if err != nil {
			return nil, nil, err
		}
		rows = append(rows, r)
		queues[p.Envelope.Queue] = true
	}
	return distinct(rows), queues, nil
}

// jobRow checks p's delay and queue and returns its row.
func (b *Backend) jobRow(ctx context.Context, p backend.Publication, deferred bool) (jobRow, error) {
	if err := backend.CheckDelay(p.Delay, backend.MaxDelay); err != nil {
		return jobRow{}, err
	}
	levels, err := b.queueLevels(ctx, p.Envelope.Queue)
	if err != nil {
		return jobRow{}, err
	}
	return newJobRow(p.Envelope, levels, p.Delay, deferred), nil
}

// distinct returns rows without the repeats of an earlier row's queue and id, which
// one statement's upsert could not take (nor would keep: a repeat is dropped).
func distinct(rows []jobRow) []jobRow {
	seen := make(map[qid]bool, len(rows))
	out := rows[:0:0]
	for _, r := range rows {
		if k := (qid{r.queue, r.id}); !seen[k] {
			seen[k] = true
			out = append(out, r)
		}
	}
	return out
}

// args are insertJob's arguments ($1-$14), which replace's statements share.
func (r jobRow) args() []any {
	var headers any
	if r.headers != nil {
		headers = r.headers
	}
	return []any{r.queue, r.id, r.priority, r.delay, r.deferred, r.payload, headers,
		r.attempt, r.max, r.defers, r.enqueuedAt, r.reason, r.key, r.round}
}

// columns are insertJobs' arguments for rows: one array a column, the headers as JSON
// text (NULL for none).
func columns(rows []jobRow) ([]any, error) {
	n := len(rows)
	var (
		queues, ids, reasons, keys = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		prios                      = make([]int16, n)
		delays, enqs               = make([]int64, n), make([]int64, n)
		deferreds                  = make([]bool, n)
		payloads                   = make([][]byte, n)
		headers                    = make([]*string, n)
		attempts, maxes, defers    = make([]int32, n), make([]int32, n), make([]int32, n)
		rounds                     = make([]int32, n)
	)
	for i, r := range rows {
		queues[i], ids[i], prios[i], delays[i], deferreds[i], payloads[i] = r.queue, r.id, r.priority, r.delay, r.deferred, r.payload
		if r.headers != nil {
			j, err := json.Marshal(r.headers)
			if err != nil {
				return nil, fmt.Errorf("postgres: a job's headers: %w", err)
			}
			js := string(j)
			headers[i] = &js
		}
		attempts[i], maxes[i], defers[i], rounds[i] = int32(r.attempt), int32(r.max), int32(r.defers), int32(r.round)
		enqs[i], reasons[i], keys[i] = r.enqueuedAt, r.reason, r.key
	}
	return []any{queues, ids, prios, delays, deferreds, payloads, headers, attempts, maxes, defers, enqs, reasons, keys, rounds}, nil
}

// pgText returns s with every NUL replaced by U+FFFD: PostgreSQL's text and jsonb
// cannot hold a NUL, and a reason a guest wrote with one would otherwise fail its every
// settle (and the job come back for ever).
func pgText(s string) string {
	if strings.IndexByte(s, 0) < 0 {
		return s
	}
	return strings.ReplaceAll(s, "\x00", "\uFFFD")
}

// envColumns are the columns an envelope is read from, in envScan's order; a query
// names them after any columns of its own.
const envColumns = `id, priority, payload, headers, attempt, max_attempts, defers, enqueued_at, reason, key, round`

// envScan reads envColumns into an envelope.
type envScan struct {
	env  *backend.Envelope
	prio int16
	enq  int64
}

// dest returns the scan destinations of envColumns, after those of own.
func (e *envScan) dest(own ...any) []any {
	env := e.env
	return append(own, &env.ID, &e.prio, &env.Payload, &env.Headers, &env.Attempt, &env.MaxAttempts,
		&env.Defers, &e.enq, &env.Reason, &env.Key, &env.Round)
}

// done finishes the envelope after a scan: its queue, priority and enqueue time.
func (e *envScan) done(queue string) {
	e.env.Queue, e.env.Priority = queue, uint8(e.prio)
	if e.enq != 0 {
		e.env.EnqueuedAt = time.Unix(0, e.enq)
	}
}
