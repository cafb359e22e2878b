package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/wasmjobs/wasmjobs/backend"
)

var (
	_ backend.JobRecordReader   = (*Backend)(nil)
	_ backend.JobLister         = (*Backend)(nil)
	_ backend.JobController     = (*Backend)(nil)
	_ backend.JobEnvelopeReader = (*Backend)(nil)
)

// maxListScan bounds the rows one ListJobs page reads: a state that matches rarely
// returns a short page with a cursor rather than read the whole queue in one request.
const maxListScan = 10_000

// The rows' states (the state column), the record's state apart.
const (
	rowReady    = 0
	rowClaimed  = 1
	rowWaiting  = 2
	rowFinished = 3
)

// runRecord is what a settle writes of the job's run into its row: the record's
// columns, as statement arguments.
type runRecord struct {
	status   string
	outcome  *string // the record's reason where it is not the envelope's; nil: the envelope's
	output   []byte
	outTrunc bool
	logs     *string // a JSON array of the lines; nil for none
	logTrunc bool
	module   string
	version  string
	role     string
	started  pgtype.Timestamptz
	finished pgtype.Timestamptz // NULL: now(), by the database's clock, for a final state
	attempt  string             // a JSON array of the one attempt the settle appends
}

// newRunRecord is what a settle to state, for reason, of the job env writes, from run
// (what the consumer knows of it; may be nil), capped. outcome says whether reason is
// the record's own (a dead letter's, a cancel's, an ack's "") rather than the
// envelope's (a retry's and a defer's, which the next envelope carries).
func (b *Backend) newRunRecord(env backend.Envelope, state backend.JobState, reason string, outcome bool, run *backend.JobRecord) (runRecord, error) {
	var rec backend.JobRecord
	if run != nil {
		rec = *run
	}
	b.caps.Apply(&rec)
	r := runRecord{
		status: string(state), output: rec.Output, outTrunc: rec.OutputTruncated, logTrunc: rec.LogsTruncated,
		module: pgText(rec.Module), version: pgText(rec.ModuleVersion), role: pgText(rec.ModuleRole),
		started:  timestamptz(rec.StartedAt),
		finished: timestamptz(rec.FinishedAt),
	}
	if outcome {
		o := pgText(reason)
		r.outcome = &o
	}
	if len(rec.Logs) > 0 {
		lines := make([]string, len(rec.Logs))
		for i, l := range rec.Logs {
			lines[i] = pgText(l)
		}
		j, err := json.Marshal(lines)
		if err != nil {
			return runRecord{}, fmt.Errorf("postgres: a record's log lines: %w", err)
		}
		s := string(j)
		r.logs = &s
	}
	calls, dropped := rec.Calls, rec.CallsDropped
	if n := len(calls) - backend.MaxRecordCalls; n > 0 {
		calls, dropped = calls[:backend.MaxRecordCalls], dropped+n
	}
	kept := make([]backend.CallRecord, len(calls))
	for i, c := range calls {
		c.Method, c.Target, c.Path, c.Error = pgText(c.Method), pgText(c.Target), pgText(c.Path), pgText(c.Error)
		kept[i] = c
	}
	a := backend.AttemptRecord{
		Attempt: max(env.Attempt, 1), State: state, Reason: pgText(reason), Module: r.module, Version: r.version,
		Role: r.role, StartedAt: rec.StartedAt, FinishedAt: rec.FinishedAt, Calls: kept, CallsDropped: dropped,
		TraceID: pgText(rec.TraceID),
	}
	j, err := json.Marshal([]backend.AttemptRecord{a})
	if err != nil {
		return runRecord{}, fmt.Errorf("postgres: a record's attempt: %w", err)
	}
	r.attempt = string(j)
	return r, nil
}

// args are the runRecord's arguments, in recordSet's order.
func (r runRecord) args() []any {
	var logs any
	if r.logs != nil {
		logs = *r.logs
	}
	return []any{r.status, r.outcome, r.output, r.outTrunc, logs, r.logTrunc, r.module, r.version, r.role,
		r.started, r.finished, r.attempt}
}

// timestamptz is t as a nullable argument: NULL for the zero time.
func timestamptz(t time.Time) pgtype.Timestamptz {
	return pgtype.Timestamptz{Time: t, Valid: !t.IsZero()}
}

