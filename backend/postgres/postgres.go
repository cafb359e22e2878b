// Package postgres owns the PostgreSQL backend: queues in tables that several hosts
// share, so that a fleet on one database hands each job to one host at a time.
//
// Each job is a row. A host claims ready rows with FOR UPDATE SKIP LOCKED, each claim
// carrying a lease (Config.Lease) and a claim token; the host renews the leases of the
// claims it holds, and every settle names its claim token, so that a claim that lapsed
// (a host dead or cut off for longer than the lease) and was taken by another host can
// never be settled by the first: the settle is refused with backend.ErrStreamClosed.
// Rescue needs no leader: every host's streams put back the claims whose lease expired,
// marked redelivered, at the attempt they had, and a job rescued Config.MaxRescues times
// (a handler that kills its host each time) goes to the dead letters, saying so.
//
// Due times come from the database's clock, never the hosts'. A publish notifies the
// queue's streams on every host through LISTEN/NOTIFY (the payload is the queue's name);
// polling every Config.Poll is the fallback, and after every reconnect of the listener
// every stream looks again at once, since a notification sent while it was away is lost.
//
// The tables live in a schema of their own (Config.Schema), migrated at Open under an
// advisory lock; a schema newer than the binary is refused (ErrSchemaTooNew).
//
// This backend implements the contract, priorities (backend.CapPriority), batch
// publishes, dead letters and stats. It lacks, for now, what the embedded backend keeps
// beside the queues: job records, listing and control, unique keys, concurrency keys,
// schedules, and jobs that wait for other jobs.
package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/wasmjobs/wasmjobs/backend"
)

// Defaults of Config.
const (
	// DefaultSchema is the schema of the tables when Config.Schema is empty.
	DefaultSchema = "wasmjobs"
	// DefaultLease is how long a claim lasts without renewal when Config.Lease is zero:
	// a job of a host that died is rescued within it and a poll, by a host consuming its
	// queue.
	DefaultLease = 30 * time.Second
	// DefaultPoll is how often a stream looks at its queue with no notification, when
	// Config.Poll is zero: the bound on a job's wait when notifications are lost.
	DefaultPoll = time.Second
	// DefaultMaxRescues is how many times a job may be rescued from a lapsed claim
	// before it is dead-lettered, when Config.MaxRescues is zero.
	DefaultMaxRescues = 5
)

// granularity is the delays' unit: they are rounded up to whole milliseconds.
const granularity = time.Millisecond

// Config configures a Backend. Only URL is required.
type Config struct {
	// URL is the database's connection string, as pgx takes it:
	// postgres://user:pass@host:5432/db?sslmode=... or key=value pairs.
	URL string
	// Schema holds the backend's tables: a lowercase identifier. Empty means
	// DefaultSchema.
	Schema string
	// Lease is how long a claim lasts without renewal; hosts renew theirs every sixth
	// of it. Zero means DefaultLease.
	Lease time.Duration
	// Poll is how often a stream looks at its queue without a notification. Zero
	// means DefaultPoll.
	Poll time.Duration
	// MaxRescues bounds the rescues of one job from lapsed claims; the next lapse
	// dead-letters it. Zero means DefaultMaxRescues.
	MaxRescues int
	// Host names this backend in the claims it holds, for an operator reading the
	// table. Empty means the hostname and the process id.
	Host string
	// Logger receives the backend's warnings. Nil discards them.
	Logger *slog.Logger
}

// Backend is a backend.Backend on PostgreSQL. Open makes one.
type Backend struct {
	cfg     Config
	log     *slog.Logger
	pool    *pgxpool.Pool
	s       string // the quoted schema name, for statements
	channel string // the LISTEN/NOTIFY channel of the schema

	acks acks // the acknowledgements' batches

	mu      sync.Mutex
	levels  map[string]int // declared queues seen, by name: their priority levels
	streams map[string]map[*stream]struct{}
	closed  bool
	done    chan struct{}      // closed by Close
	wg      sync.WaitGroup     // the streams, the listener and background releases
	bg      context.Context    // of the streams' releases: ends when Close gives up waiting
	stopBg  context.CancelFunc // ends bg
	live    context.Context    // ends when Close begins: the listener and the streams' own calls
	endLive context.CancelFunc // ends live
}

var (
	_ backend.Backend            = (*Backend)(nil)
	_ backend.BatchPublisher     = (*Backend)(nil)
	_ backend.DeadLetterStore    = (*Backend)(nil)
	_ backend.StatsReader        = (*Backend)(nil)
	_ backend.CapabilityReporter = (*Backend)(nil)
)

