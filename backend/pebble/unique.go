package pebble

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"time"

	pebbledb "github.com/cockroachdb/pebble/v2"

	"github.com/wasmjobs/wasmjobs/backend"
)

// Unique keys (backend.UniquePublisher). Each key a queue holds is stored as
//
//	u <queue> 0x00 <key> -> uniqueV1, job id, For (ns), until (time; absent while the job lives)
//
// written in the same batch as the job's publish, and again, with its until, in the
// batch of the settle that finishes the job (ack or dead letter). Pebble has no
// transactions: the check of a key and the commit of its publish are made one step by
// our own lock per key (uniqIndex.busy), held from the check to the end of the commit.

const (
	kindUnique = 'u'
	// uniqueV1 is the first encoding of a unique key's value.
	uniqueV1 byte = 1
	// uniqPruneBatch bounds the expired keys one prune commit deletes.
	uniqPruneBatch = 1024
)

var _ backend.UniquePublisher = (*Backend)(nil)

func uniqueKey(queue, key string) string {
	return string(kindUnique) + queue + "\x00" + key
}

func encodeUnique(e *uniqEntry) []byte {
	dst := []byte{uniqueV1}
	dst = appendString(dst, e.id)
	dst = binary.AppendVarint(dst, int64(e.For))
	return appendTime(dst, e.until)
}

func decodeUnique(skey string, b []byte) (*uniqEntry, error) {
	r := reader{b: b}
	if v := r.byte(); r.err == nil && v != uniqueV1 {
		return nil, fmt.Errorf("unique key encoding version %d is not known to this build", v)
	}
	e := &uniqEntry{skey: skey, id: r.string()}
	if r.err == nil {
		v, n := binary.Varint(r.b)
		if n <= 0 {
			r.err = errShort
		} else {
			e.For, r.b = time.Duration(v), r.b[n:]
		}
	}
	e.until = r.time()
	if err := r.finish("unique key"); err != nil {
		return nil, err
	}
	return e, nil
}

// uniqEntry is a unique key and the job that holds it.
type uniqEntry struct {
	skey string // the store key
	id   string
	For  time.Duration
	// until is when the key is freed; zero while the job is not finished.
	until time.Time
}

func (e *uniqEntry) held(now time.Time) bool { return e.until.IsZero() || now.Before(e.until) }

// uniqIndex is the unique keys in memory, as on disk once committed.
type uniqIndex struct {
	mu      sync.Mutex
	entries map[string]*uniqEntry // by store key
	byID    map[string]*uniqEntry // the keys of unfinished jobs, by job id
	// busy holds the store keys whose check-and-publish (or prune) is under way; the
	// channel is closed when it ends.
	busy map[string]chan struct{}
}

func (x *uniqIndex) init() {
	x.entries = make(map[string]*uniqEntry)
	x.byID = make(map[string]*uniqEntry)
	x.busy = make(map[string]chan struct{})
}

// load indexes a key found at Open.
func (x *uniqIndex) load(k, v []byte) error {
	e, err := decodeUnique(string(k), v)
	if err != nil {
		return err
	}
	x.entries[e.skey] = e
	if e.until.IsZero() {
		x.byID[e.id] = e
	}
	return nil
}

// lock takes the lock of every store key in keys, sorted (so that two callers never
// wait for each other), or returns ctx's error having taken none.
func (x *uniqIndex) lock(ctx context.Context, keys []string) error {
	for i, k := range keys {
		for {
			x.mu.Lock()
			ch, ok := x.busy[k]
			if !ok {
				x.busy[k] = make(chan struct{})
				x.mu.Unlock()
				break
			}
			x.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				x.unlock(keys[:i])
				return ctx.Err()
			}
		}
	}
	return nil
}

func (x *uniqIndex) unlock(keys []string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, k := range keys {
		if ch, ok := x.busy[k]; ok {
			delete(x.busy, k)
			close(ch)
		}
	}
}

