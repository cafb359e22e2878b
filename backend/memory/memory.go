// Package memory is the in-process implementation of the backend contract: the default
// backend of `wasmjobs run`, and the one tests use.
//
// Nothing survives the process: messages still queued or delayed when the backend
// closes are gone. Delays use timers of the time package, so tests can run them in the
// virtual time of testing/synctest. The backend can be inspected per queue (Stats,
// Pending, DeadLetters) and can be handed messages that do not decode
// (InjectMalformed), to test how consumers deal with them.
//
// Jobs can wait for other jobs (fan-in, workflows, batches: backend.DependentPublisher,
// WaitingDelivery, AwaitedDelivery, WaitCanceller, GroupStore). A waiting job is kept
// apart from its queue, counted as Waiting in its stats, holding no claim and no place
// in its key's line, until every job it awaits ended; the results it gathered travel
// with it until its final settle. The backend keeps no job records: so that a job can
// await one that has just ended, it keeps the results of the latest Config.KeepEnded
// ended jobs, and as many ended groups. Settles publish their children under the locks
// of every queue involved, so that a consumer sees all of them or none.
package memory

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/internal/stream"
)

// Config configures a memory backend. The zero value is ready to use.
type Config struct {
	// Granularity is the unit delays are rounded up to. Zero means 1 ms; a value finer
	// than backend.MinGranularity is clamped to it and logged.
	Granularity time.Duration
	// Logger receives warnings about clamped configuration. Nil discards them.
	Logger *slog.Logger
	// KeepEnded is how many ended jobs' results (state, reason, output up to
	// backend.MaxAwaitOutput) the backend keeps, the latest, so that a job published
	// to await one that has just ended finds it ended rather than unknown; the same
	// number bounds the ended workflows and batches it keeps. Zero means
	// DefaultKeepEnded; a negative value keeps none. Each result keeps up to
	// backend.MaxAwaitOutput of output, so the default bounds them at 160 MiB of
	// outputs (jobs that leave none cost a few hundred bytes each). Results a
	// waiting job has gathered are kept with it whatever this says.
	KeepEnded int
}

// DefaultKeepEnded is how many ended jobs' results a Config without KeepEnded keeps.
const DefaultKeepEnded = 10000

// Backend is an in-process backend. Its zero value is not usable: call New.
type Backend struct {
	log         *slog.Logger
	granularity time.Duration

	queues  stream.Directory[*queue]
	done    chan struct{} // closed by Close
	streams stream.Streams[*message]

	ticks scheduleTicks // the last fired tick of each schedule (ScheduleStore)
	w     waits         // the jobs that wait for other jobs, and the groups
}

// New returns an empty backend.
func New(cfg Config) *Backend {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	b := &Backend{
		log:         log,
		granularity: backend.ClampGranularity(cfg.Granularity, log),
		done:        make(chan struct{}),
	}
	b.streams.Closed = b.done
	b.w.init(cfg.KeepEnded)
	return b
}

var (
	_ backend.Backend         = (*Backend)(nil)
	_ backend.DeadLetterStore = (*Backend)(nil)
	_ backend.StatsReader     = (*Backend)(nil)
)

// message is a queued job. A message that could not be decoded carries decodeErr.
type message struct {
	env         backend.Envelope
	decodeErr   error
	redelivered bool
	// awaited are the results of the jobs it last waited for (nil if it never
	// waited): kept with the job until its final settle.
	awaited []backend.AwaitResult
}

// deadLetter is a dead-lettered message with why.
type deadLetter struct {
	m      *message
	reason string
	at     time.Time
}

// queue is one declared queue: its ready messages and streams (the stream core's
// Queue), and beside them what only this backend keeps, guarded by the Queue's lock.
type queue struct {
	*stream.Queue[*message]
	name string

	held  map[*time.Timer]heldMessage // delayed or deferred messages
	acked int
	// cancelled counts the deliveries settled as cancelled (also in acked).
	cancelled int
	dead      []deadLetter
	// ids counts the messages the queue holds per job id: ready, delayed, deferred or
	// taken and not settled. A publish of an id it holds is a repeat, and is dropped.
	ids map[string]int
	// uniq maps the unique keys the queue holds to their entries; uniqByID maps the
	// ids of unfinished jobs that hold a key to theirs; uniqKept is how many entries
	// the last sweep of expired keys kept.
	uniq     map[string]*uniqEntry
	uniqByID map[string]*uniqEntry
	uniqKept int
	// waiting counts the jobs that wait for other jobs to end and will run on this
	// queue; each is counted in ids too, but holds no place in its key's line.
	waiting int
}

