package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/wasmjobs/wasmjobs/backend"
)

var _ backend.UniquePublisher = (*Backend)(nil)

// uniqueTries bounds PublishUnique's tries: a try starts over when a key it found held
// is gone, or its hold ended, by the time it reads who holds it, or when the database
// broke a deadlock by failing it (the try did nothing).
const uniqueTries = 5

// errKeyMoved is a try of PublishUnique that met a key freed under it.
var errKeyMoved = errors.New("a unique key changed hands while it was published")

// qkey is a unique key of a queue; qid a job of a queue.
type (
	qkey struct{ queue, key string }
	qid  struct{ queue, id string }
)

// PublishUnique publishes, in one transaction, every publication whose key its queue
// does not hold, with the keys they take (see backend.UniquePublisher): all of them or
// none. A key no row holds is taken by an insert into its table's primary key, so that
// of concurrent publications of one key, on any number of hosts, the database lets one
// through and the others wait for its transaction and find the key held; a key whose
// hold has ended is taken by locking its row, which nothing else locks. A key still
// held is only read, never locked: its job's settle, which ends the hold, must never
// wait for a publish.
func (b *Backend) PublishUnique(ctx context.Context, pubs []backend.UniquePublication) ([]backend.UniqueResult, error) {
	// The checks of PublishBatch, before anything is written; rows[i] is pubs[i]'s.
	rows := make([]jobRow, len(pubs))
	for i, p := range pubs {
		r, err := b.jobRow(ctx, p.Publication, false)
		if err != nil {
			return nil, err
		}
		rows[i] = r
	}
	if len(pubs) == 0 {
		return nil, nil
	}
	var out []backend.UniqueResult
	var err error
	for try := 1; ; try++ {
		out, err = b.publishUnique(ctx, pubs, rows)
		if try < uniqueTries && (errors.Is(err, errKeyMoved) || retryable(err)) {
			continue
		}
		break
	}
	if errors.Is(err, errKeyMoved) {
		return nil, fmt.Errorf("publish unique to %q: %w, %d times running", pubs[0].Envelope.Queue, err, uniqueTries)
	}
	if err != nil {
		return nil, b.transport("publish unique", pubs[0].Envelope.Queue, err)
	}
	return out, nil
}

// keyTakers returns, for each key of pubs, the publication that may take it (the
// first of the key that is neither a repeat of an earlier publication's id, since one
// statement puts one job an id, nor of an id its queue holds live, which is dropped),
// and the keys, sorted: taken in one order by every publisher, so that two publishes
// taking the same keys never wait for each other in a cycle.
func keyTakers(pubs []backend.UniquePublication, live map[qid]bool) (map[qkey]int, []qkey) {
	first := make(map[qkey]int)
	seen := make(map[qid]bool)
	var keys []qkey
	for i, p := range pubs {
		id := qid{p.Envelope.Queue, p.Envelope.ID}
		repeat := seen[id] || live[id]
		seen[id] = true
		if p.Key == "" || repeat {
			continue
		}
		k := qkey{p.Envelope.Queue, p.Key}
		if _, ok := first[k]; !ok {
			first[k] = i
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, c qkey) int { return cmp.Or(cmp.Compare(a.queue, c.queue), cmp.Compare(a.key, c.key)) })
	return first, keys
}

// liveIDs returns those of pubs' jobs whose ids their queues hold live, as tx's
// snapshot sees them, without a lock.
func (b *Backend) liveIDs(ctx context.Context, tx pgx.Tx, pubs []backend.UniquePublication) (map[qid]bool, error) {
	qs, ids := make([]string, len(pubs)), make([]string, len(pubs))
	for i, p := range pubs {
		qs[i], ids[i] = p.Envelope.Queue, p.Envelope.ID
	}
	rows, err := tx.Query(ctx, `SELECT t.q, t.i FROM unnest($1::text[], $2::text[]) AS t(q, i)
		WHERE coalesce((SELECT x.state FROM `+b.s+`.jobs x WHERE x.queue = t.q AND x.id = t.i), 3) <> 3`, qs, ids)
	if err != nil {
		return nil, err
	}
	live := make(map[qid]bool)
	for rows.Next() {
		var id qid
		if err := rows.Scan(&id.queue, &id.id); err != nil {
			rows.Close()
			return nil, err
		}
		live[id] = true
	}
	return live, rows.Err()
}

