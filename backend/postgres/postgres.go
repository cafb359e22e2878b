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
// A job's row is its record too (backend.JobRecordReader, JobLister, JobController,
// JobEnvelopeReader): a settle writes the run into the row it settles, in the same
// statement, and a finished job's row stays, finished, until retention prunes it
// (Config.Records) by the database's clock; every host prunes, each skipping the rows
// another is deleting.
//
// Unique keys (backend.UniquePublisher) are rows of their own, taken by their primary
// key in the publish's transaction, so that they hold exactly across hosts; a trigger
// ends a key's hold in the transaction of whatever statement finishes or deletes its
// job.
//
// This backend implements the contract, priorities (backend.CapPriority), batch
// publishes, atomic and cancellable settles, job records, listing and control, unique
// keys, dead letters and stats. It lacks, for now, concurrency keys, schedules, and
// jobs that wait for other jobs.
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
	"sync/atomic"
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
	// NoMigrate makes Open refuse a schema older than this binary's (ErrSchemaTooOld)
	// instead of migrating it, for operators who apply migrations by hand (Migrate).
	NoMigrate bool
	// Records configures the job records: a job's row stays, finished, as its record
	// after it succeeded, died or was cancelled, until retention prunes it, oldest
	// first, past Records.MaxCount or Records.MaxAge (a negative MaxCount keeps none:
	// an ack deletes its row, and the other finished rows go at the next prune).
	// Zero fields mean backend's defaults.
	Records backend.RecordConfig
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

	caps       backend.RecordCaps // what a record keeps of a run
	maxCount   int                // finished records kept; 0: none (acks delete their rows)
	maxAge     time.Duration      // how long a finished record is kept; 0: regardless of age
	pruneEvery time.Duration      // how often finished records are pruned
	pruned     atomic.Uint64      // records and unique keys pruned since Open

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