// Open connects to the database at cfg.URL, migrates the schema and starts the
// listener. It fails when the URL is unusable, the database unreachable within ctx, or
// the schema newer than this binary's (ErrSchemaTooNew).
func Open(ctx context.Context, cfg Config) (*Backend, error) {
	cfg.Schema = cmp.Or(cfg.Schema, DefaultSchema)
	if err := CheckSchema(cfg.Schema); err != nil {
		return nil, err
	}
	cfg.Lease = cmp.Or(cfg.Lease, DefaultLease)
	cfg.Poll = cmp.Or(cfg.Poll, DefaultPoll)
	cfg.MaxRescues = cmp.Or(cfg.MaxRescues, DefaultMaxRescues)
	if cfg.Lease < time.Second || cfg.Poll < granularity || cfg.MaxRescues < 0 {
		return nil, fmt.Errorf("postgres: lease %v, poll %v, max rescues %d: want a lease of at least 1s, a poll of at least 1ms, rescues of at least 0", cfg.Lease, cfg.Poll, cfg.MaxRescues)
	}
	if cfg.Host == "" {
		h, _ := os.Hostname()
		cfg.Host = fmt.Sprintf("%s-%d", cmp.Or(h, "host"), os.Getpid())
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	pc, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("postgres: the database URL: %w", err)
	}
	// Renewals wait for a connection behind publishes and settles, and a renewal that
	// waits too long ends its stream: at least 8, unless the URL says (pool_max_conns).
	if !strings.Contains(cfg.URL, "pool_max_conns") {
		pc.MaxConns = max(pc.MaxConns, 8)
	}
	// The claim must walk the ready index in its order and stop at its LIMIT. A table
	// that grew faster than autovacuum analyzes it looks tiny to the planner, which may
	// then pick a bitmap scan of every ready row and a sort, and keep picking it: a run
	// of 200,000 jobs at c=64 went at 3,800-4,800 jobs/s so and at 10,000-13,000 with
	// bitmap scans off. No statement of this backend wants one, so its sessions (only
	// they) go without, unless the URL's options say otherwise.
	// Set after connecting, not as a startup parameter, which a pooler such as
	// PgBouncer would refuse.
	if _, set := pc.ConnConfig.RuntimeParams["enable_bitmapscan"]; !set && !strings.Contains(cfg.URL, "enable_bitmapscan") {
		pc.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
			_, err := c.Exec(ctx, `SET enable_bitmapscan = off`)
			return err
		}
	}
	// The listener's connection keeps pgx's own handling: a wait for a notification is
	// no query that a cancel request could end, and its connection just closes.
	lc := pc.ConnConfig.Copy()
	// A call whose context ends is cancelled on the server too (a cancel request), not
	// only dropped by the client: a settle given up on must not land later, and a
	// cancelled wait must not hold its locks on. A server that does not answer the
	// cancel within 100 ms loses the connection instead: a call past its context costs
	// at most that.
	pc.ConnConfig.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: c, DeadlineDelay: 100 * time.Millisecond}
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, &backend.TransportError{Op: "connect", Err: err}
	}
	if err := migrate(ctx, pool, cfg.Schema); err != nil {
		pool.Close()
		return nil, err
	}
	bg, stopBg := context.WithCancel(context.WithoutCancel(ctx))
	live, endLive := context.WithCancel(bg)
	b := &Backend{
		cfg:     cfg,
		log:     log,
		pool:    pool,
		s:       pgx.Identifier{cfg.Schema}.Sanitize(),
		channel: "wasmjobs." + cfg.Schema,
		levels:  make(map[string]int),
		streams: make(map[string]map[*stream]struct{}),
		done:    make(chan struct{}),
		bg:      bg,
		stopBg:  stopBg,
		live:    live,
		endLive: endLive,
	}
	b.wg.Add(1)
	go b.listen(live, lc)
	return b, nil
}

// IsURL reports whether spec is a PostgreSQL connection URL (postgres:// or
// postgresql://): how a host's --backend names a database.
func IsURL(spec string) bool {
	return strings.HasPrefix(spec, "postgres://") || strings.HasPrefix(spec, "postgresql://")
}

// CheckSchema reports whether name can be Config.Schema, and if not, why.
func CheckSchema(name string) error {
	if !schemaPattern.MatchString(name) {
		return fmt.Errorf("postgres: schema %q: want a lowercase identifier (letters, digits, '_'; at most 54, so that its notification channel fits PostgreSQL's 63)", name)
	}
	return nil
}

