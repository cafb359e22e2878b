package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/wasmjobs/wasmjobs/backend"
)

// ErrLeaseLost ends a stream that could not renew its claims within the lease: they
// may have been rescued by another host, so it hands out nothing more, and its
// deliveries' settles are refused (backend.ErrStreamClosed) unless their claims held.
var ErrLeaseLost = errors.New("postgres: the stream's claims could not be renewed within their lease")

// releaseTimeout bounds the put-back of a stream's claims when it ends: past it, their
// leases put them back.
const releaseTimeout = 10 * time.Second

// Consume starts a stream of the declared queue q.Name with at most q.Prefetch jobs
// claimed and not settled at once.
func (b *Backend) Consume(ctx context.Context, q backend.QueueConfig) (backend.Stream, error) {
	if err := backend.ValidateQueueName(q.Name); err != nil {
		return nil, err
	}
	q = q.Normalize(b.log)
	if q.KeyConcurrency > 0 {
		return nil, fmt.Errorf("queue %q: the postgres backend does not bound jobs per concurrency key (KeyConcurrency %d)", q.Name, q.KeyConcurrency)
	}
	if _, err := b.queueLevels(ctx, q.Name); err != nil {
		return nil, err
	}
	s := &stream{
		b:        b,
		queue:    q.Name,
		ctx:      ctx,
		prefetch: q.Prefetch,
		ch:       make(chan backend.Delivery),
		wake:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
		finished: make(chan struct{}),
		held:     make(map[*delivery]struct{}),
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, backend.ErrShutDown
	}
	if b.streams[q.Name] == nil {
		b.streams[q.Name] = make(map[*stream]struct{})
	}
	b.streams[q.Name][s] = struct{}{}
	b.wg.Add(1)
	go s.run()
	return s, nil
}

// background runs f in a goroutine that Close waits for, and reports whether it did:
// once Close has begun it does not, and what f would have put back its lease will.
func (b *Backend) background(f func()) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		f()
	}()
	return true
}

// wakeQueue makes every stream of the queue look at it again.
func (b *Backend) wakeQueue(queue string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for s := range b.streams[queue] {
		s.wakeUp()
	}
}

// wakeAll makes every stream look at its queue again.
func (b *Backend) wakeAll() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, ss := range b.streams {
		for s := range ss {
			s.wakeUp()
		}
	}
}

// stream is one consumer of a queue: a goroutine claims up to the prefetch's room,
// hands the claims out one at a time through an unbuffered channel, renews their
// leases and rescues the queue's lapsed claims.
type stream struct {
	b        *Backend
	queue    string
	ctx      context.Context
	prefetch int
	ch       chan backend.Delivery
	wake     chan struct{} // buffered 1: look at the queue again
	stop     chan struct{} // closed by Drop
	dropOnce sync.Once
	finished chan struct{} // closed when run returns

	mu    sync.Mutex
	held  map[*delivery]struct{} // claimed and not settled: buffered, on offer or out
	ended bool
	err   error
}

var _ backend.Stream = (*stream)(nil)

// Deliveries returns the channel the deliveries arrive on; it is closed when the
// stream ends.
func (s *stream) Deliveries() <-chan backend.Delivery { return s.ch }

// Err says why the stream ended: nil while open and after Drop, backend.ErrShutDown,
// the context's error, or ErrLeaseLost.
func (s *stream) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Drop ends the stream and waits until its claims are back on the queue (or, for a
// stream whose context has ended, until their put-back is under way).
func (s *stream) Drop() {
	s.dropOnce.Do(func() { close(s.stop) })
	<-s.finished
}

func (s *stream) wakeUp() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// room is how many more jobs the stream may claim.
func (s *stream) room() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.prefetch - len(s.held)
}

