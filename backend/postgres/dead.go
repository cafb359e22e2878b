package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

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
	rows, err := b.pool.Query(ctx, `SELECT id, priority, payload, headers, attempt, max_attempts, defers,
			enqueued_at, reason, key, round, dead_reason, dead_at
		FROM `+b.s+`.dead WHERE queue = $1 ORDER BY seq LIMIT $2`, queue, lim)
	if err != nil {
		return nil, b.transport("dead letters", queue, err)
	}
	var out []backend.DeadLetter
	for rows.Next() {
		var dl backend.DeadLetter
		env := &dl.Envelope
		var prio int16
		var enq int64
		if err := rows.Scan(&env.ID, &prio, &env.Payload, &env.Headers, &env.Attempt, &env.MaxAttempts, &env.Defers,
			&enq, &env.Reason, &env.Key, &env.Round, &dl.Reason, &dl.At); err != nil {
			rows.Close()
			return nil, b.transport("dead letters", queue, err)
		}
		env.Queue, env.Priority = queue, uint8(prio)
		if enq != 0 {
			env.EnqueuedAt = time.Unix(0, enq)
		}
		out = append(out, dl)
	}
	if err := rows.Err(); err != nil {
		return nil, b.transport("dead letters", queue, err)
	}
	return out, nil
}

// errHeld refuses a replay whose job id the queue holds already.
var errHeld = errors.New("the queue holds a job of that id")

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
		var prio int16
		var enq int64
		env := backend.Envelope{Queue: queue}
		err := tx.QueryRow(ctx, `SELECT seq, id, priority, payload, headers, attempt, max_attempts, defers,
				enqueued_at, reason, key, round
			FROM `+b.s+`.dead WHERE queue = $1 AND id = $2 ORDER BY seq LIMIT 1 FOR UPDATE`, queue, id).Scan(
			&seq, &env.ID, &prio, &env.Payload, &env.Headers, &env.Attempt, &env.MaxAttempts, &env.Defers,
			&enq, &env.Reason, &env.Key, &env.Round)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("dead letter %q of queue %q: %w", id, queue, backend.ErrNotFound)
		}
		if err != nil {
			return err
		}
		env.Priority = uint8(prio)
		if enq != 0 {
			env.EnqueuedAt = time.Unix(0, enq)
		}
		backend.Replayed(ctx, &env)
		tag, err := tx.Exec(ctx, b.insertJob(), jobArgs(env, levels, 0, false)...)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("replaying dead letter %q of queue %q: %w: settle or delete that one first", id, queue, errHeld)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM `+b.s+`.dead WHERE seq = $1`, seq); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `SELECT pg_notify($1, $2)`, b.channel, queue)
		return err
	})
	switch {
	case errors.Is(err, backend.ErrNotFound), errors.Is(err, errHeld):
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

// listen keeps a connection of its own LISTENing on the schema's channel and wakes
// the streams of each queue notified, until ctx ends. After every (re)connect it wakes
// every stream: what was notified while it was away is lost.
func (b *Backend) listen(ctx context.Context, cc *pgx.ConnConfig) {
	defer b.wg.Done()
	pause := 100 * time.Millisecond
	for {
		err := b.listenOnce(ctx, cc, func() { pause = 100 * time.Millisecond })
		if ctx.Err() != nil {
			return
		}
		b.log.Warn("postgres: the notification listener lost its connection; streams poll meanwhile", slog.Any("error", err), slog.Duration("retry_in", pause))
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		pause = min(2*pause, max(b.cfg.Poll, 5*time.Second))
	}
}

// listenOnce connects, LISTENs (calling listening then) and waits for notifications
// until the connection fails or ctx ends.
func (b *Backend) listenOnce(ctx context.Context, cc *pgx.ConnConfig, listening func()) error {
	conn, err := pgx.ConnectConfig(ctx, cc.Copy())
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, `LISTEN `+pgx.Identifier{b.channel}.Sanitize()); err != nil {
		return err
	}
	listening()
	b.wakeAll()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		b.wakeQueue(n.Payload)
	}
}