// Capabilities reports priorities; bounds per concurrency key are not kept yet.
func (b *Backend) Capabilities() backend.Capabilities { return backend.CapPriority }

// isClosed reports whether Close has begun.
func (b *Backend) isClosed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closed
}

// transport wraps err, a failure of a call to the database, unless the backend has
// closed meanwhile, which is what the caller then learns.
func (b *Backend) transport(op, queue string, err error) error {
	if b.isClosed() {
		return backend.ErrShutDown
	}
	return &backend.TransportError{Op: op, Queue: queue, Err: err}
}

// Declare creates the queue, or checks that its priority levels are those it was
// first declared with: a queue keeps its first declaration's levels. A bound per
// concurrency key is refused: this backend does not keep one (yet).
func (b *Backend) Declare(ctx context.Context, q backend.QueueConfig) error {
	if err := backend.ValidateQueueName(q.Name); err != nil {
		return err
	}
	q = q.Normalize(b.log)
	if q.KeyConcurrency > 0 {
		return fmt.Errorf("queue %q: the postgres backend does not bound jobs per concurrency key (KeyConcurrency %d); use the embedded backend for that", q.Name, q.KeyConcurrency)
	}
	if b.isClosed() {
		return backend.ErrShutDown
	}
	var levels int
	err := b.pool.QueryRow(ctx, `INSERT INTO `+b.s+`.queues (name, priority_levels) VALUES ($1, $2)
		ON CONFLICT (name) DO UPDATE SET name = EXCLUDED.name RETURNING priority_levels`, q.Name, q.PriorityLevels).Scan(&levels)
	if err != nil {
		return b.transport("declare", q.Name, err)
	}
	if levels != q.PriorityLevels {
		return fmt.Errorf("queue %q exists with %d priority levels, not the %d wanted: it keeps its first declaration", q.Name, levels, q.PriorityLevels)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return backend.ErrShutDown
	}
	b.levels[q.Name] = levels
	return nil
}

// queueLevels returns the priority levels of the declared queue name, asking the
// database about a queue another host declared; an undeclared queue is
// backend.UnknownQueue's error.
func (b *Backend) queueLevels(ctx context.Context, name string) (int, error) {
	b.mu.Lock()
	levels, ok := b.levels[name]
	closed := b.closed
	b.mu.Unlock()
	if closed {
		return 0, backend.ErrShutDown
	}
	if ok {
		return levels, nil
	}
	err := b.pool.QueryRow(ctx, `SELECT priority_levels FROM `+b.s+`.queues WHERE name = $1`, name).Scan(&levels)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, backend.UnknownQueue(name)
	}
	if err != nil {
		return 0, b.transport("look up", name, err)
	}
	b.mu.Lock()
	b.levels[name] = levels
	b.mu.Unlock()
	return levels, nil
}

// Publish puts env on env.Queue, due after delay (rounded up to a millisecond) by the
// database's clock. A repeat of an id the queue still holds is dropped.
func (b *Backend) Publish(ctx context.Context, env backend.Envelope, delay time.Duration) error {
	return b.PublishBatch(ctx, []backend.Publication{{Envelope: env, Delay: delay}})
}

// Defer holds env for delay, then releases it onto env.Queue: a publish counted as
// deferred while it waits.
func (b *Backend) Defer(ctx context.Context, env backend.Envelope, delay time.Duration) error {
	return b.publish(ctx, []backend.Publication{{Envelope: env, Delay: delay}}, true)
}

// PublishBatch publishes every publication in one transaction, all or nothing.
func (b *Backend) PublishBatch(ctx context.Context, pubs []backend.Publication) error {
	return b.publish(ctx, pubs, false)
}

// insertJob is the statement that puts one job on its queue; its arguments are a
// jobRow's args. A repeat of an id the queue holds does nothing.
func (b *Backend) insertJob() string {
	return `INSERT INTO ` + b.s + `.jobs (queue, id, state, priority, due_at, deferred,
		payload, headers, attempt, max_attempts, defers, enqueued_at, reason, key, round)
		VALUES ($1, $2, CASE WHEN $4::bigint > 0 THEN 2 ELSE 0 END, $3, now() + $4::bigint * interval '1 microsecond',
			$5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
		ON CONFLICT (queue, id) DO NOTHING`
}