// Declare creates the queue q.Name if it does not exist. Declaring it again with the
// same priority levels changes nothing; declaring it with other priority levels fails
// with an error that names both and leaves the queue as it was, as RabbitMQ refuses a
// queue redeclared with other arguments (the prefetch is a stream's, never a conflict).
func (b *Backend) Declare(ctx context.Context, q backend.QueueConfig) error {
	if err := backend.ValidateQueueName(q.Name); err != nil {
		return err
	}
	q = q.Normalize(b.log)
	b.queues.Lock()
	defer b.queues.Unlock()
	if b.queues.ClosedLocked() {
		return backend.ErrShutDown
	}
	if have, ok := b.queues.GetLocked(q.Name); ok {
		if have.Levels() != q.PriorityLevels {
			return fmt.Errorf("queue %q exists with %d priority levels, not the %d wanted: it keeps its first declaration", q.Name, have.Levels(), q.PriorityLevels)
		}
		have.SetKeyLimit(q.KeyConcurrency)
		return nil
	}
	nq := &queue{
		Queue:    stream.NewQueue[*message](q.PriorityLevels),
		name:     q.Name,
		held:     make(map[*time.Timer]heldMessage),
		ids:      make(map[string]int),
		uniq:     make(map[string]*uniqEntry),
		uniqByID: make(map[string]*uniqEntry),
	}
	nq.SetKeyLimit(q.KeyConcurrency)
	b.queues.PutLocked(q.Name, nq)
	return nil
}

// Publish puts env on env.Queue, after delay rounded up to the granularity. A repeat,
// an env whose ID the queue still holds (ready, delayed, deferred, or delivered and not
// settled), is dropped and reports success, as the contract asks of a backend that
// knows ids.
func (b *Backend) Publish(ctx context.Context, env backend.Envelope, delay time.Duration) error {
	return b.enqueue(&message{env: env.Clone()}, delay, false, true)
}

// Defer holds env for delay rounded up to the granularity, then puts it on env.Queue.
// A repeat is dropped, as by Publish.
func (b *Backend) Defer(ctx context.Context, env backend.Envelope, delay time.Duration) error {
	return b.enqueue(&message{env: env.Clone()}, delay, true, true)
}

// InjectMalformed puts on queue a message that cannot be decoded: its delivery's
// Envelope returns an error wrapping backend.ErrMalformed with problem, and an envelope
// holding a fresh ID, the queue and raw as payload. It stands for what a foreign
// publisher can put on a broker's queue.
func (b *Backend) InjectMalformed(ctx context.Context, queue string, raw []byte, problem string) error {
	env := backend.Envelope{ID: backend.NewID(), Queue: queue, Payload: slices.Clone(raw)}
	return b.enqueue(&message{env: env, decodeErr: fmt.Errorf("%w: %s", backend.ErrMalformed, problem)}, 0, false, false)
}

// enqueue puts m on its queue, or holds it for delay. With dropRepeat, a message whose
// id the queue holds is dropped: a settle's republish of its own job passes false.
func (b *Backend) enqueue(m *message, delay time.Duration, deferred, dropRepeat bool) error {
	if !dropRepeat {
		return b.enqueueIf(m, delay, deferred, nil)
	}
	return b.enqueueIf(m, delay, deferred, func(*queue) bool { return true })
}

// enqueueIf is enqueue that asks admit, under the queue's lock, whether to queue m: a
// repeat (admit is not nil and the queue holds m's id) and a message admit refuses
// are dropped. A nil admit queues every message, repeats too.
func (b *Backend) enqueueIf(m *message, delay time.Duration, deferred bool, admit func(*queue) bool) error {
	dropRepeat := admit != nil
	q, err := b.queues.Lookup(m.env.Queue)
	if err != nil {
		return err
	}
	m.env.Redelivered = false
	if err := backend.CheckDelay(delay, backend.MaxDelay); err != nil {
		return fmt.Errorf("job %s for queue %q: %w", m.env.ID, m.env.Queue, err)
	}
	delay = backend.RoundUp(delay, b.granularity)
	q.Lock()
	defer q.Unlock()
	if dropRepeat && m.env.ID != "" && q.ids[m.env.ID] > 0 {
		b.log.Debug("repeat publish dropped: the queue holds the job", "queue", q.name, "job", m.env.ID)
		return nil
	}
	if admit != nil && !admit(q) {
		return nil
	}
	q.put(m, delay, deferred)
	return nil
}

