package postgres

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/wasmjobs/wasmjobs/backend"
)

// pruneBatch is how many finished rows one prune statement deletes: small enough that
// no statement holds its locks for long, on rows no consumer waits for anyway.
const pruneBatch = 1000

// pruneLoop prunes the finished rows (the records) past their retention, and the
// unique keys whose hold has ended, every pruneEvery, until ctx ends. Every host prunes: the statements are idempotent (the
// rows past the age, the rows past the newest maxCount), so hosts pruning at once
// delete no more than one would.
func (b *Backend) pruneLoop(ctx context.Context) {
	defer b.wg.Done()
	t := time.NewTicker(b.pruneEvery)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n, err := b.prune(ctx)
		b.pruned.Add(uint64(n))
		k, kerr := b.pruneKeys(ctx)
		b.pruned.Add(uint64(k))
		if err == nil {
			err = kerr
		}
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			b.log.Warn("postgres: pruning job records or unique keys failed; trying again every prune interval", slog.Any("error", err))
			failing = true
		case err == nil:
			failing = false
		}
	}
}

// prune deletes the finished rows older than maxAge and those past the newest
// maxCount, a batch at a time, and reports how many it deleted. Age and order are by
// the database's clock (updated_at, set by the write that finished the row), not by a
// host's: a host whose clock is behind must not get its records pruned early.
func (b *Backend) prune(ctx context.Context) (int64, error) {
	var total int64
	if b.maxAge > 0 {
		for {
			n, err := b.pruneStep(ctx, `DELETE FROM `+b.s+`.jobs WHERE seq IN (
				SELECT seq FROM `+b.s+`.jobs WHERE state = 3 AND updated_at < now() - $1 * interval '1 microsecond'
				ORDER BY updated_at, seq LIMIT `+strconv.Itoa(pruneBatch)+` FOR UPDATE SKIP LOCKED)`, b.maxAge.Microseconds())
			total += n
			if err != nil {
				return total, err
			}
			if n < pruneBatch {
				break
			}
		}
	}
	for {
		// The newest row past the newest maxCount, read without a lock (a locking
		// read would lock every row its OFFSET skips, the records kept among them),
		// then the rows at or past it, oldest first, a batch at a time: the same rows
		// whichever host asks, but for those another host is pruning (skipped).
		var at time.Time
		var seq int64
		ctx1, cancel := context.WithTimeout(ctx, b.cfg.Lease)
		err := b.pool.QueryRow(ctx1, `SELECT updated_at, seq FROM `+b.s+`.jobs WHERE state = 3
			ORDER BY updated_at DESC, seq DESC OFFSET $1 LIMIT 1`, b.maxCount).Scan(&at, &seq)
		cancel()
		if errors.Is(err, pgx.ErrNoRows) {
			return total, nil
		}
		if err != nil {
			return total, err
		}
		n, err := b.pruneStep(ctx, `DELETE FROM `+b.s+`.jobs WHERE seq IN (
			SELECT seq FROM `+b.s+`.jobs WHERE state = 3 AND (updated_at, seq) <= ($1, $2)
			ORDER BY updated_at, seq LIMIT `+strconv.Itoa(pruneBatch)+` FOR UPDATE SKIP LOCKED)`, at, seq)
		total += n
		if err != nil {
			return total, err
		}
		if n < pruneBatch {
			return total, nil
		}
	}
}

// pruneStep runs one prune statement, bounded by a lease.
func (b *Backend) pruneStep(ctx context.Context, sql string, args ...any) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.Lease)
	defer cancel()
	tag, err := b.pool.Exec(ctx, sql, args...)
	return tag.RowsAffected(), err
}

var _ backend.StoreReporter = (*Backend)(nil)

// StoreStats reads the sizes of the schema's tables (pg_total_relation_size: indexes
// and TOAST included), the finished rows kept as records and the unique keys, in one
// statement, each count on an index.
func (b *Backend) StoreStats(ctx context.Context) (backend.StoreStats, error) {
	if b.isClosed() {
		return backend.StoreStats{}, backend.ErrShutDown
	}
	st := backend.StoreStats{Bytes: make(map[string]int64), Pruned: b.pruned.Load()}
	var names []string
	var sizes []int64
	err := b.pool.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM `+b.s+`.jobs WHERE state = 3),
			(SELECT count(*) FROM `+b.s+`.unique_keys),
			(SELECT coalesce(array_agg(c.relname::text ORDER BY c.relname), '{}') FROM pg_class c
				JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relkind = 'r'),
			(SELECT coalesce(array_agg(pg_total_relation_size(c.oid) ORDER BY c.relname), '{}') FROM pg_class c
				JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relkind = 'r')`,
		b.cfg.Schema).Scan(&st.Records, &st.UniqueKeys, &names, &sizes)
	if err != nil {
		return backend.StoreStats{}, b.transport("store stats", "", err)
	}
	for i, name := range names {
		if i < len(sizes) {
			st.Bytes[name] = sizes[i]
		}
	}
	return st, nil
}
