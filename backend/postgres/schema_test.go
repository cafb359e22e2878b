package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/internal/rigs/testbroker"
)

// TestMigrationFromVersion1KeepsTheJobsStates: jobs that a version 1 schema held
// (before job records) come out of the migration with the records' states their rows
// mean, not all pending: a deferred job deferred, a retry retrying, a delayed job
// delayed, and they list under those states.
func TestMigrationFromVersion1KeepsTheJobsStates(t *testing.T) {
	t.Parallel()
	url := testbroker.PostgresURL(t)
	var r [4]byte
	rand.Read(r[:])
	schema := "wasmjobs_v1_" + hex.EncodeToString(r[:])
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	t.Cleanup(func() { conn.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+schema+` CASCADE`) })
	q := pgx.Identifier{schema}.Sanitize()
	for _, sql := range []string{
		`CREATE SCHEMA ` + q,
		`CREATE TABLE ` + q + `.migrations (version int PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`,
		strings.ReplaceAll(migrations[0], "{s}", q),
		`INSERT INTO ` + q + `.migrations (version) VALUES (1)`,
		`INSERT INTO ` + q + `.queues (name, priority_levels) VALUES ('old', 0)`,
		`INSERT INTO ` + q + `.jobs (queue, id, state, priority, due_at, deferred, payload, attempt, max_attempts, defers, enqueued_at, reason, key, round) VALUES
			('old', 'deferred', 2, 0, now() + interval '1 hour', true, '', 1, 3, 1, 0, '', '', 0),
			('old', 'retrying', 2, 0, now() + interval '1 hour', false, '', 2, 3, 0, 0, 'failed', '', 0),
			('old', 'delayed', 2, 0, now() + interval '1 hour', false, '', 1, 3, 0, 0, '', '', 0),
			('old', 'pending', 0, 0, now(), false, '', 1, 3, 0, 0, '', '', 0)`,
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	b, err := Open(ctx, Config{URL: url, Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(context.Background())
	for _, st := range []backend.JobState{backend.JobDeferred, backend.JobRetrying, backend.JobDelayed, backend.JobPending} {
		rec, err := b.JobRecord(ctx, string(st))
		if err != nil || rec.State != st {
			t.Errorf("job %q after the migration: %v %v, want %s", st, rec.State, err, st)
		}
		page, err := b.ListJobs(ctx, "old", backend.JobFilter{State: st})
		if err != nil || len(page.Jobs) != 1 || page.Jobs[0].ID != string(st) {
			t.Errorf("listing the %s jobs: %+v %v, want the one", st, page.Jobs, err)
		}
	}
}