// put holds m on the queue: ready now, or after delay (already checked and rounded).
// the queue's lock is held.
func (q *queue) put(m *message, delay time.Duration, deferred bool) {
	q.hold(m)
	if delay == 0 {
		q.PushBack(m)
		return
	}
	var t *time.Timer
	t = time.AfterFunc(delay, func() {
		q.Lock()
		defer q.Unlock()
		if _, ok := q.held[t]; !ok {
			return // stopped and removed: by Close, or a cancel, retry or delete of the job
		}
		delete(q.held, t)
		q.PushBack(m)
	})
	q.held[t] = heldMessage{m: m, deferred: deferred}
}

// heldMessage is a delayed or deferred message, waiting for its timer.
type heldMessage struct {
	m        *message
	deferred bool
}

// hold counts m among the messages the queue holds, and gives a job of a concurrency
// key its place in the key's line; release, when it leaves: once the queue holds the
// job no more (a retry holds its next attempt before its delivery is released), its
// place is freed.
func (q *queue) hold(m *message) {
	q.ids[m.env.ID]++
	q.JoinKey(m.env.Key, m.env.ID)
}

func (q *queue) release(m *message) {
	if q.ids[m.env.ID]--; q.ids[m.env.ID] <= 0 {
		delete(q.ids, m.env.ID)
		q.LeaveKey(m.env.ID)
	}
}

// waitJoin counts the job id as held by the queue while it waits for other jobs: a
// repeat publish of it is dropped, and it takes no place in its key's line until it
// is put on the queue; waitLeave, when it stops waiting. The queue's lock is held.
func (q *queue) waitJoin(id string) {
	q.ids[id]++
	q.waiting++
}

func (q *queue) waitLeave(id string) {
	if q.ids[id]--; q.ids[id] <= 0 {
		delete(q.ids, id)
	}
	q.waiting--
}

// Consume starts a stream of the declared queue q.Name with prefetch q.Prefetch.
func (b *Backend) Consume(ctx context.Context, qc backend.QueueConfig) (backend.Stream, error) {
	qc = qc.Normalize(b.log)
	q, err := b.queues.Lookup(qc.Name)
	if err != nil {
		return nil, err
	}
	return b.streams.Consume(ctx, q.Queue, qc.Prefetch, func(c *stream.Claim[*message]) (backend.Delivery, error) { return b.deliver(q, c) })
}

// Close ends every stream and drops everything queued or held. It waits for the
// streams to end, or for ctx.
func (b *Backend) Close(ctx context.Context) error {
	b.w.stopTimers()
	b.queues.Lock()
	if b.queues.CloseLocked() {
		close(b.done)
		b.streams.Close()
		for q := range b.queues.AllLocked() {
			q.Lock()
			for t := range q.held {
				t.Stop()
			}
			clear(q.held)
			q.Unlock()
		}
	}
	b.queues.Unlock()
	if err := b.streams.Wait(ctx); err != nil {
		return fmt.Errorf("memory backend close: %w", err)
	}
	return nil
}

// QueueStats counts a queue's messages by state.
type QueueStats struct {
	// Pending messages are ready to be delivered, or offered by a stream to a consumer
	// that has not taken them yet.
	Pending int
	// Unacked deliveries were taken by a consumer and are not settled yet.
	Unacked int
	// Delayed messages were published with a delay that has not passed.
	Delayed int
	// Deferred messages are held by Defer and not released yet.
	Deferred int
	// KeyWaiting messages are ready but wait for their concurrency key: as many jobs
	// of their key as QueueConfig.KeyConcurrency lets run are ahead of them. They are
	// not counted in Pending.
	KeyWaiting int
	// Acked counts every acknowledged delivery since the queue was declared, including
	// those settled by Retry and Defer (which acknowledge after republishing).
	Acked int
	// Cancelled counts the deliveries settled as cancelled (Delivery.Cancel) since the
	// queue was declared; they are counted in Acked as well.
	Cancelled int
	// Dead counts the queue's dead letters.
	Dead int
	// Waiting jobs wait for other jobs to end before they are put on this queue (or
	// back on it, for a parent waiting for its children).
	Waiting int
}

