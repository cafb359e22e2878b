package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/wasmjobs/wasmjobs/backend"
)

// ErrSchemaTooNew is returned by Open when the database's schema was migrated by a
// newer wasmjobs than this one: its tables may mean what this binary does not know.
var ErrSchemaTooNew = errors.New("the database's wasmjobs schema is newer than this binary")

// schemaPattern is what a schema name may be: a plain, unquoted PostgreSQL identifier,
// so that it reads the same in psql as here, short enough that "wasmjobs." and it fit
// a notification channel's 63 bytes.
var schemaPattern = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,53}$`)

// migrations are the schema's versions, in order: migrations[i] takes the schema from
// version i to i+1. {s} stands for the quoted schema name. A migration is never changed
// once released; a change is a new one.
//
// The jobs table holds every job the queues hold: waiting for its due time (state 2,
// due_at by the database's clock), ready (state 0, in the order priority, due_at, seq)
// or claimed (state 1) by a host until lease_until, under claim_token, which every
// settle names so that a claim that lapsed and was taken by another host cannot be
// settled by the first (fencing). Waiting and ready rows have indexes of their own, so
// that neither the claim nor the next due time ever scans past rows of the other kind
// (a queue's thousands of deferred jobs, say). enqueued_at is Unix nanoseconds:
// timestamptz keeps microseconds, and an envelope comes back exact.
var migrations = []string{
	`CREATE TABLE {s}.queues (
		name text PRIMARY KEY,
		priority_levels int NOT NULL,
		declared_at timestamptz NOT NULL DEFAULT now()
	);
	CREATE TABLE {s}.jobs (
		seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		queue text NOT NULL,
		id text NOT NULL,
		state smallint NOT NULL,
		priority smallint NOT NULL,
		due_at timestamptz NOT NULL,
		deferred boolean NOT NULL,
		redelivered boolean NOT NULL DEFAULT false,
		rescues int NOT NULL DEFAULT 0,
		claim_token bigint,
		claimed_by text,
		lease_until timestamptz,
		payload bytea NOT NULL,
		headers jsonb,
		attempt int NOT NULL,
		max_attempts int NOT NULL,
		defers int NOT NULL,
		enqueued_at bigint NOT NULL,
		reason text NOT NULL,
		key text NOT NULL,
		round int NOT NULL,
		UNIQUE (queue, id)
	);
	CREATE INDEX jobs_ready ON {s}.jobs (queue, priority DESC, due_at, seq) WHERE state = 0;
	CREATE INDEX jobs_waiting ON {s}.jobs (queue, due_at) WHERE state = 2;
	CREATE INDEX jobs_leases ON {s}.jobs (queue, lease_until) WHERE state = 1;
	CREATE TABLE {s}.dead (
		seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		queue text NOT NULL,
		id text NOT NULL,
		priority smallint NOT NULL,
		payload bytea NOT NULL,
		headers jsonb,
		attempt int NOT NULL,
		max_attempts int NOT NULL,
		defers int NOT NULL,
		enqueued_at bigint NOT NULL,
		reason text NOT NULL,
		key text NOT NULL,
		round int NOT NULL,
		dead_reason text NOT NULL,
		dead_at timestamptz NOT NULL DEFAULT now()
	);
	CREATE INDEX dead_by_queue ON {s}.dead (queue, seq);`,
	// Version 2: job records. A job's row is its record too: a settle that finishes
	// the job (an ack, a dead letter, a cancel) leaves the row in state 3, finished,
	// with what the run left, until retention prunes it, and a retry or defer writes the
	// run into the row it puts back. status is the record's state except running, which
	// is state 1; outcome is the record's reason where it is not the envelope's (a dead
	// letter's, a cancel's; "" for an ack). Ids compare byte-wise (COLLATE "C"), so
	// that a queue's listing walks its index newest first whatever the database's
	// locale.
	`ALTER TABLE {s}.jobs ALTER COLUMN id TYPE text COLLATE "C";
	ALTER TABLE {s}.dead ALTER COLUMN id TYPE text COLLATE "C";
	ALTER TABLE {s}.jobs
		ADD COLUMN status text NOT NULL DEFAULT 'pending',
		ADD COLUMN outcome text,
		ADD COLUMN output bytea,
		ADD COLUMN output_truncated boolean NOT NULL DEFAULT false,
		ADD COLUMN logs jsonb,
		ADD COLUMN logs_truncated boolean NOT NULL DEFAULT false,
		ADD COLUMN module text,
		ADD COLUMN module_version text,
		ADD COLUMN module_role text,
		ADD COLUMN started_at timestamptz,
		ADD COLUMN finished_at timestamptz,
		ADD COLUMN updated_at timestamptz NOT NULL DEFAULT now(),
		ADD COLUMN children text[],
		ADD COLUMN attempts jsonb;
	UPDATE {s}.jobs SET status = CASE
		WHEN state = 1 THEN 'pending'
		WHEN state = 2 AND deferred THEN 'deferred'
		WHEN attempt > 1 THEN 'retrying'
		WHEN state = 2 THEN 'delayed'
		ELSE 'pending' END;
	CREATE INDEX jobs_id ON {s}.jobs (id);
	CREATE INDEX jobs_finished ON {s}.jobs (updated_at, seq) WHERE state = 3;
	CREATE INDEX dead_id ON {s}.dead (id, seq);`,
	// Version 3: unique keys. A key of a queue is held by one job (job_queue, job_id)
	// while it lives (until NULL) and, once it finished, until its hold ends. A job
	// that holds a key says so (holds_key), so that the trigger, which ends the hold
	// whatever statement finishes or deletes the job (an ack, a batched ack, a dead
	// letter, a cancel, a crash loop's rescue, a delete), fires for those rows alone:
	// a finish starts the hold's clock, and so does the delete of a claimed job's row
	// (its ack, where no records are kept); the delete of a waiting job frees its key.
	// The trigger runs in the statement's transaction: a key and its job never disagree.
	`ALTER TABLE {s}.jobs ADD COLUMN holds_key boolean NOT NULL DEFAULT false;
	CREATE TABLE {s}.unique_keys (
		queue text NOT NULL,
		key text COLLATE "C" NOT NULL,
		job_queue text NOT NULL,
		job_id text COLLATE "C" NOT NULL,
		hold_us bigint NOT NULL,
		until timestamptz,
		PRIMARY KEY (queue, key)
	);
	CREATE INDEX unique_keys_job ON {s}.unique_keys (job_queue, job_id) WHERE until IS NULL;
	CREATE INDEX unique_keys_until ON {s}.unique_keys (until) WHERE until IS NOT NULL;
	CREATE FUNCTION {s}.unique_key_end() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
		IF TG_OP = 'DELETE' AND OLD.state <> 1 THEN
			DELETE FROM {s}.unique_keys WHERE job_queue = OLD.queue AND job_id = OLD.id AND until IS NULL;
		ELSE
			UPDATE {s}.unique_keys SET until = now() + hold_us * interval '1 microsecond'
				WHERE job_queue = OLD.queue AND job_id = OLD.id AND until IS NULL;
		END IF;
		RETURN NULL;
	END $$;
	CREATE TRIGGER jobs_unique_finish AFTER UPDATE OF state ON {s}.jobs FOR EACH ROW
		WHEN (NEW.state = 3 AND OLD.state <> 3 AND OLD.holds_key) EXECUTE FUNCTION {s}.unique_key_end();
	CREATE TRIGGER jobs_unique_delete AFTER DELETE ON {s}.jobs FOR EACH ROW
		WHEN (OLD.state <> 3 AND OLD.holds_key) EXECUTE FUNCTION {s}.unique_key_end();`,
}

// downs undo migrations: downs[i] takes the schema from version i+2 back to i+1. There
// is none below version 1: the first version is the tables themselves, which an
// operator drops with the schema (DROP SCHEMA ... CASCADE). Going down from version 2
// deletes the finished jobs' records, which version 1 cannot hold.
var downs = []string{
	`DROP INDEX IF EXISTS {s}.jobs_id, {s}.jobs_finished, {s}.dead_id;
	DELETE FROM {s}.jobs WHERE state = 3;
	ALTER TABLE {s}.jobs
		DROP COLUMN status, DROP COLUMN outcome, DROP COLUMN output, DROP COLUMN output_truncated,
		DROP COLUMN logs, DROP COLUMN logs_truncated, DROP COLUMN module, DROP COLUMN module_version,
		DROP COLUMN module_role, DROP COLUMN started_at, DROP COLUMN finished_at, DROP COLUMN updated_at,
		DROP COLUMN children, DROP COLUMN attempts;
	ALTER TABLE {s}.jobs ALTER COLUMN id TYPE text COLLATE "default";
	ALTER TABLE {s}.dead ALTER COLUMN id TYPE text COLLATE "default";`,
	`DROP TRIGGER jobs_unique_finish ON {s}.jobs;
	DROP TRIGGER jobs_unique_delete ON {s}.jobs;
	DROP FUNCTION {s}.unique_key_end();
	DROP TABLE {s}.unique_keys;
	ALTER TABLE {s}.jobs DROP COLUMN holds_key;`,
}

// SchemaVersion is the schema version this binary migrates to: one per migration.
const SchemaVersion = 3

// ErrSchemaTooOld is returned by Open with Config.NoMigrate when the schema is older
// than this binary's: an operator migrates it first (Migrate, wasmjobs migrate up).
var ErrSchemaTooOld = errors.New("the database's wasmjobs schema is older than this binary")

// migrationLock names the advisory lock of schema's migrations: one per schema name, so
// that hosts of another schema in the same database do not wait.
func migrationLock(schema string) string { return "wasmjobs.migrate." + schema }

// migrate brings the schema up to SchemaVersion under an advisory lock, so that hosts
// starting together apply each migration once, and refuses a schema newer than this
// binary's; with check only, it refuses an older one too (ErrSchemaTooOld) and changes
// nothing.
func migrate(ctx context.Context, pool *pgxpool.Pool, schema string, check bool) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("migrating schema %s: %w", schema, err)
	}
	defer conn.Release()
	if check {
		have, err := versionOf(ctx, conn.Conn(), schema)
		if err != nil {
			return err
		}
		switch {
		case have > SchemaVersion:
			return tooNew(schema, have)
		case have < SchemaVersion:
			return fmt.Errorf("%w: schema %s is at version %d, this binary needs version %d: run wasmjobs migrate up, or start without --pg-migrate=false", ErrSchemaTooOld, schema, have, SchemaVersion)
		}
		return nil
	}
	_, err = migrateConn(ctx, conn.Conn(), schema, SchemaVersion, false, 0)
	return err
}

func tooNew(schema string, have int) error {
	return fmt.Errorf("%w: schema %s is at version %d, this binary knows versions up to %d: run a wasmjobs at least as new as the one that migrated it", ErrSchemaTooNew, schema, have, SchemaVersion)
}

// versionOf reads schema's version: 0 for a schema (or migrations table) not there.
func versionOf(ctx context.Context, conn *pgx.Conn, schema string) (int, error) {
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, pgx.Identifier{schema, "migrations"}.Sanitize()).Scan(&exists); err != nil {
		return 0, fmt.Errorf("reading the version of schema %s: %w", schema, err)
	}
	if !exists {
		return 0, nil
	}
	var have int
	if err := conn.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM `+pgx.Identifier{schema}.Sanitize()+`.migrations`).Scan(&have); err != nil {
		return 0, fmt.Errorf("reading the version of schema %s: %w", schema, err)
	}
	return have, nil
}

