package postgres

import (
	"context"
	"sync"
	"time"

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
	done       chan ackResult // buffered 1
}

// ackResult says whether the row was still claimed under the token (deleted), or why
// the batch failed.
type ackResult struct {
	ok  bool
	err error
}

// ack deletes the claimed row seq if it is still claimed under token, in the next
// batch. It returns when the batch has, or when ctx ends (the ack may still land).
func (b *Backend) ack(ctx context.Context, seq, token int64) (bool, error) {
	req := &ackReq{seq: seq, token: token, done: make(chan ackResult, 1)}
	b.acks.mu.Lock()
	b.acks.pending = append(b.acks.pending, req)
	start := !b.acks.running
	b.acks.running = true
	b.acks.mu.Unlock()
	if start && !b.background(b.flushAcks) {
		b.acks.mu.Lock()
		b.acks.running = false
		b.acks.mu.Unlock()
		return false, backend.ErrShutDown
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
		deleted, err := b.deleteClaimed(batch)
		for _, r := range batch {
			r.done <- ackResult{ok: deleted[r.seq], err: err}
		}
	}
}

// deleteClaimed deletes the rows of batch still claimed under their tokens and
// returns those it deleted.
func (b *Backend) deleteClaimed(batch []*ackReq) (map[int64]bool, error) {
	ctx, cancel := context.WithTimeout(b.bg, ackTimeout)
	defer cancel()
	seqs := make([]int64, len(batch))
	toks := make([]int64, len(batch))
	for i, r := range batch {
		seqs[i], toks[i] = r.seq, r.token
	}
	rows, err := b.pool.Query(ctx, `DELETE FROM `+b.s+`.jobs j USING unnest($1::bigint[], $2::bigint[]) AS c(seq, tok)
		WHERE j.seq = c.seq AND j.claim_token = c.tok AND j.state = 1 AND j.lease_until > now() RETURNING j.seq`, seqs, toks)
	if err != nil {
		return nil, err
	}
	deleted := make(map[int64]bool, len(batch))
	for rows.Next() {
		var seq int64
		if err := rows.Scan(&seq); err != nil {
			rows.Close()
			return nil, err
		}
		deleted[seq] = true
	}
	return deleted, rows.Err()
}
