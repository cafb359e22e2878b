package postgres

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
)

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