func (s *stream) run() {
	defer s.b.wg.Done()
	defer close(s.finished)
	defer close(s.ch)
	cfg := s.b.cfg
	timer := time.NewTimer(cfg.Poll)
	defer timer.Stop()
	renew := time.NewTicker(cfg.Lease / 3)
	defer renew.Stop()
	renewed := time.Now()
	var rescued time.Time
	var buf []*delivery
	failing := false // the last call to the database failed: log its recovery
	for {
		wait := cfg.Poll
		if len(buf) == 0 {
			if n := s.room(); n > 0 {
				if time.Since(rescued) >= cfg.Poll {
					if err := s.rescue(); err == nil {
						rescued = time.Now()
					}
				}
				got, next, err := s.fetch(n)
				switch {
				case err != nil && s.ctx.Err() == nil && !s.b.isClosed():
					if !failing {
						s.b.log.Warn("postgres: fetching jobs failed; trying again every poll", slog.String("queue", s.queue), slog.Any("error", err))
					}
					failing = true
				case err == nil:
					if failing {
						s.b.log.Info("postgres: fetching jobs again", slog.String("queue", s.queue))
					}
					failing = false
					buf = got
					if next > 0 {
						wait = min(wait, next)
					}
				}
			}
		}
		var out chan<- backend.Delivery
		var d backend.Delivery
		if len(buf) > 0 {
			out, d = s.ch, buf[0]
		} else {
			timer.Reset(wait)
		}
		var err error
		select {
		case out <- d:
			buf = buf[1:]
			continue
		case <-s.wake:
			continue
		case <-timer.C:
			continue
		case <-renew.C:
			if s.renew() == nil {
				renewed = time.Now()
				continue
			}
			if time.Since(renewed) <= cfg.Lease {
				continue
			}
			err = fmt.Errorf("%w (%v): queue %q", ErrLeaseLost, cfg.Lease, s.queue)
		case <-s.stop:
		case <-s.b.done:
			err = backend.ErrShutDown
		case <-s.ctx.Done():
			err = s.ctx.Err()
		}
		s.end(err)
		return
	}
}

// end ends the stream with err and puts back every claim it holds: at once after a
// Drop or a Close, in the background when the stream's context has ended (a worker's
// shutdown does not wait on the database for it).
func (s *stream) end(err error) {
	s.mu.Lock()
	s.ended, s.err = true, err
	held := make([]*delivery, 0, len(s.held))
	for d := range s.held {
		held = append(held, d)
	}
	clear(s.held)
	s.mu.Unlock()
	s.b.mu.Lock()
	delete(s.b.streams[s.queue], s)
	if len(s.b.streams[s.queue]) == 0 {
		delete(s.b.streams, s.queue)
	}
	s.b.mu.Unlock()
	if len(held) == 0 {
		return
	}
	if s.ctx.Err() != nil && !errors.Is(err, backend.ErrShutDown) && s.b.background(func() { s.release(held) }) {
		return
	}
	s.release(held)
}

// release puts the claims of held back at their places on the queue, marked
// redelivered. Each names its claim token: one that lapsed and was taken since is not
// touched. What it cannot put back (the database away) its lease will.
func (s *stream) release(held []*delivery) {
	ctx, cancel := context.WithTimeout(s.b.bg, releaseTimeout)
	defer cancel()
	seqs, toks := claimsOf(held)
	_, err := s.b.pool.Exec(ctx, `UPDATE `+s.b.s+`.jobs j SET state = 0, redelivered = true,
			claim_token = NULL, claimed_by = NULL, lease_until = NULL
		FROM unnest($1::bigint[], $2::bigint[]) AS c(seq, tok)
		WHERE j.seq = c.seq AND j.claim_token = c.tok AND j.state = 1`, seqs, toks)
	if err != nil {
		s.b.log.Warn("postgres: putting back a stream's jobs failed; their leases will", slog.String("queue", s.queue), slog.Int("jobs", len(held)), slog.Any("error", err))
	} else {
		s.b.wakeQueue(s.queue)
	}
}

// claimsOf returns the rows and claim tokens of ds.
func claimsOf(ds []*delivery) (seqs, toks []int64) {
	for _, d := range ds {
		seqs = append(seqs, d.seq)
		toks = append(toks, d.token)
	}
	return seqs, toks
}

// dbTimeout bounds one of the stream's own calls to the database, so that a database
// that stops answering does not stop the stream from seeing its end.
func (s *stream) dbTimeout() time.Duration { return max(s.b.cfg.Lease/3, 5*time.Second) }

// callCtx is the context of one of the stream's own calls: it ends with the stream's
// context, on Drop, at the backend's close, or after dbTimeout.
func (s *stream) callCtx() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(s.ctx, s.dbTimeout())
	go func() {
		select {
		case <-s.stop:
		case <-s.b.done:
		case <-ctx.Done():
		}
		cancel()
	}()
	return ctx, cancel
}

