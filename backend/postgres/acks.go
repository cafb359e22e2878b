package postgres

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/wasmjobs/wasmjobs/backend"
)

// ackTimeout bounds one batch of acknowledgements: past it the batch's acks fail
// (their callers' settles put the jobs back, which the claim tokens make safe).
const ackTimeout = 30 * time.Second

// acks coalesces the backend's acknowledgements into one statement per round trip: an
// ack that finds none in flight runs at once, and those that arrive while a batch is
// in flight go together in the next one, so a busy host deletes tens of rows a round
// trip and a quiet one waits for no timer.
type acks struct {
	mu      sync.Mutex
	pending []*ackReq
	running bool
}

// ackReq is one acknowledgement waiting for its batch.
type ackReq struct {
	seq, token int64
	rec        *runRecord     // what the row keeps as its record
	done       chan ackResult // buffered 1
}

// ackResult says whether the row was still claimed under the token (deleted), or why
// the batch failed.
type ackResult struct {
	ok  bool
	err error
}

// ack finishes the claimed row seq, writing rec as its record (or deletes it, when no
// records are kept), if it is still claimed under token, in the next batch. It returns
// when the batch has, or when ctx ends (the ack may still land).
func (b *Backend) ack(ctx context.Context, seq, token int64, rec *runRecord) (bool, error) {
	req := &ackReq{seq: seq, token: token, rec: rec, done: make(chan ackResult, 1)}
	b.acks.mu.Lock()
	b.acks.pending = append(b.acks.pending, req)
	start := !b.acks.running
	b.acks.running = true
	b.acks.mu.Unlock()
	if start && !b.background(b.flushAcks) {
		// Closed: answer every ack that gathered behind this one, or it would wait for
		// a batch that never runs.
		b.acks.mu.Lock()
		pending := b.acks.pending
		b.acks.pending, b.acks.running = nil, false
		b.acks.mu.Unlock()
		for _, r := range pending {
			r.done <- ackResult{err: backend.ErrShutDown}
		}
	}
	select {
	case r := <-req.done:
		return r.ok, r.err
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// flushAcks runs batches until none is pending.
func (b *Backend) flushAcks() {
	for {
		b.acks.mu.Lock()
		batch := b.acks.pending
		b.acks.pending = nil
		if len(batch) == 0 {
			b.acks.running = false
			b.acks.mu.Unlock()
			return
		}
		b.acks.mu.Unlock()
		deleted, err := b.finishClaimed(batch)
		for _, r := range batch {
			r.done <- ackResult{ok: deleted[claim{r.seq, r.token}], err: err}
		}
	}
}

// claim names one claim of a row: the row and the token it was claimed under.
type claim struct{ seq, token int64 }

// finishClaimed finishes the rows of batch still claimed under their tokens, in the
// rows' order (as renewals lock them, so the two never deadlock), and returns the
// claims it finished. A deadlock or serialization failure the database reports anyway
// is tried again, twice: the statement did nothing.
func (b *Backend) finishClaimed(batch []*ackReq) (map[claim]bool, error) {
	ctx, cancel := context.WithTimeout(b.bg, ackTimeout)
	defer cancel()
	sorted := slices.SortedFunc(slices.Values(batch), func(x, y *ackReq) int { return cmp.Compare(x.seq, y.seq) })
	n := len(sorted)
	seqs, toks := make([]int64, n), make([]int64, n)
	for i, r := range sorted {
		seqs[i], toks[i] = r.seq, r.token
	}
	sql, args := `DELETE FROM `+b.s+`.jobs j USING unnest($1::bigint[], $2::bigint[]) AS c(seq, tok)
		WHERE j.seq = c.seq AND j.claim_token = c.tok AND j.state = 1 AND j.lease_until > now() RETURNING j.seq, c.tok`,
		[]any{seqs, toks}
	if b.maxCount > 0 {
		sql, args = b.finishRows(), append(args, recordColumnsOf(sorted)...)
	}
	for try := 1; ; try++ {
		finished, err := b.finishRows1(ctx, sql, args)
		if try < 3 && retryable(err) {
			continue
		}
		return finished, err
	}
}

// finishRows is the statement that finishes a batch's rows as succeeded, writing each
// its record: its arguments are the claims and recordColumnsOf's arrays.
func (b *Backend) finishRows() string {
	return `UPDATE ` + b.s + `.jobs j SET state = 3, ` + recordSet([12]string{`'succeeded'::text`, `c.outc`, `c.out`, `c.outt`, `c.lg`, `c.lgt`,
		`c.m`, `c.mv`, `c.mr`, `c.st`, `c.fin`, `c.att`}) + `, claim_token = NULL, claimed_by = NULL, lease_until = NULL
		FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::bytea[], $5::boolean[], $6::text[], $7::boolean[],
			$8::text[], $9::text[], $10::text[], $11::timestamptz[], $12::timestamptz[], $13::text[])
			AS c(seq, tok, outc, out, outt, lg, lgt, m, mv, mr, st, fin, att)
		WHERE j.seq = c.seq AND j.claim_token = c.tok AND j.state = 1 AND j.lease_until > now() RETURNING j.seq, c.tok`
}

// recordColumnsOf are finishRows' record arguments for batch: an array a column.
func recordColumnsOf(batch []*ackReq) []any {
	n := len(batch)
	var (
		outcomes, logs     = make([]*string, n), make([]*string, n)
		outputs            = make([][]byte, n)
		outTrunc, logTrunc = make([]bool, n), make([]bool, n)
		mods, vers, roles  = make([]string, n), make([]string, n), make([]string, n)
		started, finished  = make([]pgtype.Timestamptz, n), make([]pgtype.Timestamptz, n)
		attempts           = make([]string, n)
	)
	for i, r := range batch {
		rr := r.rec
		outcomes[i], outputs[i], outTrunc[i], logs[i], logTrunc[i] = rr.outcome, rr.output, rr.outTrunc, rr.logs, rr.logTrunc
		mods[i], vers[i], roles[i], started[i], finished[i], attempts[i] = rr.module, rr.version, rr.role, rr.started, rr.finished, rr.attempt
	}
	return []any{outcomes, outputs, outTrunc, logs, logTrunc, mods, vers, roles, started, finished, attempts}
}

// finishRows1 is one try of finishClaimed's statement sql.
func (b *Backend) finishRows1(ctx context.Context, sql string, args []any) (map[claim]bool, error) {
	rows, err := b.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	deleted := make(map[claim]bool)
	for rows.Next() {
		var c claim
		if err := rows.Scan(&c.seq, &c.token); err != nil {
			rows.Close()
			return nil, err
		}
		deleted[c] = true
	}
	return deleted, rows.Err()
}

// retryable reports whether err is PostgreSQL's deadlock or serialization failure,
// after which the statement did nothing and may run again.
func retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40P01" || pe.Code == "40001")
}