// Stats counts the messages of the declared queue by state.
func (b *Backend) Stats(queue string) (QueueStats, error) {
	q, err := b.queues.Lookup(queue)
	if err != nil {
		return QueueStats{}, err
	}
	q.Lock()
	defer q.Unlock()
	pending, unacked := q.Counts()
	st := QueueStats{Pending: pending, Unacked: unacked, KeyWaiting: q.KeyWaiting(), Acked: q.acked, Cancelled: q.cancelled, Dead: len(q.dead), Waiting: q.waiting}
	for _, h := range q.held {
		if h.deferred {
			st.Deferred++
		} else {
			st.Delayed++
		}
	}
	return st, nil
}

// QueueStats implements backend.StatsReader.
func (b *Backend) QueueStats(ctx context.Context, queue string) (backend.QueueStats, error) {
	st, err := b.Stats(queue)
	if err != nil {
		return backend.QueueStats{}, err
	}
	return backend.QueueStats{Pending: st.Pending, Unacked: st.Unacked, Delayed: st.Delayed, Deferred: st.Deferred, Dead: st.Dead, KeyWaiting: st.KeyWaiting, Waiting: st.Waiting}, nil
}

// Pending returns the ready messages of the declared queue in the order they would be
// delivered, then those waiting for their concurrency key (each key's in enqueue
// order, the keys in no set order). Malformed messages appear
// with what could be read.
func (b *Backend) Pending(queue string) ([]backend.Envelope, error) {
	q, err := b.queues.Lookup(queue)
	if err != nil {
		return nil, err
	}
	q.Lock()
	defer q.Unlock()
	out := make([]backend.Envelope, 0, q.Ready()+q.KeyWaiting())
	for m := range q.InOrder() {
		out = append(out, m.env.Clone())
	}
	return out, nil
}

// DeadLetters lists up to limit dead letters of the declared queue, oldest first;
// limit <= 0 lists all.
func (b *Backend) DeadLetters(ctx context.Context, queue string, limit int) ([]backend.DeadLetter, error) {
	q, err := b.queues.Lookup(queue)
	if err != nil {
		return nil, err
	}
	q.Lock()
	defer q.Unlock()
	n := len(q.dead)
	if limit > 0 && limit < n {
		n = limit
	}
	out := make([]backend.DeadLetter, n)
	for i := range n {
		d := q.dead[i]
		out[i] = backend.DeadLetter{Envelope: d.m.env.Clone(), Reason: d.reason, At: d.at}
	}
	return out, nil
}

// ReplayDeadLetter puts the dead letter with job id id back on its queue as a fresh
// job: attempt 1, no reason, no defers, one replay more (backend.Replayed).
func (b *Backend) ReplayDeadLetter(ctx context.Context, queue, id string) error {
	q, err := b.queues.Lookup(queue)
	if err != nil {
		return err
	}
	q.Lock()
	defer q.Unlock()
	i := slices.IndexFunc(q.dead, func(d deadLetter) bool { return d.m.env.ID == id })
	if i < 0 {
		return fmt.Errorf("dead letter %q of queue %q: %w", id, queue, backend.ErrNotFound)
	}
	m := &message{env: q.dead[i].m.env, decodeErr: q.dead[i].m.decodeErr}
	q.dead = slices.Delete(q.dead, i, i+1)
	backend.Replayed(ctx, &m.env)
	q.hold(m)
	q.PushBack(m)
	return nil
}

// PurgeDeadLetters deletes the dead letters of the declared queue.
func (b *Backend) PurgeDeadLetters(ctx context.Context, queue string) (int, error) {
	q, err := b.queues.Lookup(queue)
	if err != nil {
		return 0, err
	}
	q.Lock()
	defer q.Unlock()
	n := len(q.dead)
	q.dead = nil
	return n, nil
}