// fetch claims up to n ready jobs, highest priority first, in the order they became
// ready, and reports how long until the queue's next delayed job is due (zero: none).
func (s *stream) fetch(n int) ([]*delivery, time.Duration, error) {
	ctx, cancel := s.callCtx()
	defer cancel()
	token := rand.Int64()
	rows, err := s.b.pool.Query(ctx, `WITH c AS (
			SELECT seq FROM `+s.b.s+`.jobs WHERE queue = $1 AND state = 0 AND due_at <= now()
			ORDER BY priority DESC, due_at, seq LIMIT $2 FOR UPDATE SKIP LOCKED)
		UPDATE `+s.b.s+`.jobs j SET state = 1, claim_token = $3, claimed_by = $4,
			lease_until = now() + $5 * interval '1 microsecond'
		FROM c WHERE j.seq = c.seq
		RETURNING j.seq, j.priority, j.due_at, j.id, j.redelivered, j.payload, j.headers, j.attempt,
			j.max_attempts, j.defers, j.enqueued_at, j.reason, j.key, j.round`,
		s.queue, n, token, s.b.cfg.Host, s.b.cfg.Lease.Microseconds())
	if err != nil {
		return nil, 0, err
	}
	type claimed struct {
		d   *delivery
		due time.Time
	}
	var got []claimed
	for rows.Next() {
		d := &delivery{s: s, token: token}
		var prio int16
		var due time.Time
		var enq int64
		env := &d.env
		if err := rows.Scan(&d.seq, &prio, &due, &env.ID, &env.Redelivered, &env.Payload, &env.Headers,
			&env.Attempt, &env.MaxAttempts, &env.Defers, &enq, &env.Reason, &env.Key, &env.Round); err != nil {
			rows.Close()
			return nil, 0, err
		}
		env.Queue, env.Priority = s.queue, uint8(prio)
		if enq != 0 {
			env.EnqueuedAt = time.Unix(0, enq)
		}
		got = append(got, claimed{d, due})
	}
	if err := rows.Err(); err != nil {
		// The claims may have landed: their leases put them back.
		return nil, 0, err
	}
	// Only a queue that ran dry has a next due time worth a round trip.
	var secs *float64
	if len(got) < n {
		if err := s.b.pool.QueryRow(ctx, `SELECT extract(epoch FROM min(due_at) - now())::float8 FROM `+s.b.s+`.jobs
			WHERE queue = $1 AND state = 0 AND due_at > now()`, s.queue).Scan(&secs); err != nil {
			secs = nil // the poll looks again
		}
	}
	slices.SortFunc(got, func(a, b claimed) int {
		return cmp.Or(cmp.Compare(b.d.env.Priority, a.d.env.Priority), a.due.Compare(b.due), cmp.Compare(a.d.seq, b.d.seq))
	})
	out := make([]*delivery, len(got))
	s.mu.Lock()
	for i, c := range got {
		out[i] = c.d
		s.held[c.d] = struct{}{}
	}
	ended := s.ended
	s.mu.Unlock()
	if ended { // cannot happen: only run ends the stream, and run is here
		return nil, 0, nil
	}
	var next time.Duration
	if secs != nil {
		// At least a millisecond: a host's clock a little ahead of the database's would
		// wake it before the job is due, and again, and again.
		next = max(time.Duration(*secs*float64(time.Second)), time.Millisecond)
	}
	return out, next, nil
}

// renew extends the leases of the stream's claims.
func (s *stream) renew() error {
	s.mu.Lock()
	held := make([]*delivery, 0, len(s.held))
	for d := range s.held {
		held = append(held, d)
	}
	s.mu.Unlock()
	if len(held) == 0 {
		return nil
	}
	ctx, cancel := s.callCtx()
	defer cancel()
	seqs, toks := claimsOf(held)
	_, err := s.b.pool.Exec(ctx, `UPDATE `+s.b.s+`.jobs j SET lease_until = now() + $3 * interval '1 microsecond'
		FROM unnest($1::bigint[], $2::bigint[]) AS c(seq, tok)
		WHERE j.seq = c.seq AND j.claim_token = c.tok AND j.state = 1`, seqs, toks, s.b.cfg.Lease.Microseconds())
	if err != nil && s.ctx.Err() == nil {
		s.b.log.Warn("postgres: renewing claims failed", slog.String("queue", s.queue), slog.Int("claims", len(held)), slog.Any("error", err))
	}
	return err
}