// insertJobs is insertJob for many jobs in one statement, its arguments their rows'
// columns (an array a column), so that a batch of thousands costs one statement's
// parse and plan, not thousands.
func (b *Backend) insertJobs() string {
	return `INSERT INTO ` + b.s + `.jobs (queue, id, state, priority, due_at, deferred,
		payload, headers, attempt, max_attempts, defers, enqueued_at, reason, key, round)
		SELECT q, i, CASE WHEN d > 0 THEN 2 ELSE 0 END, p, now() + d * interval '1 microsecond',
			df, pl, h::jsonb, a, ma, de, e, r, k, ro
		FROM unnest($1::text[], $2::text[], $3::smallint[], $4::bigint[], $5::boolean[], $6::bytea[], $7::text[],
			$8::int[], $9::int[], $10::int[], $11::bigint[], $12::text[], $13::text[], $14::int[])
			WITH ORDINALITY AS t(q, i, p, d, df, pl, h, a, ma, de, e, r, k, ro, ord)
		ORDER BY ord
		ON CONFLICT (queue, id) DO NOTHING`
}

// publish inserts pubs in one transaction and notifies their queues.
func (b *Backend) publish(ctx context.Context, pubs []backend.Publication, deferred bool) error {
	if len(pubs) == 0 {
		return nil
	}
	batch := &pgx.Batch{}
	queues := make(map[string]bool)
	rows := make([]jobRow, 0, len(pubs))
	for _, p := range pubs {
		if err := backend.CheckDelay(p.Delay, backend.MaxDelay); err != nil {
			return err
		}
		levels, err := b.queueLevels(ctx, p.Envelope.Queue)
		if err != nil {
			return err
		}
		rows = append(rows, newJobRow(p.Envelope, levels, p.Delay, deferred))
		queues[p.Envelope.Queue] = true
	}
	if len(rows) == 1 {
		batch.Queue(b.insertJob(), rows[0].args()...)
	} else {
		cols, err := columns(rows)
		if err != nil {
			return err
		}
		batch.Queue(b.insertJobs(), cols...)
	}
	for q := range queues {
		batch.Queue(`SELECT pg_notify($1, $2)`, b.channel, q)
	}
	// A batch outside a transaction runs in one implicit transaction: all or nothing.
	if err := b.pool.SendBatch(ctx, batch).Close(); err != nil {
		return b.transport("publish", pubs[0].Envelope.Queue, err)
	}
	return nil
}

// QueueStats counts the queue's jobs by state, by the database's clock.
func (b *Backend) QueueStats(ctx context.Context, queue string) (backend.QueueStats, error) {
	if _, err := b.queueLevels(ctx, queue); err != nil {
		return backend.QueueStats{}, err
	}
	var st backend.QueueStats
	err := b.pool.QueryRow(ctx, `SELECT
			count(*) FILTER (WHERE state = 0 OR (state = 2 AND due_at <= now())),
			count(*) FILTER (WHERE state = 1),
			count(*) FILTER (WHERE state = 2 AND due_at > now() AND NOT deferred),
			count(*) FILTER (WHERE state = 2 AND due_at > now() AND deferred),
			(SELECT count(*) FROM `+b.s+`.dead WHERE queue = $1)
		FROM `+b.s+`.jobs WHERE queue = $1`, queue).Scan(&st.Pending, &st.Unacked, &st.Delayed, &st.Deferred, &st.Dead)
	if err != nil {
		return backend.QueueStats{}, b.transport("stats", queue, err)
	}
	return st, nil
}

// Close ends every stream, putting back what they hold, stops the listener and closes
// the pool. It waits for them up to ctx. Close is idempotent.
func (b *Backend) Close(ctx context.Context) error {
	b.mu.Lock()
	first := !b.closed
	b.closed = true
	b.mu.Unlock()
	if first {
		close(b.done) // the streams end, putting back what they hold
		b.endLive()
	}
	finished := make(chan struct{})
	go func() {
		b.wg.Wait()
		close(finished)
	}()
	var err error
	select {
	case <-finished:
	case <-ctx.Done():
		err = fmt.Errorf("postgres: closing: waiting for the streams to put back their jobs: %w (their leases will)", ctx.Err())
		b.stopBg()
	}
	if first {
		<-finished // quick once bg has ended: every wait in them is under it
		b.stopBg()
		// The pool's Close waits for every connection in use to come back: a call
		// under a caller's context that does not end (a database that stopped
		// answering) would keep it. Past ctx, it finishes in the background.
		closed := make(chan struct{})
		go func() {
			b.pool.Close()
			close(closed)
		}()
		select {
		case <-closed:
		case <-ctx.Done():
			if err == nil {
				err = fmt.Errorf("postgres: closing: connections still in use: %w", ctx.Err())
			}
		}
	}
	return err
}