// publishUnique is one try of PublishUnique, in one transaction.
func (b *Backend) publishUnique(ctx context.Context, pubs []backend.UniquePublication, rows []jobRow) ([]backend.UniqueResult, error) {
	out := make([]backend.UniqueResult, len(pubs))
	var queues map[string]bool // of the jobs queued
	err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		live, err := b.liveIDs(ctx, tx, pubs)
		if err != nil {
			return err
		}
		first, keys := keyTakers(pubs, live)
		taken, holder, err := b.takeKeys(ctx, tx, pubs, first, keys)
		if err != nil {
			return err
		}
		var put []jobRow
		var hk []bool
		takes := make(map[qid]qkey) // the jobs that take a key, and the key
		seen := make(map[qid]bool)
		queues = make(map[string]bool)
		for i, p := range pubs {
			id := qid{p.Envelope.Queue, p.Envelope.ID}
			out[i].ID = p.Envelope.ID
			if seen[id] || live[id] {
				out[i].Duplicate = true // a repeat of an earlier publication's id, or of a job held
				continue
			}
			seen[id] = true
			k := qkey{p.Envelope.Queue, p.Key}
			switch {
			case p.Key == "":
			case taken[k] && first[k] == i:
				takes[id] = k
			case taken[k]:
				out[i] = backend.UniqueResult{ID: pubs[first[k]].Envelope.ID, Duplicate: true} // a repeat of the key within pubs
				continue
			default:
				out[i] = backend.UniqueResult{ID: holder[k], Duplicate: true}
				continue
			}
			_, holds := takes[id]
			put, hk = append(put, rows[i]), append(hk, holds)
			queues[p.Envelope.Queue] = true
		}
		if len(put) == 0 {
			return nil
		}
		cols, err := columns(put)
		if err != nil {
			return err
		}
		done, err := b.putIDs(ctx, tx, append(cols, hk))
		if err != nil {
			return err
		}
		// A job not put (a repeat of an id its queue holds live, dropped as any repeat
		// is) holds no key: the key it took is let go, so that a key is only ever held
		// by a job that knows it (holds_key) and whose end ends the hold; it is
		// reported a duplicate, of itself, since nothing was queued.
		var freeQ, freeK, freeI []string
		for i, p := range pubs {
			id := qid{p.Envelope.Queue, p.Envelope.ID}
			if out[i].Duplicate || done[id] {
				continue
			}
			out[i].Duplicate = true
			if k, ok := takes[id]; ok {
				freeQ, freeK, freeI = append(freeQ, k.queue), append(freeK, k.key), append(freeI, id.id)
			}
		}
		batch := &pgx.Batch{}
		if len(freeQ) > 0 {
			batch.Queue(`DELETE FROM `+b.s+`.unique_keys u USING unnest($1::text[], $2::text[], $3::text[]) AS t(q, k, i)
				WHERE u.queue = t.q AND u.key = t.k AND u.job_id = t.i`, freeQ, freeK, freeI)
		}
		for q := range queues {
			batch.Queue(`SELECT pg_notify($1, $2)`, b.channel, q)
		}
		return tx.SendBatch(ctx, batch).Close()
	})
	if err != nil {
		return nil, err
	}
	for q := range queues {
		b.wakeQueue(q)
	}
	return out, nil
}

