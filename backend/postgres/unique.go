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

// uniqueTries bounds PublishUnique's attempts when a key it found held is gone by the
// time it reads who holds it (the holder finished and its hold ended in between):
// each try starts over, and a key that keeps changing hands that fast is an error.
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
// none. A key is taken by an insert into its table's primary key, so that of
// concurrent publications of one key, on any number of hosts, the database lets one
// through; the others wait for its transaction and find the key held.
func (b *Backend) PublishUnique(ctx context.Context, pubs []backend.UniquePublication) ([]backend.UniqueResult, error) {
	plain := make([]backend.Publication, len(pubs))
	for i, p := range pubs {
		plain[i] = p.Publication
	}
	// The checks of PublishBatch, before anything is written.
	if _, _, err := b.jobRows(ctx, plain, false); err != nil {
		return nil, err
	}
	if len(pubs) == 0 {
		return nil, nil
	}
	// A key's first publication in pubs is the one that may take it.
	first := make(map[qkey]int)
	var keys []qkey
	for i, p := range pubs {
		if p.Key == "" {
			continue
		}
		k := qkey{p.Envelope.Queue, p.Key}
		if _, ok := first[k]; !ok {
			first[k] = i
			keys = append(keys, k)
		}
	}
	// Taken in one order by every publisher, so that two batches taking the same keys
	// cannot wait for each other.
	slices.SortFunc(keys, func(a, c qkey) int { return cmp.Or(cmp.Compare(a.queue, c.queue), cmp.Compare(a.key, c.key)) })
	var out []backend.UniqueResult
	var err error
	for range uniqueTries {
		out, err = b.publishUnique(ctx, pubs, first, keys)
		if !errors.Is(err, errKeyMoved) {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// publishUnique is one try of PublishUnique, in one transaction.
func (b *Backend) publishUnique(ctx context.Context, pubs []backend.UniquePublication, first map[qkey]int, keys []qkey) ([]backend.UniqueResult, error) {
	out := make([]backend.UniqueResult, len(pubs))
	var queues map[string]bool // of the jobs queued
	err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		holder := make(map[qkey]string, len(keys))
		taken := make(map[qkey]bool, len(keys))
		if len(keys) > 0 {
			n := len(keys)
			queues, ks, jobIDs, holds := make([]string, n), make([]string, n), make([]string, n), make([]int64, n)
			for i, k := range keys {
				p := pubs[first[k]]
				queues[i], ks[i], jobIDs[i], holds[i] = k.queue, k.key, p.Envelope.ID, max(p.For, 0).Microseconds()
			}
			// A key is free when no row holds it or its hold has ended; a row being
			// taken by another transaction makes this one wait for its end.
			rows, err := tx.Query(ctx, `INSERT INTO `+b.s+`.unique_keys AS u (queue, key, job_queue, job_id, hold_us)
				SELECT q, k, q, i, h FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[]) WITH ORDINALITY AS t(q, k, i, h, ord)
				ORDER BY ord
				ON CONFLICT (queue, key) DO UPDATE SET job_queue = EXCLUDED.job_queue, job_id = EXCLUDED.job_id,
					hold_us = EXCLUDED.hold_us, until = NULL
				WHERE u.until IS NOT NULL AND u.until <= now()
				RETURNING queue, key`, queues, ks, jobIDs, holds)
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
			if err := rows.Err(); err != nil {
				return err
			}
			// The keys held already: who holds them, by a read that sees what the
			// transactions this one waited for committed.
			var heldQ, heldK []string
			for _, k := range keys {
				if !taken[k] {
					heldQ, heldK = append(heldQ, k.queue), append(heldK, k.key)
				}
			}
			if len(heldQ) > 0 {
				rows, err := tx.Query(ctx, `SELECT u.queue, u.key, u.job_id FROM `+b.s+`.unique_keys u
					JOIN unnest($1::text[], $2::text[]) AS t(q, k) ON u.queue = t.q AND u.key = t.k`, heldQ, heldK)
				if err != nil {
					return err
				}
				for rows.Next() {
					var k qkey
					var id string
					if err := rows.Scan(&k.queue, &k.key, &id); err != nil {
						rows.Close()
						return err
					}
					holder[k] = id
				}
				if err := rows.Err(); err != nil {
					return err
				}
				for i := range heldQ {
					if _, ok := holder[qkey{heldQ[i], heldK[i]}]; !ok {
						return errKeyMoved
					}
				}
			}
		}
		var queued []backend.Publication
		takes := make(map[qid]qkey) // the jobs that take a key, and the key
		for i, p := range pubs {
			out[i].ID = p.Envelope.ID
			if p.Key == "" {
				queued = append(queued, p.Publication)
				continue
			}
			k := qkey{p.Envelope.Queue, p.Key}
			if taken[k] && first[k] == i {
				queued = append(queued, p.Publication)
				takes[qid{p.Envelope.Queue, p.Envelope.ID}] = k
				continue
			}
			out[i].Duplicate = true
			if taken[k] {
				out[i].ID = pubs[first[k]].Envelope.ID // a repeat of the key within pubs
			} else {
				out[i].ID = holder[k]
			}
		}
		if len(queued) == 0 {
			return nil
		}
		rows, qs, err := b.jobRows(ctx, queued, false)
		if err != nil {
			return err
		}
		queues = qs
		cols, err := columns(rows)
		if err != nil {
			return err
		}
		hk := make([]bool, len(rows))
		for i, r := range rows {
			_, hk[i] = takes[qid{r.queue, r.id}]
		}
		put, err := b.putIDs(ctx, tx, append(cols, hk))
		if err != nil {
			return err
		}
		// A job not put (a repeat of an id its queue holds live, dropped as any repeat
		// is) holds no key: the key it took is let go, so that a key is only ever held
		// by a job that knows it (holds_key) and whose end ends the hold.
		var freeQ, freeK, freeI []string
		for id, k := range takes {
			if !put[id] {
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
		if errors.Is(err, errKeyMoved) {
			return nil, err
		}
		return nil, b.transport("publish unique", pubs[0].Envelope.Queue, err)
	}
	for q := range queues {
		b.wakeQueue(q)
	}
	return out, nil
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