// Open connects to the database at cfg.URL, migrates the schema (unless
// cfg.NoMigrate) and starts the listener. It fails when the URL is unusable, the
// database unreachable within ctx, or the schema newer than this binary's
// (ErrSchemaTooNew), or with NoMigrate older (ErrSchemaTooOld).
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
	// Hash and merge joins likewise: every join of this backend is of a few ids (a
	// batch, a claim, a page) with a table through its index, but the planner, told
	// that a batch publish's array holds 5,000 ids, would hash the whole jobs table to
	// meet them (a second a batch at 200,000 records kept).
	var sets []string
	for _, p := range []string{"enable_bitmapscan", "enable_hashjoin", "enable_mergejoin"} {
		if _, set := pc.ConnConfig.RuntimeParams[p]; !set && !strings.Contains(cfg.URL, p) {
			sets = append(sets, `SET `+p+` = off`)
		}
	}
	if len(sets) > 0 {
		sql := strings.Join(sets, "; ")
		pc.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
			_, err := c.Exec(ctx, sql)
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
	if err := migrate(ctx, pool, cfg.Schema, cfg.NoMigrate); err != nil {
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
		caps:    cfg.Records.Caps(),
	}
	b.maxCount, b.maxAge, b.pruneEvery = cfg.Records.Retention()
	b.wg.Add(2)
	go b.listen(live, lc)
	go b.pruneLoop(live)
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

// insertColumns are the columns an insert of a job writes.
const insertColumns = `queue, id, state, priority, due_at, deferred, payload, headers, attempt, max_attempts,
	defers, enqueued_at, reason, key, round, status, holds_key`

// sourceColumns are the columns of the jobs an upsert puts (its CTE t), in a jobRow's
// args' order, then the row's place in the input (ord) and whether it takes a unique
// key (hk).
const sourceColumns = `q, i, p, d, df, pl, h, a, ma, de, e, r, k, ro, ord, hk`

// oneSource is the source of an upsert of one job from a jobRow's args ($1-$14), from
// rel (a CTE of one row, or "" for none) and taking a unique key where hk says so.
func oneSource(rel, hk string) string {
	from := ``
	if rel != "" {
		from = ` FROM ` + rel
	}
	return `SELECT $1::text, $2::text, $3::smallint, $4::bigint, $5::boolean, $6::bytea, $7::jsonb,
		$8::int, $9::int, $10::int, $11::bigint, $12::text, $13::text, $14::int, 1::bigint, ` + hk + from
}

// manySource is the source of an upsert of many jobs from their rows' columns (an
// array a column, from $p on), if cond holds: a batch of thousands costs one
// statement's parse and plan, not thousands. With keys, a 15th array says which take
// a unique key.
func manySource(p int, cond string, keys bool) string {
	n, hk := 14, `false`
	if keys {
		n, hk = 15, `hk`
	}
	ps := make([]any, n)
	for i := range ps {
		ps[i] = p + i
	}
	if cond == "" {
		cond = "true"
	}
	arrays := fmt.Sprintf(`$%d::text[], $%d::text[], $%d::smallint[], $%d::bigint[], $%d::boolean[], $%d::bytea[], $%d::text[],
		$%d::int[], $%d::int[], $%d::int[], $%d::bigint[], $%d::text[], $%d::text[], $%d::int[]`, ps[:14]...)
	cols := `q, i, p, d, df, pl, h, a, ma, de, e, r, k, ro`
	if keys {
		arrays += fmt.Sprintf(`, $%d::boolean[]`, ps[14])
		cols += `, hk`
	}
	return `SELECT q, i, p, d, df, pl, h, a, ma, de, e, r, k, ro, ord, ` + hk + `
		FROM unnest(` + arrays + `) WITH ORDINALITY AS u(` + cols + `, ord) WHERE ` + cond
}

// upsert is the common table expressions that put the jobs of source (a query of
// sourceColumns) on their queues: t, the source; old, the finished rows (records) of
// their ids, locked; ins, the new ids, inserted; rev, the records revived as the new
// jobs (keeping their attempts when keep says so: a replayed dead letter lists its
// runs). A repeat of an id the queue holds live is dropped: found in the statement's
// snapshot (a lookup a row, on the (queue, id) index, whatever the planner thinks of
// the table), it is left out of the insert, so that the publish neither locks nor waits
// for that row (a renewal or settle may hold it); only a live row committed after the
// snapshot and being changed at that moment makes the insert's conflict check wait
// for that change. The records are locked before the insert runs (ins reads old), so
// that a prune cannot delete one between the insert finding it and its revival (the
// prune skips locked rows), in seq order, so that two publishes locking the same
// records never deadlock; a record another publish revives meanwhile stays locked by
// this one (a row lock outlives the re-check it failed) until this statement's
// transaction ends, a moment for a publish. Two publishes inserting the same new ids in other orders
// can deadlock; the database then fails one, which did nothing, and its caller tries
// again (retryable). The source's ids must be distinct. A statement built on it counts
// the jobs put as (SELECT count(*) FROM ins) + (SELECT count(*) FROM rev).
func (b *Backend) upsert(source string, keep bool) string {
	attempts := `NULL`
	if keep {
		attempts = `j.attempts`
	}
	return `t (` + sourceColumns + `) AS (` + source + `),
	old AS (
		SELECT j.seq, t.* FROM ` + b.s + `.jobs j JOIN t ON j.queue = t.q AND j.id = t.i
		WHERE j.state = 3 ORDER BY j.seq FOR UPDATE OF j),
	ins AS (
		INSERT INTO ` + b.s + `.jobs AS j (` + insertColumns + `)
		SELECT q, i, ` + newState(`d`) + `, p, now() + d * interval '1 microsecond',
			df, pl, h::jsonb, a, ma, de, e, r, k, ro, ` + newStatus(`d`, `df`) + `, hk
		FROM t WHERE ord NOT IN (SELECT ord FROM old)
			AND coalesce((SELECT x.state FROM ` + b.s + `.jobs x WHERE x.queue = t.q AND x.id = t.i), 3) = 3
		ORDER BY ord
		ON CONFLICT (queue, id) DO NOTHING RETURNING queue, id),
	rev AS (
		UPDATE ` + b.s + `.jobs j SET state = ` + newState(`o.d`) + `, priority = o.p,
			due_at = now() + o.d * interval '1 microsecond', deferred = o.df, redelivered = false, rescues = 0,
			claim_token = NULL, claimed_by = NULL, lease_until = NULL, payload = o.pl, headers = o.h::jsonb,
			attempt = o.a, max_attempts = o.ma, defers = o.de, enqueued_at = o.e, reason = o.r, key = o.k,
			round = o.ro, status = ` + newStatus(`o.d`, `o.df`) + `, outcome = NULL, output = NULL,
			output_truncated = false, logs = NULL, logs_truncated = false, module = NULL, module_version = NULL,
			module_role = NULL, started_at = NULL, finished_at = NULL, updated_at = now(), children = NULL,
			holds_key = o.hk, attempts = ` + attempts + `
		FROM old o WHERE j.seq = o.seq RETURNING j.queue, j.id)`
}

// putCount is the tail of a statement built on upsert: how many jobs it put.
const putCount = ` SELECT (SELECT count(*) FROM ins) + (SELECT count(*) FROM rev)`

// newState and newStatus are the state and the record's state of a job inserted due
// after d microseconds, deferred or not.
func newState(d string) string { return `CASE WHEN ` + d + ` > 0 THEN 2 ELSE 0 END` }
func newStatus(d, df string) string {
	return `CASE WHEN ` + d + ` > 0 AND ` + df + ` THEN 'deferred' WHEN ` + d + ` > 0 THEN 'delayed' ELSE 'pending' END`
}

// insertJob is the statement that puts one job on its queue and counts it (0 for a
// repeat of an id the queue holds live); its arguments are a jobRow's args.
func (b *Backend) insertJob(keep bool) string {
	return `WITH ` + b.upsert(oneSource("", "false"), keep) + putCount
}

// insertJobs is insertJob for many jobs, its arguments their rows' columns.
func (b *Backend) insertJobs() string {
	return `WITH ` + b.upsert(manySource(1, "", false), false) + putCount
}

// publish inserts pubs in one transaction and notifies their queues.
func (b *Backend) publish(ctx context.Context, pubs []backend.Publication, deferred bool) error {
	if len(pubs) == 0 {
		return nil
	}
	rows, queues, err := b.jobRows(ctx, pubs, deferred)
	if err != nil {
		return err
	}
	sql, args := b.insertJob(false), []any(nil)
	if len(rows) == 1 {
		args = rows[0].args()
	} else {
		cols, err := columns(rows)
		if err != nil {
			return err
		}
		sql, args = b.insertJobs(), cols
	}
	// A batch outside a transaction runs in one implicit transaction: all or nothing. A
	// deadlock with another publish of the same new ids did nothing: tried again, twice,
	// each try a batch of its own (a batch remembers the connection it was prepared on).
	for try := 1; ; try++ {
		batch := &pgx.Batch{}
		batch.Queue(sql, args...)
		for q := range queues {
			batch.Queue(`SELECT pg_notify($1, $2)`, b.channel, q)
		}
		err := b.pool.SendBatch(ctx, batch).Close()
		if try < 3 && retryable(err) {
			continue
		}
		if err != nil {
			return b.transport("publish", pubs[0].Envelope.Queue, err)
		}
		return nil
	}
}

// QueueStats counts the queue's jobs by state, by the database's clock.
func (b *Backend) QueueStats(ctx context.Context, queue string) (backend.QueueStats, error) {
	if _, err := b.queueLevels(ctx, queue); err != nil {
		return backend.QueueStats{}, err
	}
	var st backend.QueueStats
	// One count a state, each on its state's index: the finished rows (the records)
	// are never walked.
	err := b.pool.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM `+b.s+`.jobs WHERE queue = $1 AND state = 0)
				+ (SELECT count(*) FROM `+b.s+`.jobs WHERE queue = $1 AND state = 2 AND due_at <= now()),
			(SELECT count(*) FROM `+b.s+`.jobs WHERE queue = $1 AND state = 1),
			(SELECT count(*) FROM `+b.s+`.jobs WHERE queue = $1 AND state = 2 AND due_at > now() AND NOT deferred),
			(SELECT count(*) FROM `+b.s+`.jobs WHERE queue = $1 AND state = 2 AND due_at > now() AND deferred),
			(SELECT count(*) FROM `+b.s+`.dead WHERE queue = $1)`, queue).Scan(&st.Pending, &st.Unacked, &st.Delayed, &st.Deferred, &st.Dead)
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
