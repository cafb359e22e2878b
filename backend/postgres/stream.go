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
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/wasmjobs/wasmjobs/backend"
)

// ErrLeaseLost ends a stream that could not renew its claims for half their lease: it
// hands out nothing more, and every delivery it held is lost (backend.LeasedDelivery),
// so that the handlers stop before another host can take the jobs; their settles are
// refused (backend.ErrStreamClosed), and their leases put the jobs back.
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
	calls, endCalls := context.WithCancel(ctx)
	s := &stream{
		b:        b,
		queue:    q.Name,
		ctx:      ctx,
		calls:    calls,
		endCalls: endCalls,
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
		endCalls()
		return nil, backend.ErrShutDown
	}
	s.unhook = context.AfterFunc(b.live, endCalls)
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
	calls    context.Context    // of the stream's own calls: ends with ctx, on Drop, at Close
	endCalls context.CancelFunc // ends calls
	unhook   func() bool        // stops Close ending calls
	prefetch int
	ch       chan backend.Delivery
	wake     chan struct{} // buffered 1: look at the queue again
	stop     chan struct{} // closed by Drop
	dropOnce sync.Once
	finished chan struct{} // closed when run returns

	// run's own: whether the last renewal or rescue failed, so that an outage logs once
	renewFailing, rescueFailing bool

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
	s.dropOnce.Do(func() {
		close(s.stop)
		s.endCalls()
	})
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
	defer s.unhook()
	defer s.endCalls()
	defer close(s.finished)
	defer close(s.ch)
	cfg := s.b.cfg
	timer := time.NewTimer(cfg.Poll)
	defer timer.Stop()
	renew := time.NewTicker(cfg.Lease / 6)
	defer renew.Stop()
	// renewed is when the last renewal that succeeded was sent: every claim the stream
	// holds is leased at least until then plus the lease, by the database's clock.
	renewed := time.Now()
	var rescued time.Time
	var buf []*delivery
	failing := false // the last call to the database failed: log its recovery
	for {
		// Two thirds of the lease without a renewal (three renewals failed, a sixth of
		// the lease apart): stop now, while the claims are still ours, so that the jobs'
		// handlers have stopped before another host can take them. Checked on every
		// turn: a turn waits at most until then, or for a call of dbTimeout (a tenth of
		// the lease) in flight.
		if since := time.Since(renewed); since >= lostAfter(cfg.Lease) {
			s.end(fmt.Errorf("%w: no renewal for %v of the %v lease: queue %q", ErrLeaseLost, since.Round(time.Millisecond), cfg.Lease, s.queue))
			return
		}
		// Rescue on its own schedule, whether or not the stream has room: a full
		// stream's host still puts a dead host's jobs back for the others.
		if time.Since(rescued) >= cfg.Poll {
			s.rescue()
			rescued = time.Now() // failed or not: the next poll tries again
		}
		wait := cfg.Poll
		if len(buf) == 0 {
			if n := s.room(); n > 0 {
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
		// A renewal may have found a buffered claim taken: it is not the stream's to
		// hand out.
		buf = slices.DeleteFunc(buf, (*delivery).isLost)
		var out chan<- backend.Delivery
		var d backend.Delivery
		if len(buf) > 0 {
			out, d = s.ch, buf[0]
		}
		// Wake at the poll, at the next due job, and at the moment the claims would be
		// lost, whichever comes first.
		timer.Reset(max(min(wait, time.Until(renewed.Add(lostAfter(cfg.Lease)))), time.Millisecond))
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
			sent := time.Now()
			if s.renew() == nil {
				renewed = sent
			}
			continue
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

// lostAfter is how long a stream goes without a renewal before it gives its claims up:
// two thirds of the lease, a third to spare for the handlers to stop.
func lostAfter(lease time.Duration) time.Duration { return lease * 2 / 3 }

// end ends the stream with err, loses every delivery it holds and puts their jobs
// back: at once after a Drop or a Close, in the background when the stream's context
// has ended (a worker's shutdown does not wait on the database for it), and not at all
// after ErrLeaseLost (the database is out of reach; the leases will).
func (s *stream) end(err error) {
	s.mu.Lock()
	s.ended, s.err = true, err
	held := make([]*delivery, 0, len(s.held))
	for d := range s.held {
		held = append(held, d)
		close(d.lost) // once: a delivery leaves held once
	}
	clear(s.held)
	s.mu.Unlock()
	s.b.mu.Lock()
	delete(s.b.streams[s.queue], s)
	if len(s.b.streams[s.queue]) == 0 {
		delete(s.b.streams, s.queue)
	}
	s.b.mu.Unlock()
	if len(held) == 0 || errors.Is(err, ErrLeaseLost) {
		return // a database out of reach: the leases put the jobs back
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

// releaseToken puts back whatever a fetch that failed claimed under token.
func (s *stream) releaseToken(token int64) {
	ctx, cancel := context.WithTimeout(s.b.bg, releaseTimeout)
	defer cancel()
	_, err := s.b.pool.Exec(ctx, `UPDATE `+s.b.s+`.jobs SET state = 0, redelivered = true,
			claim_token = NULL, claimed_by = NULL, lease_until = NULL
		WHERE queue = $1 AND state = 1 AND claim_token = $2`, s.queue, token)
	if err != nil {
		s.b.log.Warn("postgres: putting back what a failed fetch claimed failed; their leases will", slog.String("queue", s.queue), slog.Any("error", err))
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
// that stops answering does not keep the stream from seeing its end or its lease
// running out: a tenth of the lease.
func (s *stream) dbTimeout() time.Duration { return s.b.cfg.Lease / 10 }

// callCtx is the context of one of the stream's own calls: it ends with the stream's
// context, on Drop, at the backend's close, or after dbTimeout.
func (s *stream) callCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(s.calls, s.dbTimeout())
}

// fetch claims up to n ready jobs, highest priority first, in the order they became
// ready, and reports how long until the queue's next delayed job is due (zero: none).
func (s *stream) fetch(n int) ([]*delivery, time.Duration, error) {
	ctx, cancel := s.callCtx()
	defer cancel()
	token := rand.Int64()
	// One round trip, one implicit transaction, three statements, each seeing what
	// the one before did: the waiting jobs now due become ready (a bounded batch; the
	// next fetch takes the rest), the ready ones are claimed, and the next due time is
	// read.
	batch := &pgx.Batch{}
	batch.Queue(`UPDATE `+s.b.s+`.jobs SET state = 0 WHERE seq IN (
			SELECT seq FROM `+s.b.s+`.jobs WHERE queue = $1 AND state = 2 AND due_at <= now()
			ORDER BY due_at LIMIT 1000 FOR UPDATE SKIP LOCKED)`, s.queue)
	batch.Queue(`WITH c AS (
			SELECT seq FROM `+s.b.s+`.jobs WHERE queue = $1 AND state = 0
			ORDER BY priority DESC, due_at, seq LIMIT $2 FOR UPDATE SKIP LOCKED)
		UPDATE `+s.b.s+`.jobs j SET state = 1, claim_token = $3, claimed_by = $4,
			lease_until = now() + $5 * interval '1 microsecond'
		FROM c WHERE j.seq = c.seq
		RETURNING j.seq, j.due_at, j.redelivered, `+envColumns,
		s.queue, n, token, s.b.cfg.Host, s.b.cfg.Lease.Microseconds())
	batch.Queue(`SELECT extract(epoch FROM min(due_at) - now())::float8 FROM `+s.b.s+`.jobs
		WHERE queue = $1 AND state = 2`, s.queue)
	br := s.b.pool.SendBatch(ctx, batch)
	defer br.Close()
	ok := false
	var err error
	defer func() {
		if !ok && !pgconn.SafeToRetry(err) { // SafeToRetry: nothing reached the server
			// The claims may have landed, their rows unread: put them back, by the
			// fetch's token, rather than leave them to their lease.
			s.b.background(func() { s.releaseToken(token) })
		}
	}()
	if _, err = br.Exec(); err != nil {
		return nil, 0, err
	}
	rows, err := br.Query()
	if err != nil {
		return nil, 0, err
	}
	type claimed struct {
		d   *delivery
		due time.Time
	}
	var got []claimed
	for rows.Next() {
		d := &delivery{s: s, token: token, lost: make(chan struct{})}
		var due time.Time
		e := envScan{env: &d.env}
		if err := rows.Scan(e.dest(&d.seq, &due, &d.env.Redelivered)...); err != nil {
			rows.Close()
			return nil, 0, err
		}
		e.done(s.queue)
		got = append(got, claimed{d, due})
	}
	if err := rows.Err(); err != nil {
		return nil, 0, err
	}
	var secs *float64
	if err := br.QueryRow().Scan(&secs); err != nil {
		return nil, 0, err
	}
	if err := br.Close(); err != nil {
		return nil, 0, err
	}
	ok = true
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

// renew extends the leases of the stream's claims. A claim it finds no longer the
// stream's (a lease that lapsed, and another host's rescue took it) is lost at once.
func (s *stream) renew() error {
	s.mu.Lock()
	held := make([]*delivery, 0, len(s.held))
	for d := range s.held {
		// One being settled is left out: its settle holds its row's lock, which the
		// renewal would wait for, and ends the claim either way.
		if d.state.Load() == deliveryOpen {
			held = append(held, d)
		}
	}
	s.mu.Unlock()
	if len(held) == 0 {
		return nil
	}
	// In the rows' order, as the acks' batches lock them: the two never deadlock.
	slices.SortFunc(held, func(x, y *delivery) int { return cmp.Compare(x.seq, y.seq) })
	ctx, cancel := s.callCtx()
	defer cancel()
	seqs, toks := claimsOf(held)
	rows, err := s.b.pool.Query(ctx, `UPDATE `+s.b.s+`.jobs j SET lease_until = now() + $3 * interval '1 microsecond'
		FROM unnest($1::bigint[], $2::bigint[]) AS c(seq, tok)
		WHERE j.seq = c.seq AND j.claim_token = c.tok AND j.state = 1 RETURNING j.seq`, seqs, toks, s.b.cfg.Lease.Microseconds())
	renewed := make(map[int64]bool, len(held))
	if err == nil {
		for rows.Next() {
			var seq int64
			if err = rows.Scan(&seq); err != nil {
				break
			}
			renewed[seq] = true
		}
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
	}
	if err != nil {
		if s.ctx.Err() == nil && !s.renewFailing {
			s.b.log.Warn("postgres: renewing claims failed; trying again every sixth of the lease", slog.String("queue", s.queue), slog.Int("claims", len(held)), slog.Any("error", err))
		}
		s.renewFailing = true
		return err
	}
	s.renewFailing = false
	s.mu.Lock()
	for _, d := range held {
		if _, ok := s.held[d]; ok && !renewed[d.seq] {
			// Settled meanwhile (its row gone), or taken: either way not ours.
			delete(s.held, d)
			close(d.lost)
		}
	}
	s.mu.Unlock()
	return nil
}

// rescue puts back the queue's claims whose lease has expired, whoever held them,
// marked redelivered at the attempt they had; a job rescued MaxRescues times already
// goes to the dead letters instead.
func (s *stream) rescue() {
	ctx, cancel := s.callCtx()
	defer cancel()
	batch := &pgx.Batch{}
	// The crash loop's rows stay as their records, dead, the lapse appended as an
	// attempt.
	const why = `format('its claim lapsed %s times without a settle (its host died, hung or lost the database while it held it, each time): dead-lettered as a crash loop', rescues + 1)`
	batch.Queue(`WITH gone AS (
			UPDATE `+s.b.s+`.jobs SET state = 3, status = 'dead', outcome = `+why+`, finished_at = now(), updated_at = now(),
				attempts = `+appendAttempt(`jsonb_build_array(jsonb_build_object('attempt', greatest(attempt, 1), 'state', 'dead',
					'reason', `+why+`, 'finished_at', now()))`)+`,
				claim_token = NULL, claimed_by = NULL, lease_until = NULL
			WHERE queue = $1 AND state = 1 AND lease_until < now() AND rescues >= $2
			RETURNING queue, id, priority, payload, headers, attempt, max_attempts, defers, enqueued_at, reason, key, round, outcome)
		INSERT INTO `+s.b.s+`.dead (queue, id, priority, payload, headers, attempt, max_attempts, defers, enqueued_at, reason, key, round, dead_reason)
		SELECT queue, id, priority, payload, headers, attempt, max_attempts, defers, enqueued_at, reason, key, round, outcome
		FROM gone`, s.queue, s.b.cfg.MaxRescues)
	batch.Queue(`UPDATE `+s.b.s+`.jobs SET state = 0, redelivered = true, rescues = rescues + 1,
			claim_token = NULL, claimed_by = NULL, lease_until = NULL
		WHERE queue = $1 AND state = 1 AND lease_until < now()`, s.queue)
	err := s.b.pool.SendBatch(ctx, batch).Close()
	if err != nil && s.ctx.Err() == nil && !s.b.isClosed() && !s.rescueFailing {
		s.b.log.Warn("postgres: rescuing lapsed claims failed; trying again every poll", slog.String("queue", s.queue), slog.Any("error", err))
	}
	s.rescueFailing = err != nil
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
	lost  chan struct{} // closed when the stream ends holding it
	state atomic.Int32  // deliveryOpen, deliverySettling or deliverySettled
}

// A delivery's states.
const (
	deliveryOpen int32 = iota
	deliverySettling
	deliverySettled
)

var _ backend.LeasedDelivery = (*delivery)(nil)

// Lost is closed when the delivery's claim is no longer the consumer's: its stream
// ended before it was settled (ErrLeaseLost, a Drop, the backend's Close), or a
// renewal found the claim taken. A settle racing either may close it after it landed.
func (d *delivery) Lost() <-chan struct{} { return d.lost }

// isLost reports whether Lost is closed.
func (d *delivery) isLost() bool {
	select {
	case <-d.lost:
		return true
	default:
		return false
	}
}

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
	case errors.Is(err, errIDHeld):
		d.state.Store(deliveryOpen)
		d.putBack()
		return fmt.Errorf("%s of job %s: %w", op, d.env.ID, err)
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

var (
	_ backend.AtomicDelivery      = (*delivery)(nil)
	_ backend.CancellableDelivery = (*delivery)(nil)
)

// Ack finishes the job: its row stays as its record, succeeded (or goes, when no
// records are kept), in a batch with the acks of the same moment.
func (d *delivery) Ack(ctx context.Context) error { return d.AckWith(ctx, nil, nil) }

// AckWith acknowledges the job and publishes children in one statement: the children
// only if the claim still held. A child to an undeclared queue fails it with nothing
// written; a child whose id its queue holds is not published again.
func (d *delivery) AckWith(ctx context.Context, children []backend.Publication, rec *backend.JobRecord) error {
	if d.state.Load() != deliveryOpen {
		return fmt.Errorf("ack of job %s: %w", d.env.ID, backend.ErrAlreadySettled)
	}
	b := d.s.b
	rr, err := b.newRunRecord(d.env, backend.JobSucceeded, "", true, rec)
	if err != nil {
		return err
	}
	if len(children) == 0 {
		return d.settle(ctx, "ack", func(ctx context.Context) (bool, error) {
			return b.ack(ctx, d.seq, d.token, &rr)
		})
	}
	rows, queues, err := b.jobRows(ctx, children, false)
	if err != nil {
		return err
	}
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i] = r.id
	}
	cols, err := columns(rows)
	if err != nil {
		return err
	}
	args := append(append(rr.args(), ids, d.seq, d.token), cols...)
	return d.settle(ctx, "ack", func(ctx context.Context) (bool, error) {
		// A deadlock with a publish of the same new ids did nothing: tried again, twice.
		for try := 1; ; try++ {
			ok, err := d.ackWith1(ctx, args, queues)
			if try < 3 && retryable(err) {
				continue
			}
			return ok, err
		}
	})
}

// ackWith1 is one try of AckWith's statement, its arguments args, the children's
// queues queues.
func (d *delivery) ackWith1(ctx context.Context, args []any, queues map[string]bool) (bool, error) {
	b := d.s.b
	batch := &pgx.Batch{}
	batch.Queue(`WITH c AS (
			UPDATE `+b.s+`.jobs SET state = 3, `+recordSet(recordParams(1))+`, children = $13::text[],
				claim_token = NULL, claimed_by = NULL, lease_until = NULL
			WHERE seq = $14 AND claim_token = $15 AND state = 1 AND lease_until > now()
			RETURNING 1),
		`+b.upsert(manySource(16, `EXISTS (SELECT 1 FROM c)`, false), false)+`
		SELECT count(*) FROM c`, args...)
	for q := range queues {
		batch.Queue(`SELECT pg_notify($1, $2)`, b.channel, q)
	}
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
		for q := range queues {
			b.wakeQueue(q)
		}
	}
	return n == 1, nil
}

// Retry puts next on its queue after delay in this job's place, in one statement.
func (d *delivery) Retry(ctx context.Context, next backend.Envelope, delay time.Duration) error {
	return d.RetryWith(ctx, next, delay, nil)
}

// RetryWith is Retry, writing rec's run into the job's record.
func (d *delivery) RetryWith(ctx context.Context, next backend.Envelope, delay time.Duration, rec *backend.JobRecord) error {
	return d.replace(ctx, "retry", next, delay, false, rec)
}

// Defer holds next for delay in this job's place, in one statement.
func (d *delivery) Defer(ctx context.Context, next backend.Envelope, delay time.Duration) error {
	return d.DeferWith(ctx, next, delay, nil)
}

// DeferWith is Defer, writing rec's run into the job's record.
func (d *delivery) DeferWith(ctx context.Context, next backend.Envelope, delay time.Duration, rec *backend.JobRecord) error {
	return d.replace(ctx, "defer", next, delay, true, rec)
}

// errIDHeld refuses a retry, a defer or a replay onto a queue that holds a job of the
// same id: none is a repeat to drop.
var errIDHeld = errors.New("the queue holds a job of that id already")

// replace settles the delivery by putting next in its job's place: in the row itself
// when next is the same job on the same queue (a retry, a defer), else by inserting
// next and deleting the row in one statement, the delete only if the insert happened,
// so that a retry to a queue that holds next's id already fails (errIDHeld) and puts
// the job back as it was, rather than dropping next as a repeat. The worker's retries
// and defers are the same job on the same queue: only an API caller's can meet this.
func (d *delivery) replace(ctx context.Context, op string, next backend.Envelope, delay time.Duration, deferred bool, rec *backend.JobRecord) error {
	if d.state.Load() != deliveryOpen {
		return fmt.Errorf("%s of job %s: %w", op, d.env.ID, backend.ErrAlreadySettled)
	}
	if err := backend.CheckDelay(delay, backend.MaxDelay); err != nil {
		return err
	}
	b := d.s.b
	levels, err := b.queueLevels(ctx, next.Queue)
	if err != nil {
		return err
	}
	state := backend.JobRetrying
	if deferred {
		state = backend.JobDeferred
	}
	rr, err := b.newRunRecord(d.env, state, next.Reason, false, rec)
	if err != nil {
		return err
	}
	args := append(newJobRow(next, levels, delay, deferred).args(), d.seq, d.token)
	inPlace := next.Queue == d.env.Queue && next.ID == d.env.ID
	if inPlace {
		args = append(args, rr.args()...)
	} else {
		args = append(args, d.env.Queue, d.env.ID)
	}
	return d.settle(ctx, op, func(ctx context.Context) (bool, error) {
		batch := &pgx.Batch{}
		if inPlace {
			batch.Queue(`WITH r AS (
					UPDATE `+b.s+`.jobs SET state = CASE WHEN $4::bigint > 0 THEN 2 ELSE 0 END, priority = $3::smallint,
						due_at = now() + $4::bigint * interval '1 microsecond', deferred = $5::boolean,
						payload = $6::bytea, headers = $7::jsonb, attempt = $8::int, max_attempts = $9::int,
						defers = $10::int, enqueued_at = $11::bigint, reason = $12::text, key = $13::text, round = $14::int,
						redelivered = false, rescues = 0, claim_token = NULL, claimed_by = NULL, lease_until = NULL,
						`+recordSet(recordParams(17))+`
					WHERE seq = $15 AND claim_token = $16 AND state = 1 AND lease_until > now()
						AND queue = $1::text AND id = $2::text
					RETURNING 1)
				SELECT count(*), count(*) FROM r`, args...)
		} else {
			// A unique key the job holds moves to next, which takes the job's place.
			batch.Queue(`WITH claim AS (
					SELECT holds_key FROM `+b.s+`.jobs WHERE seq = $15 AND claim_token = $16 AND state = 1 AND lease_until > now() FOR UPDATE),
				`+b.upsert(oneSource(`claim`, `claim.holds_key`), false)+`,
				put AS (SELECT 1 WHERE EXISTS (SELECT 1 FROM ins) OR EXISTS (SELECT 1 FROM rev)),
				moved AS (
					UPDATE `+b.s+`.unique_keys SET job_queue = $1::text, job_id = $2::text
					WHERE job_queue = $17::text AND job_id = $18::text AND until IS NULL AND EXISTS (SELECT 1 FROM put)),
				gone AS (
					DELETE FROM `+b.s+`.jobs WHERE seq = $15 AND claim_token = $16 AND EXISTS (SELECT 1 FROM put) RETURNING 1)
				SELECT (SELECT count(*) FROM claim), (SELECT count(*) FROM gone)`, args...)
		}
		batch.Queue(`SELECT pg_notify($1, $2)`, b.channel, next.Queue)
		br := b.pool.SendBatch(ctx, batch)
		var claimed, done int
		if err := br.QueryRow().Scan(&claimed, &done); err != nil {
			br.Close()
			return false, err
		}
		if err := br.Close(); err != nil {
			return false, err
		}
		if claimed == 1 && done == 0 {
			return false, fmt.Errorf("%w: queue %q, id %s: the %s is not a repeat to drop, so the job goes back to its queue, as it was", errIDHeld, next.Queue, next.ID, op)
		}
		if done == 1 {
			b.wakeQueue(next.Queue)
		}
		return done == 1, nil
	})
}

// DeadLetter moves the job to its queue's dead letters with reason; its row stays as
// its record, dead.
func (d *delivery) DeadLetter(ctx context.Context, reason string) error {
	return d.DeadLetterWith(ctx, reason, nil)
}

// DeadLetterWith is DeadLetter, writing rec's run into the job's record.
func (d *delivery) DeadLetterWith(ctx context.Context, reason string, rec *backend.JobRecord) error {
	if d.state.Load() != deliveryOpen {
		return fmt.Errorf("dead-letter of job %s: %w", d.env.ID, backend.ErrAlreadySettled)
	}
	b := d.s.b
	rr, err := b.newRunRecord(d.env, backend.JobDead, reason, true, rec)
	if err != nil {
		return err
	}
	args := append(rr.args(), d.seq, d.token)
	return d.settle(ctx, "dead-letter", func(ctx context.Context) (bool, error) {
		tag, err := b.pool.Exec(ctx, `WITH gone AS (
				UPDATE `+b.s+`.jobs SET state = 3, `+recordSet(recordParams(1))+`,
					claim_token = NULL, claimed_by = NULL, lease_until = NULL
				WHERE seq = $13 AND claim_token = $14 AND state = 1 AND lease_until > now()
				RETURNING queue, id, priority, payload, headers, attempt, max_attempts, defers, enqueued_at, reason, key, round, outcome)
			INSERT INTO `+b.s+`.dead (queue, id, priority, payload, headers, attempt, max_attempts, defers, enqueued_at, reason, key, round, dead_reason)
			SELECT queue, id, priority, payload, headers, attempt, max_attempts, defers, enqueued_at, reason, key, round, outcome FROM gone`,
			args...)
		return tag.RowsAffected() == 1, err
	})
}

// Cancel settles the job as cancelled: it leaves its queue for good, its row stays as
// its record, cancelled with reason.
func (d *delivery) Cancel(ctx context.Context, reason string, rec *backend.JobRecord) error {
	if d.state.Load() != deliveryOpen {
		return fmt.Errorf("cancel of job %s: %w", d.env.ID, backend.ErrAlreadySettled)
	}
	b := d.s.b
	rr, err := b.newRunRecord(d.env, backend.JobCancelled, reason, true, rec)
	if err != nil {
		return err
	}
	args := append(rr.args(), d.seq, d.token)
	return d.settle(ctx, "cancel", func(ctx context.Context) (bool, error) {
		tag, err := b.pool.Exec(ctx, `UPDATE `+b.s+`.jobs SET state = 3, `+recordSet(recordParams(1))+`,
				claim_token = NULL, claimed_by = NULL, lease_until = NULL
			WHERE seq = $13 AND claim_token = $14 AND state = 1 AND lease_until > now()`, args...)
		return tag.RowsAffected() == 1, err
	})
}