// recordSet is the SET list that writes a run's record into a row, from the
// expressions e, in runRecord.args' order: status, outcome, output, output truncated,
// logs (JSON text), logs truncated, module, version, role, started, finished (NULL:
// now() for a final state), the attempt (JSON text of a one-element array). The
// attempt is appended to the row's, keeping the last backend.MaxRecordAttempts; an
// attempt without a finish time gets the record's.
func recordSet(e [12]string) string {
	status, fin := e[0], e[10]
	finished := `coalesce(` + fin + `, CASE WHEN ` + status + ` IN ('succeeded', 'dead', 'cancelled') THEN now() END)`
	attempt := `(CASE WHEN (` + e[11] + `)::jsonb->0 ? 'finished_at' OR ` + finished + ` IS NULL THEN (` + e[11] + `)::jsonb
		ELSE jsonb_set((` + e[11] + `)::jsonb, '{0,finished_at}', to_jsonb(` + finished + `)) END)`
	return `status = ` + status + `, outcome = ` + e[1] + `, output = ` + e[2] + `, output_truncated = ` + e[3] +
		`, logs = (` + e[4] + `)::jsonb, logs_truncated = ` + e[5] + `, module = NULLIF(` + e[6] + `, ''), module_version = NULLIF(` + e[7] +
		`, ''), module_role = NULLIF(` + e[8] + `, ''), started_at = ` + e[9] + `, finished_at = ` + finished +
		`, updated_at = now(), attempts = ` + appendAttempt(attempt)
}

// appendAttempt is the row's attempts with those of the JSON array a after them, the
// last backend.MaxRecordAttempts kept (a is one attempt: one goes when the row has
// them all).
func appendAttempt(a string) string {
	return `CASE WHEN jsonb_array_length(coalesce(attempts, '[]')) >= ` + fmt.Sprint(backend.MaxRecordAttempts) +
		` THEN (attempts - 0) || ` + a + ` ELSE coalesce(attempts, '[]') || ` + a + ` END`
}

// recordParams are recordSet's expressions for the arguments from $p on.
func recordParams(p int) [12]string {
	types := [12]string{"text", "text", "bytea", "boolean", "text", "boolean", "text", "text", "text", "timestamptz", "timestamptz", "text"}
	var e [12]string
	for i, t := range types {
		e[i] = fmt.Sprintf("$%d::%s", p+i, t)
	}
	return e
}

// recordColumns are the columns a record is read from, in scanRecord's order.
const recordColumns = `queue, id, state, status, attempt, max_attempts, reason, outcome, output, output_truncated,
	logs, logs_truncated, module, module_version, module_role, enqueued_at, started_at, finished_at, updated_at,
	children, attempts`

// scanRecord reads recordColumns from row into a record.
func scanRecord(row pgx.Row) (backend.JobRecord, error) {
	var (
		rec                       backend.JobRecord
		state                     int16
		status                    string
		reason                    string
		outcome                   *string
		logs, attempts            []byte
		module, version, role     *string
		enq                       int64
		started, finished, update pgtype.Timestamptz
	)
	err := row.Scan(&rec.Queue, &rec.ID, &state, &status, &rec.Attempt, &rec.MaxAttempts, &reason, &outcome,
		&rec.Output, &rec.OutputTruncated, &logs, &rec.LogsTruncated, &module, &version, &role, &enq, &started,
		&finished, &update, &rec.Children, &attempts)
	if err != nil {
		return backend.JobRecord{}, err
	}
	rec.State = backend.JobState(status)
	if state == rowClaimed {
		rec.State = backend.JobRunning
	}
	rec.Attempt = max(rec.Attempt, 1)
	rec.Reason = reason
	if outcome != nil {
		rec.Reason = *outcome
	}
	deref := func(s *string) string {
		if s == nil {
			return ""
		}
		return *s
	}
	rec.Module, rec.ModuleVersion, rec.ModuleRole = deref(module), deref(version), deref(role)
	if enq != 0 {
		rec.CreatedAt = time.Unix(0, enq)
	}
	rec.StartedAt, rec.FinishedAt, rec.UpdatedAt = started.Time, finished.Time, update.Time
	if len(logs) > 0 {
		if err := json.Unmarshal(logs, &rec.Logs); err != nil {
			return backend.JobRecord{}, fmt.Errorf("job %q: its record's log lines: %w", rec.ID, err)
		}
	}
	if len(attempts) > 0 {
		if err := json.Unmarshal(attempts, &rec.Attempts); err != nil {
			return backend.JobRecord{}, fmt.Errorf("job %q: its record's attempts: %w", rec.ID, err)
		}
	}
	// A job between attempts (retrying, deferred) reports the attempt that settled so,
	// as a record written at the settle would: its envelope already carries the next.
	if state != rowClaimed && (rec.State == backend.JobRetrying || rec.State == backend.JobDeferred) && len(rec.Attempts) > 0 {
		rec.Attempt = rec.Attempts[len(rec.Attempts)-1].Attempt
	}
	return rec, nil
}