// migrateConn takes schema to version to, up (or, with down, down), one migration a
// transaction, under the schema's advisory lock, and returns the version it found; a
// schema already past to in the other direction is left as it is. The direction is
// checked under the lock, so that a host migrating meanwhile cannot turn an operator's
// up into a down. A positive lockTimeout bounds each migration's wait for its tables'
// locks (a host's open transaction, say), so that the statement fails rather than
// queue every host's queries behind it.
func migrateConn(ctx context.Context, conn *pgx.Conn, schema string, to int, down bool, lockTimeout time.Duration) (int, error) {
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(hashtextextended($1, 0))`, migrationLock(schema)); err != nil {
		return 0, fmt.Errorf("migrating schema %s: taking the migration lock: %w", schema, err)
	}
	defer func() {
		// On a fresh context: the lock must go even when ctx has ended, or the session
		// (returned to the pool) would hold it.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, err := conn.Exec(uctx, `SELECT pg_advisory_unlock(hashtextextended($1, 0))`, migrationLock(schema)); err != nil {
			conn.Close(context.Background()) // a closed session drops its locks
		}
	}()
	q := pgx.Identifier{schema}.Sanitize()
	if _, err := conn.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+q+`;
		CREATE TABLE IF NOT EXISTS `+q+`.migrations (version int PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return 0, fmt.Errorf("migrating schema %s: %w", schema, err)
	}
	have, err := versionOf(ctx, conn, schema)
	if err != nil {
		return 0, err
	}
	if have > SchemaVersion {
		return have, tooNew(schema, have)
	}
	if (have > to && !down) || (have < to && down) {
		return have, nil // past to already, the other way: nothing to do
	}
	step := func(v int, sql, version string, args ...any) error {
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if lockTimeout > 0 {
				if _, err := tx.Exec(ctx, fmt.Sprintf(`SET LOCAL lock_timeout = %d`, lockTimeout.Milliseconds())); err != nil {
					return err
				}
			}
			if _, err := tx.Exec(ctx, strings.ReplaceAll(sql, "{s}", q)); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, version, args...)
			return err
		})
		if err != nil {
			return fmt.Errorf("migrating schema %s to version %d: %w", schema, v, err)
		}
		return nil
	}
	for v := have; v < to; v++ {
		if err := step(v+1, migrations[v], `INSERT INTO `+q+`.migrations (version) VALUES ($1)`, v+1); err != nil {
			return have, err
		}
	}
	for v := have; v > to; v-- {
		if err := step(v-1, downs[v-2], `DELETE FROM `+q+`.migrations WHERE version = $1`, v); err != nil {
			return have, err
		}
	}
	return have, nil
}