// rescue puts back the queue's claims whose lease has expired, whoever held them,
// marked redelivered at the attempt they had; a job rescued MaxRescues times already
// goes to the dead letters instead.
func (s *stream) rescue() error {
	ctx, cancel := s.callCtx()
	defer cancel()
	batch := &pgx.Batch{}
	batch.Queue(`WITH gone AS (
			DELETE FROM `+s.b.s+`.jobs WHERE queue = $1 AND state = 1 AND lease_until < now() AND rescues >= $2
			RETURNING queue, id, priority, payload, headers, attempt, max_attempts, defers, enqueued_at, reason, key, round, rescues)
		INSERT INTO `+s.b.s+`.dead (queue, id, priority, payload, headers, attempt, max_attempts, defers, enqueued_at, reason, key, round, dead_reason)
		SELECT queue, id, priority, payload, headers, attempt, max_attempts, defers, enqueued_at, reason, key, round,
			format('its claim lapsed %s times without a settle (its host died or lost the database while it ran each time): a crash loop, dead-lettered', rescues + 1)
		FROM gone`, s.queue, s.b.cfg.MaxRescues)
	batch.Queue(`UPDATE `+s.b.s+`.jobs SET state = 0, redelivered = true, rescues = rescues + 1,
			claim_token = NULL, claimed_by = NULL, lease_until = NULL
		WHERE queue = $1 AND state = 1 AND lease_until < now()`, s.queue)
	err := s.b.pool.SendBatch(ctx, batch).Close()
	if err != nil && s.ctx.Err() == nil && !s.b.isClosed() {
		s.b.log.Warn("postgres: rescuing lapsed claims failed", slog.String("queue", s.queue), slog.Any("error", err))
	}
	return err
}

// forget takes d out of the stream's claims, freeing its prefetch slot. It reports
// whether the stream still held it.
func (s *stream) forget(d *delivery) bool {
	s.mu.Lock()
	_, ok := s.held[d]
	delete(s.held, d)
	s.mu.Unlock()
	if ok {
		s.wakeUp()
	}
	return ok
}

// holds reports whether d is one of the stream's claims.
func (s *stream) holds(d *delivery) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.held[d]
	return ok
}

// delivery is one claimed job handed to a consumer.
type delivery struct {
	s     *stream
	seq   int64
	token int64
	env   backend.Envelope
	state atomic.Int32 // deliveryOpen, deliverySettling or deliverySettled
}

// A delivery's states.
const (
	deliveryOpen int32 = iota
	deliverySettling
	deliverySettled
)

var _ backend.Delivery = (*delivery)(nil)

// Envelope returns the job.
func (d *delivery) Envelope() (backend.Envelope, error) { return d.env, nil }

// settle runs write, the settle's statement, once: it reports whether the claim still
// held. A settle whose context ends while its write is in flight may still land: it
// returns backend.ErrSettleUnknown. A settle that fails leaves the job unsettled, and
// the claim is no longer the stream's: the job goes back to its queue (putBack), and
// settling it again fails with backend.ErrStreamClosed.
func (d *delivery) settle(ctx context.Context, op string, write func(ctx context.Context) (bool, error)) error {
	if !d.state.CompareAndSwap(deliveryOpen, deliverySettling) {
		return fmt.Errorf("%s of job %s: %w", op, d.env.ID, backend.ErrAlreadySettled)
	}
	b := d.s.b
	if b.isClosed() {
		d.state.Store(deliveryOpen)
		return backend.ErrShutDown
	}
	if !d.s.holds(d) {
		d.state.Store(deliverySettled)
		return fmt.Errorf("%s of job %s: %w", op, d.env.ID, backend.ErrStreamClosed)
	}
	ok, err := write(ctx)
	switch {
	case err != nil && ctx.Err() != nil:
		d.state.Store(deliverySettled)
		d.putBack()
		return fmt.Errorf("%s of job %s: %w: %w", op, d.env.ID, backend.ErrSettleUnknown, err)
	case err != nil:
		// Unsettled, and no longer the stream's: nobody may be going to settle it again
		// (a worker leaves it to the backend to deliver it again), and a claim the
		// stream kept would hold its prefetch slot, its lease renewed, for ever.
		d.state.Store(deliveryOpen)
		d.putBack()
		return b.transport(op, d.env.Queue, err)
	case !ok:
		d.state.Store(deliverySettled)
		d.s.forget(d)
		return fmt.Errorf("%s of job %s: its claim lapsed (not renewed within the lease, or put back) and the job went back to its queue: %w", op, d.env.ID, backend.ErrStreamClosed)
	}
	d.state.Store(deliverySettled)
	d.s.forget(d)
	return nil
}