// PublishUnique publishes, in one synced batch, every publication whose key its queue
// does not hold, with the keys they take (see backend.UniquePublisher): all of them or
// none. The keys are locked from their check to the end of the commit.
func (b *Backend) PublishUnique(ctx context.Context, pubs []backend.UniquePublication) ([]backend.UniqueResult, error) {
	if err := b.enter(); err != nil {
		return nil, err
	}
	defer b.ops.Done()
	var keys []string
	for _, p := range pubs {
		if _, err := b.queues.Lookup(p.Envelope.Queue); err != nil {
			return nil, err
		}
		if err := backend.CheckDelay(p.Delay, backend.MaxDelay); err != nil {
			return nil, fmt.Errorf("publishing job %s to %q: %w", p.Envelope.ID, p.Envelope.Queue, err)
		}
		if p.Key != "" {
			keys = append(keys, uniqueKey(p.Envelope.Queue, p.Key))
		}
	}
	if err := b.space.check(); err != nil {
		return nil, err
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	if err := b.uniq.lock(ctx, keys); err != nil {
		return nil, err
	}
	// The keys are ours until the commit ends, whichever way: apply or onFail
	// unlocks them, even when ctx ends first and the commit finishes on its own.
	out := make([]backend.UniqueResult, len(pubs))
	var queued []backend.Publication
	var taken []*uniqEntry
	now := time.Now()
	b.uniq.mu.Lock()
	mine := make(map[string]*uniqEntry)
	for i, p := range pubs {
		out[i].ID = p.Envelope.ID
		if p.Key == "" {
			queued = append(queued, p.Publication)
			continue
		}
		sk := uniqueKey(p.Envelope.Queue, p.Key)
		if e, ok := mine[sk]; ok {
			out[i] = backend.UniqueResult{ID: e.id, Duplicate: true}
			continue
		}
		if e, ok := b.uniq.entries[sk]; ok && e.held(now) {
			out[i] = backend.UniqueResult{ID: e.id, Duplicate: true}
			continue
		}
		e := &uniqEntry{skey: sk, id: p.Envelope.ID, For: max(p.For, 0)}
		mine[sk] = e
		taken = append(taken, e)
		queued = append(queued, p.Publication)
	}
	b.uniq.mu.Unlock()
	if len(queued) == 0 {
		b.uniq.unlock(keys)
		return out, nil
	}
	batch := b.db.NewBatch()
	apply, undo, _, err := b.stagePublications(ctx, batch, queued)
	if err != nil {
		batch.Close()
		b.uniq.unlock(keys)
		return nil, err
	}
	for _, e := range taken {
		batch.Set([]byte(e.skey), encodeUnique(e), nil)
	}
	err = b.commit(ctx, batch, pebbledb.Sync, "publish unique", pubs[0].Envelope.Queue, func() {
		b.uniq.mu.Lock()
		for _, e := range taken {
			if old, ok := b.uniq.entries[e.skey]; ok && b.uniq.byID[old.id] == old {
				delete(b.uniq.byID, old.id)
			}
			b.uniq.entries[e.skey] = e
			b.uniq.byID[e.id] = e
		}
		b.uniq.mu.Unlock()
		apply()
		b.uniq.unlock(keys)
	}, func() {
		undo()
		b.uniq.unlock(keys)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// stageUniqFinish starts, in batch, the expiry of the key held by job id, if it holds
// one: the job is being acknowledged or dead-lettered at now. It returns what to do
// once the batch is committed.
func (b *Backend) stageUniqFinish(batch *pebbledb.Batch, id string, now time.Time) func() {
	b.uniq.mu.Lock()
	e, ok := b.uniq.byID[id]
	b.uniq.mu.Unlock()
	if !ok {
		return func() {}
	}
	done := *e
	done.until = now.Add(e.For)
	batch.Set([]byte(e.skey), encodeUnique(&done), nil)
	return func() {
		b.uniq.mu.Lock()
		defer b.uniq.mu.Unlock()
		if b.uniq.byID[id] == e {
			delete(b.uniq.byID, id)
		}
		e.until = done.until
	}
}

// stageUniqFree deletes, in batch, the key held by job id, if it holds one: the
// waiting job is being deleted. It returns what to do once the batch is committed.
func (b *Backend) stageUniqFree(batch *pebbledb.Batch, id string) func() {
	b.uniq.mu.Lock()
	e, ok := b.uniq.byID[id]
	b.uniq.mu.Unlock()
	if !ok {
		return func() {}
	}
	batch.Delete([]byte(e.skey), nil)
	return func() {
		b.uniq.mu.Lock()
		defer b.uniq.mu.Unlock()
		if b.uniq.byID[id] == e {
			delete(b.uniq.byID, id)
		}
		if b.uniq.entries[e.skey] == e {
			delete(b.uniq.entries, e.skey)
		}
	}
}

// stageUniqRename moves, in batch, the key held by job old to job next, published in
// its place by a settle.
func (b *Backend) stageUniqRename(batch *pebbledb.Batch, old, next string) func() {
	b.uniq.mu.Lock()
	e, ok := b.uniq.byID[old]
	b.uniq.mu.Unlock()
	if !ok || old == next {
		return func() {}
	}
	moved := *e
	moved.id = next
	batch.Set([]byte(e.skey), encodeUnique(&moved), nil)
	return func() {
		b.uniq.mu.Lock()
		defer b.uniq.mu.Unlock()
		delete(b.uniq.byID, old)
		e.id = next
		b.uniq.byID[next] = e
	}
}

// pruneUniq deletes the keys whose expiry passed, a batch at a time; a key whose
// publish is under way is left for the next round.
func (b *Backend) pruneUniq(now time.Time) error {
	for {
		var gone []*uniqEntry
		var keys []string
		b.uniq.mu.Lock()
		for sk, e := range b.uniq.entries {
			if len(gone) == uniqPruneBatch {
				break
			}
			if _, busy := b.uniq.busy[sk]; busy || e.held(now) {
				continue
			}
			b.uniq.busy[sk] = make(chan struct{})
			gone = append(gone, e)
			keys = append(keys, sk)
		}
		b.uniq.mu.Unlock()
		if len(gone) == 0 {
			return nil
		}
		batch := b.db.NewBatch()
		for _, e := range gone {
			batch.Delete([]byte(e.skey), nil)
		}
		err := b.apply(batch, pebbledb.NoSync)
		batch.Close()
		if err == nil {
			b.uniq.mu.Lock()
			for _, e := range gone {
				if b.uniq.entries[e.skey] == e {
					delete(b.uniq.entries, e.skey)
				}
			}
			b.uniq.mu.Unlock()
		}
		b.uniq.unlock(keys)
		if err != nil || len(gone) < uniqPruneBatch {
			return err
		}
	}
}

// UniqueKeys counts the unique keys the backend keeps, expired ones not yet pruned
// included: for tests and inspection.
func (b *Backend) UniqueKeys() int {
	b.uniq.mu.Lock()
	defer b.uniq.mu.Unlock()
	return len(b.uniq.entries)
}