// SchemaVersionOf returns the version of schema (DefaultSchema when empty) in the
// database at url: 0 when it was never migrated.
func SchemaVersionOf(ctx context.Context, url, schema string) (int, error) {
	schema = cmp.Or(schema, DefaultSchema)
	if err := CheckSchema(schema); err != nil {
		return 0, err
	}
	conn, err := connect(ctx, url)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return versionOf(ctx, conn, schema)
}

// MigrateLockTimeout bounds each of Migrate's migrations' wait for its tables' locks.
const MigrateLockTimeout = 5 * time.Second

// Migrate takes schema (DefaultSchema when empty) in the database at url up to version
// to, or with down down to it, one migration a transaction, under the lock Open's
// migrations take, and returns the version it found; a schema past to the other way
// (a host migrated it meanwhile) is left as it is. to must be between 1 and
// SchemaVersion: below version 1 there is no schema (drop it with DROP SCHEMA ...
// CASCADE). Each migration waits at most MigrateLockTimeout for its tables' locks. A
// call whose ctx ends is cancelled on the server too. Hosts running on the schema
// while it goes down would misread it: stop them first; going down from version 3
// drops the unique keys, those of jobs still waiting too.
func Migrate(ctx context.Context, url, schema string, to int, down bool) (int, error) {
	schema = cmp.Or(schema, DefaultSchema)
	if err := CheckSchema(schema); err != nil {
		return 0, err
	}
	if to < 1 || to > SchemaVersion {
		return 0, fmt.Errorf("postgres: migrating schema %s to version %d: this binary knows versions 1 to %d, and there is nothing below 1 (drop the schema with DROP SCHEMA ... CASCADE)", schema, to, SchemaVersion)
	}
	conn, err := connect(ctx, url)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return migrateConn(ctx, conn, schema, to, down, MigrateLockTimeout)
}

// connect opens one connection to url whose calls, when their context ends, are
// cancelled on the server too (a cancel request), as the pool's are.
func connect(ctx context.Context, url string) (*pgx.Conn, error) {
	cc, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("postgres: the database URL: %w", err)
	}
	cc.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: c, DeadlineDelay: 100 * time.Millisecond}
	}
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return nil, &backend.TransportError{Op: "connect", Err: err}
	}
	return conn, nil
}
