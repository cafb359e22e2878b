package postgres

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
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

// SchemaVersion is the schema version this binary migrates to: one per migration.
const SchemaVersion = 3

// migrate brings the schema up to SchemaVersion under an advisory lock, so that hosts
// starting together apply each migration once, and refuses a schema newer than this
// binary's.
func migrate(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("migrating schema %s: %w", schema, err)
	}
	defer conn.Release()
	// One lock per schema name: hosts of another schema in the same database do not wait.
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(hashtextextended($1, 0))`, "wasmjobs.migrate."+schema); err != nil {
		return fmt.Errorf("migrating schema %s: taking the migration lock: %w", schema, err)
	}
	defer func() {
		// On a fresh context: the lock must go even when ctx has ended, or the session
		// (returned to the pool) would hold it.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, err := conn.Exec(uctx, `SELECT pg_advisory_unlock(hashtextextended($1, 0))`, "wasmjobs.migrate."+schema); err != nil {
			conn.Conn().Close(context.Background()) // a closed session drops its locks
		}
	}()
	q := pgx.Identifier{schema}.Sanitize()
	if _, err := conn.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+q+`;
		CREATE TABLE IF NOT EXISTS `+q+`.migrations (version int PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return fmt.Errorf("migrating schema %s: %w", schema, err)
	}
	var have int
	if err := conn.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM `+q+`.migrations`).Scan(&have); err != nil {
		return fmt.Errorf("migrating schema %s: reading its version: %w", schema, err)
	}
	if have > SchemaVersion {
		return fmt.Errorf("%w: schema %s is at version %d, this binary knows versions up to %d: run a wasmjobs at least as new as the one that migrated it", ErrSchemaTooNew, schema, have, SchemaVersion)
	}
	for v := have; v < SchemaVersion; v++ {
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, strings.ReplaceAll(migrations[v], "{s}", q)); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO `+q+`.migrations (version) VALUES ($1)`, v+1)
			return err
		})
		if err != nil {
			return fmt.Errorf("migrating schema %s to version %d: %w", schema, v+1, err)
		}
	}
	return nil
}