// putBack takes the delivery out of its stream's claims, if it still is one, and puts
// its job back on the queue in the background, which its claim token makes safe: if a
// settle's write landed after all, the put-back finds nothing to touch. What the
// put-back cannot reach (the database away), the lease does.
func (d *delivery) putBack() {
	if !d.s.forget(d) {
		return
	}
	d.s.b.background(func() { d.s.release([]*delivery{d}) })
}

// Ack deletes the job, in a batch with the acks of the same moment.
func (d *delivery) Ack(ctx context.Context) error {
	return d.settle(ctx, "ack", func(ctx context.Context) (bool, error) {
		return d.s.b.ack(ctx, d.seq, d.token)
	})
}

// Retry puts next on its queue after delay and deletes this job, in one transaction.
func (d *delivery) Retry(ctx context.Context, next backend.Envelope, delay time.Duration) error {
	return d.replace(ctx, "retry", next, delay, false)
}

// Defer holds next for delay and deletes this job, in one transaction.
func (d *delivery) Defer(ctx context.Context, next backend.Envelope, delay time.Duration) error {
	return d.replace(ctx, "defer", next, delay, true)
}

// replace settles the delivery by deleting its row and inserting next in the same
// statement: the insert happens only when the delete did, so a lapsed claim publishes
// nothing.
func (d *delivery) replace(ctx context.Context, op string, next backend.Envelope, delay time.Duration, deferred bool) error {
	if err := backend.CheckDelay(delay, backend.MaxDelay); err != nil {
		return err
	}
	b := d.s.b
	levels, err := b.queueLevels(ctx, next.Queue)
	if err != nil {
		return err
	}
	return d.settle(ctx, op, func(ctx context.Context) (bool, error) {
		batch := &pgx.Batch{}
		batch.Queue(`WITH gone AS (
				DELETE FROM `+b.s+`.jobs WHERE seq = $15 AND claim_token = $16 AND state = 1 RETURNING 1),
			ins AS (
				INSERT INTO `+b.s+`.jobs (queue, id, state, priority, due_at, deferred,
					payload, headers, attempt, max_attempts, defers, enqueued_at, reason, key, round)
				SELECT $1::text, $2::text, 0, $3::smallint, now() + $4::bigint * interval '1 microsecond', $5::boolean,
					$6::bytea, $7::jsonb, $8::int, $9::int, $10::int, $11::bigint, $12::text, $13::text, $14::int
				FROM gone ON CONFLICT (queue, id) DO NOTHING)
			SELECT count(*) FROM gone`, append(jobArgs(next, levels, delay, deferred), d.seq, d.token)...)
		batch.Queue(`SELECT pg_notify($1, $2)`, b.channel, next.Queue)
		br := b.pool.SendBatch(ctx, batch)
		var n int
		if err := br.QueryRow().Scan(&n); err != nil {
			br.Close()
			return false, err
		}
		if err := br.Close(); err != nil {
			return false, err
		}
		if n == 1 {
			b.wakeQueue(next.Queue)
		}
		return n == 1, nil
	})
}

// DeadLetter moves the job to its queue's dead letters with reason.
func (d *delivery) DeadLetter(ctx context.Context, reason string) error {
	return d.settle(ctx, "dead-letter", func(ctx context.Context) (bool, error) {
		b := d.s.b
		tag, err := b.pool.Exec(ctx, `WITH gone AS (
				DELETE FROM `+b.s+`.jobs WHERE seq = $1 AND claim_token = $2 AND state = 1
				RETURNING queue, id, priority, payload, headers, attempt, max_attempts, defers, enqueued_at, reason, key, round)
			INSERT INTO `+b.s+`.dead (queue, id, priority, payload, headers, attempt, max_attempts, defers, enqueued_at, reason, key, round, dead_reason)
			SELECT queue, id, priority, payload, headers, attempt, max_attempts, defers, enqueued_at, reason, key, round, $3 FROM gone`,
			d.seq, d.token, reason)
		return tag.RowsAffected() == 1, err
	})
}