// takeKeys takes, in tx, those of keys that are free, for their first publication in
// pubs, and reads who holds the others. A key no row holds is inserted (a concurrent
// insert of it makes this one wait for that transaction, then find it held); a key
// whose hold ended is taken, behind a lock of its name, by locking its row, which no
// settle ever locks (a settle only ends holds that run). A key held is read without a
// lock: errKeyMoved if, by the read, its row went or its hold ended (the caller tries
// again).
func (b *Backend) takeKeys(ctx context.Context, tx pgx.Tx, pubs []backend.UniquePublication, first map[qkey]int, keys []qkey) (map[qkey]bool, map[qkey]string, error) {
	taken := make(map[qkey]bool, len(keys))
	holder := make(map[qkey]string, len(keys))
	if len(keys) == 0 {
		return taken, holder, nil
	}
	args := func(ks []qkey) []any {
		n := len(ks)
		queues, names, ids, holds := make([]string, n), make([]string, n), make([]string, n), make([]int64, n)
		for i, k := range ks {
			p := pubs[first[k]]
			queues[i], names[i], ids[i], holds[i] = k.queue, k.key, p.Envelope.ID, max(p.For, 0).Microseconds()
		}
		return []any{queues, names, ids, holds}
	}
	collect := func(sql string, ks []qkey) error {
		rows, err := tx.Query(ctx, sql, args(ks)...)
		if err != nil {
			return err
		}
		for rows.Next() {
			var k qkey
			if err := rows.Scan(&k.queue, &k.key); err != nil {
				rows.Close()
				return err
			}
			taken[k] = true
		}
		return rows.Err()
	}
	rest := func() []qkey {
		var r []qkey
		for _, k := range keys {
			if !taken[k] {
				r = append(r, k)
			}
		}
		return r
	}
	if err := collect(`INSERT INTO `+b.s+`.unique_keys (queue, key, job_queue, job_id, hold_us)
		SELECT q, k, q, i, h FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[]) WITH ORDINALITY AS t(q, k, i, h, ord)
		ORDER BY ord
		ON CONFLICT (queue, key) DO NOTHING RETURNING queue, key`, keys); err != nil {
		return nil, nil, err
	}
	// The hold's end is compared with the clock, not the transaction's start: a hold
	// that ended (the end is its finishing transaction's start) after this transaction
	// began has ended. The keys whose hold ended are first locked by name (advisory
	// locks, this transaction's, in the keys' order), so that of publishes taking one
	// of them the others wait here, not on its row: a row lock waited for is kept even
	// when the row no longer matches (the winner took the key), and the row's holder's
	// settle would then wait for this publish. Behind the name's lock, a new snapshot
	// sees the winner's take, and the row is no longer a candidate to lock.
	ended, err := b.endedKeys(ctx, tx, rest())
	if err != nil {
		return nil, nil, err
	}
	if len(ended) > 0 {
		names := make([]string, len(ended))
		for i, k := range ended {
			names[i] = b.cfg.Schema + "\x1f" + k.queue + "\x1f" + k.key
		}
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended(n, 1)) FROM unnest($1::text[]) AS t(n)`, names); err != nil {
			return nil, nil, err
		}
		if err := collect(`WITH t AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[]) AS t(q, k, i, h)),
			l AS (
				SELECT u.queue, u.key, t.i, t.h FROM `+b.s+`.unique_keys u JOIN t ON u.queue = t.q AND u.key = t.k
				WHERE u.until IS NOT NULL AND u.until <= clock_timestamp()
				ORDER BY u.queue, u.key FOR UPDATE OF u)
			UPDATE `+b.s+`.unique_keys u SET job_queue = l.queue, job_id = l.i, hold_us = l.h, until = NULL
			FROM l WHERE u.queue = l.queue AND u.key = l.key
			RETURNING u.queue, u.key`, ended); err != nil {
			return nil, nil, err
		}
	}
	held := rest()
	if len(held) == 0 {
		return taken, holder, nil
	}
	hq, hk := make([]string, len(held)), make([]string, len(held))
	for i, k := range held {
		hq[i], hk[i] = k.queue, k.key
	}
	rows, err := tx.Query(ctx, `SELECT u.queue, u.key, u.job_id FROM `+b.s+`.unique_keys u
		JOIN unnest($1::text[], $2::text[]) AS t(q, k) ON u.queue = t.q AND u.key = t.k
		WHERE u.until IS NULL OR u.until > clock_timestamp()`, hq, hk)
	if err != nil {
		return nil, nil, err
	}
	for rows.Next() {
		var k qkey
		var id string
		if err := rows.Scan(&k.queue, &k.key, &id); err != nil {
			rows.Close()
			return nil, nil, err
		}
		holder[k] = id
	}
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	for _, k := range held {
		if _, ok := holder[k]; !ok {
			return nil, nil, errKeyMoved
		}
	}
	return taken, holder, nil
}

// putIDs upserts the jobs of cols (their rows' columns, then which take a unique key)
// in tx and returns the jobs it put: those not dropped as repeats.
func (b *Backend) putIDs(ctx context.Context, tx pgx.Tx, cols []any) (map[qid]bool, error) {
	rows, err := tx.Query(ctx, `WITH `+b.upsert(manySource(1, "", true), false)+`
		SELECT queue, id FROM ins UNION ALL SELECT queue, id FROM rev`, cols...)
	if err != nil {
		return nil, err
	}
	put := make(map[qid]bool)
	for rows.Next() {
		var id qid
		if err := rows.Scan(&id.queue, &id.id); err != nil {
			rows.Close()
			return nil, err
		}
		put[id] = true
	}
	return put, rows.Err()
}

// pruneKeys deletes the unique keys whose hold has ended, a batch at a time, and
// reports how many it deleted; a key being taken again meanwhile is skipped (SKIP
// LOCKED), and the retake keeps it.
func (b *Backend) pruneKeys(ctx context.Context) (int64, error) {
	var total int64
	for {
		n, err := b.pruneStep(ctx, `DELETE FROM `+b.s+`.unique_keys WHERE (queue, key) IN (
			SELECT queue, key FROM `+b.s+`.unique_keys WHERE until IS NOT NULL AND until <= now()
			LIMIT `+strconv.Itoa(pruneBatch)+` FOR UPDATE SKIP LOCKED)`)
		total += n
		if err != nil {
			return total, fmt.Errorf("pruning unique keys: %w", err)
		}
		if n < pruneBatch {
			return total, nil
		}
	}
}

// endedKeys returns those of keys whose hold has ended, in keys' order, without a lock.
func (b *Backend) endedKeys(ctx context.Context, tx pgx.Tx, keys []qkey) ([]qkey, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	qs, ks := make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		qs[i], ks[i] = k.queue, k.key
	}
	rows, err := tx.Query(ctx, `SELECT t.q, t.k FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS t(q, k, o)
		JOIN `+b.s+`.unique_keys u ON u.queue = t.q AND u.key = t.k
		WHERE u.until IS NOT NULL AND u.until <= clock_timestamp() ORDER BY t.o`, qs, ks)
	if err != nil {
		return nil, err
	}
	var out []qkey
	for rows.Next() {
		var k qkey
		if err := rows.Scan(&k.queue, &k.key); err != nil {
			rows.Close()
			return nil, err
		}
		out = append(out, k)
	}
	return out, rows.Err()
}
