package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/wasmjobs/wasmjobs/backend"
)

// DeadLetters lists up to limit dead letters of the queue, oldest first; limit <= 0
// lists them all.
func (b *Backend) DeadLetters(ctx context.Context, queue string, limit int) ([]backend.DeadLetter, error) {
	if _, err := b.queueLevels(ctx, queue); err != nil {
		return nil, err
	}
	var lim any // NULL: no limit
	if limit > 0 {
		lim = limit
	}
	rows, err := b.pool.Query(ctx, `SELECT dead_reason, dead_at, `+envColumns+`
		FROM `+b.s+`.dead WHERE queue = $1 ORDER BY seq LIMIT $2`, queue, lim)
	if err != nil {
		return nil, b.transport("dead letters", queue, err)
	}
	var out []backend.DeadLetter
	for rows.Next() {
		var dl backend.DeadLetter
		e := envScan{env: &dl.Envelope}
		if err := rows.Scan(e.dest(&dl.Reason, &dl.At)...); err != nil {
			rows.Close()
			return nil, b.transport("dead letters", queue, err)
		}
		e.done(queue)
		out = append(out, dl)
	}
	if err := rows.Err(); err != nil {
		return nil, b.transport("dead letters", queue, err)
	}
	return out, nil
}

// ReplayDeadLetter moves the oldest dead letter of id back onto its queue as a fresh
// job (backend.Replayed: attempt 1, no reason, no defers, one replay more), in one
// transaction. It fails, moving nothing, when the queue holds a job of that id already.
func (b *Backend) ReplayDeadLetter(ctx context.Context, queue, id string) error {
	levels, err := b.queueLevels(ctx, queue)
	if err != nil {
		return err
	}
	err = pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		var seq int64
		var env backend.Envelope
		e := envScan{env: &env}
		err := tx.QueryRow(ctx, `SELECT seq, `+envColumns+`
			FROM `+b.s+`.dead WHERE queue = $1 AND id = $2 ORDER BY seq LIMIT 1 FOR UPDATE`, queue, id).Scan(e.dest(&seq)...)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("dead letter %q of queue %q: %w", id, queue, backend.ErrNotFound)
		}
		if err != nil {
			return err
		}
		e.done(queue)
		backend.Replayed(ctx, &env)
		var put int
		if err := tx.QueryRow(ctx, b.insertJob(true), newJobRow(env, levels, 0, false).args()...).Scan(&put); err != nil {
			return err
		}
		if put == 0 {
			return fmt.Errorf("replaying dead letter %q of queue %q: %w: settle or delete that one first", id, queue, errIDHeld)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM `+b.s+`.dead WHERE seq = $1`, seq); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `SELECT pg_notify($1, $2)`, b.channel, queue)
		return err
	})
	switch {
	case errors.Is(err, backend.ErrNotFound), errors.Is(err, errIDHeld):
		return err
	case err != nil:
		return b.transport("replay", queue, err)
	}
	b.wakeQueue(queue)
	return nil
}

// PurgeDeadLetters deletes every dead letter of the queue and reports how many there
// were.
func (b *Backend) PurgeDeadLetters(ctx context.Context, queue string) (int, error) {
	if _, err := b.queueLevels(ctx, queue); err != nil {
		return 0, err
	}
	tag, err := b.pool.Exec(ctx, `DELETE FROM `+b.s+`.dead WHERE queue = $1`, queue)
	if err != nil {
		return 0, b.transport("purge", queue, err)
	}
	return int(tag.RowsAffected()), nil
}