// JobRecord returns the record of the job id: its row, held or finished (a job
// published under one id to two queues is the one written last). A claimed job is
// running. A finished job's record is there until retention prunes it (Config.Records).
func (b *Backend) JobRecord(ctx context.Context, id string) (backend.JobRecord, error) {
	if b.isClosed() {
		return backend.JobRecord{}, backend.ErrShutDown
	}
	rec, err := scanRecord(b.pool.QueryRow(ctx, `SELECT `+recordColumns+` FROM `+b.s+`.jobs
		WHERE id = $1 ORDER BY updated_at DESC, seq DESC LIMIT 1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return backend.JobRecord{}, fmt.Errorf("job %q: %w", id, backend.ErrNotFound)
	}
	if err != nil {
		return backend.JobRecord{}, b.transport("job record", "", err)
	}
	return rec, nil
}

// ListJobs lists the declared queue's jobs, newest first (by id), from their rows. A
// page reads at most maxListScan rows.
func (b *Backend) ListJobs(ctx context.Context, queue string, f backend.JobFilter) (backend.JobPage, error) {
	if _, err := b.queueLevels(ctx, queue); err != nil {
		return backend.JobPage{}, err
	}
	// One less than the scan's bound, so that a full scan can still say a next page
	// exists.
	limit := min(f.Limit, maxListScan-1)
	if limit <= 0 {
		limit = backend.DefaultJobPage
	}
	// The scan walks the queue's ids down from the cursor, at most maxListScan of them;
	// the page is the first limit+1 of those in the state (one more says that a next
	// page exists).
	args := []any{queue, f.Cursor, limit + 1}
	match := `true`
	switch f.State {
	case "":
	case backend.JobRunning:
		match = `j.state = 1`
	default:
		match, args = `j.state <> 1 AND j.status = $4`, append(args, string(f.State))
	}
	scan := `WITH scan AS (SELECT seq FROM ` + b.s + `.jobs WHERE queue = $1 AND ($2 = '' OR id < $2)
		ORDER BY id DESC LIMIT ` + fmt.Sprint(maxListScan) + `)`
	rows, err := b.pool.Query(ctx, scan+` SELECT `+prefixed("j.", recordColumns)+`
		FROM scan JOIN `+b.s+`.jobs j ON j.seq = scan.seq WHERE `+match+` ORDER BY j.id DESC LIMIT $3`, args...)
	if err != nil {
		return backend.JobPage{}, b.transport("list jobs", queue, err)
	}
	var page backend.JobPage
	for rows.Next() {
		rec, err := scanRecord(rows)
		if err != nil {
			rows.Close()
			return backend.JobPage{}, b.transport("list jobs", queue, err)
		}
		page.Jobs = append(page.Jobs, rec)
	}
	if err := rows.Err(); err != nil {
		return backend.JobPage{}, b.transport("list jobs", queue, err)
	}
	if len(page.Jobs) > limit {
		page.Jobs = page.Jobs[:limit]
		page.Next = page.Jobs[limit-1].ID
		return page, nil
	}
	if f.State == "" {
		return page, nil // the scan ran out before the page filled: the end
	}
	// A short page of a state: the end, unless the scan stopped at its bound, where the
	// next page goes on.
	var scanned int
	var last *string
	if err := b.pool.QueryRow(ctx, scan+` SELECT count(*), min(j.id) FROM scan JOIN `+b.s+`.jobs j ON j.seq = scan.seq`,
		queue, f.Cursor).Scan(&scanned, &last); err != nil {
		return backend.JobPage{}, b.transport("list jobs", queue, err)
	}
	if scanned == maxListScan && last != nil {
		page.Next = *last
	}
	return page, nil
}

// prefixed returns the comma-separated columns cols, each prefixed with p.
func prefixed(p, cols string) string {
	fields := strings.Split(cols, ",")
	for i, f := range fields {
		fields[i] = p + strings.TrimSpace(f)
	}
	return strings.Join(fields, ", ")
}

// heldJob is the row of the job id that JobController's methods act on: the one
// written last.
type heldJob struct {
	seq    int64
	queue  string
	state  int16
	status string
}

// lookUp returns the row of job id, or ErrNotFound.
func (b *Backend) lookUp(ctx context.Context, id string) (heldJob, error) {
	if b.isClosed() {
		return heldJob{}, backend.ErrShutDown
	}
	var h heldJob
	err := b.pool.QueryRow(ctx, `SELECT seq, queue, state, status FROM `+b.s+`.jobs
		WHERE id = $1 ORDER BY updated_at DESC, seq DESC LIMIT 1`, id).Scan(&h.seq, &h.queue, &h.state, &h.status)
	if errors.Is(err, pgx.ErrNoRows) {
		return heldJob{}, fmt.Errorf("job %q: %w", id, backend.ErrNotFound)
	}
	if err != nil {
		return heldJob{}, b.transport("look up a job", "", err)
	}
	return h, nil
}

// stateOf says what h's state is, for an error.
func (h heldJob) stateOf() backend.JobState {
	if h.state == rowClaimed {
		return backend.JobRunning
	}
	return backend.JobState(h.status)
}

// CancelJob cancels a job that waits (pending, delayed, deferred or retrying): its row
// stays, finished, as its record, cancelled. A running or finished job is refused with
// backend.ErrJobState.
func (b *Backend) CancelJob(ctx context.Context, id string) error {
	h, err := b.lookUp(ctx, id)
	if err != nil {
		return err
	}
	if h.state == rowReady || h.state == rowWaiting {
		tag, err := b.pool.Exec(ctx, `UPDATE `+b.s+`.jobs SET state = 3, status = 'cancelled',
				outcome = 'cancelled by an operator', finished_at = now(), updated_at = now()
			WHERE seq = $1 AND state IN (0, 2)`, h.seq)
		if err != nil {
			return b.transport("cancel", h.queue, err)
		}
		if tag.RowsAffected() == 1 {
			return nil
		}
		return fmt.Errorf("job %q of queue %q was taken or finished meanwhile: only a job that waits can be cancelled: %w", id, h.queue, backend.ErrJobState)
	}
	return fmt.Errorf("job %q of queue %q is %s: only a job that waits can be cancelled: %w", id, h.queue, h.stateOf(), backend.ErrJobState)
}

// RetryJobNow makes a job that waits for its time (retrying, delayed, deferred) ready
// now, or replays a dead letter.
func (b *Backend) RetryJobNow(ctx context.Context, id string) error {
	h, err := b.lookUp(ctx, id)
	if errors.Is(err, backend.ErrNotFound) {
		// No record (pruned, or none kept), but maybe a dead letter.
		q, derr := b.deadQueue(ctx, id)
		if derr == nil {
			return b.ReplayDeadLetter(ctx, q, id)
		}
		if !errors.Is(derr, backend.ErrNotFound) {
			return derr
		}
	}
	if err != nil {
		return err
	}
	switch {
	case h.state == rowFinished && h.status == string(backend.JobDead):
		return b.ReplayDeadLetter(ctx, h.queue, id)
	case h.state == rowReady:
		return fmt.Errorf("job %q of queue %q is due already: %w", id, h.queue, backend.ErrJobState)
	case h.state == rowWaiting:
		batch := &pgx.Batch{}
		batch.Queue(`UPDATE `+b.s+`.jobs SET state = 0, due_at = now(), updated_at = now() WHERE seq = $1 AND state = 2`, h.seq)
		batch.Queue(`SELECT pg_notify($1, $2)`, b.channel, h.queue)
		n, err := b.firstCount(ctx, batch)
		if err != nil {
			return b.transport("retry now", h.queue, err)
		}
		if n == 1 {
			b.wakeQueue(h.queue)
			return nil
		}
		return fmt.Errorf("job %q of queue %q is due already: %w", id, h.queue, backend.ErrJobState)
	}
	return fmt.Errorf("job %q of queue %q is %s: only a retrying, delayed, deferred or dead job can be retried now: %w", id, h.queue, h.stateOf(), backend.ErrJobState)
}

// DeleteJob deletes a job's row, its record with it: a waiting job leaves its queue, a
// dead job's dead letters of the queue go too. A running job is refused.
func (b *Backend) DeleteJob(ctx context.Context, id string) error {
	h, err := b.lookUp(ctx, id)
	if err != nil {
		return err
	}
	if h.state == rowClaimed {
		return fmt.Errorf("job %q of queue %q is running: it can be deleted once it settles: %w", id, h.queue, backend.ErrJobState)
	}
	// Only the row as it was looked up: a finished row revived meanwhile (a publish, a
	// replay: its state changed) is a new job, not the one asked for; a job that waits
	// may have come due meanwhile. (A waiting job finished and revived again between the
	// look-up and the delete cannot be told from the one asked for.)
	// A dead job's dead letters go with its row, only if the row went.
	match, args := `state IN (0, 2)`, []any{h.seq}
	if h.state == rowFinished {
		match, args = `state = 3 AND status = $2`, append(args, h.status)
	}
	sql := `DELETE FROM ` + b.s + `.jobs WHERE seq = $1 AND ` + match
	if h.state == rowFinished && h.status == string(backend.JobDead) {
		sql = `WITH j AS (` + sql + ` RETURNING queue, id),
			d AS (DELETE FROM ` + b.s + `.dead x USING j WHERE x.queue = j.queue AND x.id = j.id)
			SELECT count(*) FROM j`
	} else {
		sql = `WITH j AS (` + sql + ` RETURNING 1) SELECT count(*) FROM j`
	}
	var n int
	if err := b.pool.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
		return b.transport("delete", h.queue, err)
	}
	if n == 0 {
		return fmt.Errorf("job %q of queue %q changed meanwhile (it was taken, finished or published again): look again: %w", id, h.queue, backend.ErrJobState)
	}
	return nil
}

// JobEnvelope returns the envelope of the job id while it waits, or, once it died, of
// its oldest dead letter: the one a retry now replays. A running job or one that
// finished otherwise has none (ErrNotFound).
func (b *Backend) JobEnvelope(ctx context.Context, id string) (backend.Envelope, error) {
	h, err := b.lookUp(ctx, id)
	var env backend.Envelope
	e := envScan{env: &env}
	switch {
	case errors.Is(err, backend.ErrNotFound):
		// No record (pruned, or none kept), but maybe a dead letter.
		var queue string
		err = b.pool.QueryRow(ctx, `SELECT queue, `+envColumns+` FROM `+b.s+`.dead WHERE id = $1
			ORDER BY seq LIMIT 1`, id).Scan(e.dest(&queue)...)
		h.queue = queue
	case err != nil:
		return backend.Envelope{}, err
	case h.state == rowReady || h.state == rowWaiting:
		err = b.pool.QueryRow(ctx, `SELECT `+envColumns+` FROM `+b.s+`.jobs WHERE seq = $1 AND state IN (0, 2)`, h.seq).Scan(e.dest()...)
	case h.state == rowFinished && h.status == string(backend.JobDead):
		err = b.pool.QueryRow(ctx, `SELECT `+envColumns+` FROM `+b.s+`.dead WHERE queue = $1 AND id = $2
			ORDER BY seq LIMIT 1`, h.queue, id).Scan(e.dest()...)
	default:
		return backend.Envelope{}, fmt.Errorf("job %q of queue %q is %s: no waiting job or dead letter of that id: %w", id, h.queue, h.stateOf(), backend.ErrNotFound)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return backend.Envelope{}, fmt.Errorf("job %q: no waiting job or dead letter of that id: %w", id, backend.ErrNotFound)
	}
	if err != nil {
		return backend.Envelope{}, b.transport("job envelope", h.queue, err)
	}
	e.done(h.queue)
	return env, nil
}

// deadQueue returns the queue of the oldest dead letter of id, or ErrNotFound.
func (b *Backend) deadQueue(ctx context.Context, id string) (string, error) {
	var queue string
	err := b.pool.QueryRow(ctx, `SELECT queue FROM `+b.s+`.dead WHERE id = $1 ORDER BY seq LIMIT 1`, id).Scan(&queue)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("job %q: %w", id, backend.ErrNotFound)
	}
	if err != nil {
		return "", b.transport("look up a dead letter", "", err)
	}
	return queue, nil
}

// firstCount sends batch, in one implicit transaction, and returns the rows its first
// statement affected.
func (b *Backend) firstCount(ctx context.Context, batch *pgx.Batch) (int64, error) {
	br := b.pool.SendBatch(ctx, batch)
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag.RowsAffected(), err
}
