package pebble

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	pebbledb "github.com/cockroachdb/pebble/v2"

	"github.com/wasmjobs/wasmjobs/backend"
)

// Groups (backend.GroupStore): workflows and batches. On disk:
//
//	g <seq:8> <id>    -> the group as published (JSON): its kind, members and
//	                     creation time, and its state once an operator cancelled it
//
// A member's state is its job's record, written in the same batch as each of its
// settles, so a group is read, never updated, as its jobs run. The sequence is the
// publish's, so the key order is the listing's (ids made in one millisecond do not
// sort by when they were made); an index in memory, rebuilt at Open, maps each id to
// its sequence.
const kindGroup = 'g'

func groupKey(seq uint64, id string) []byte {
	k := binary.BigEndian.AppendUint64([]byte{kindGroup}, seq)
	return append(k, id...)
}

func parseGroupKey(k []byte) (seq uint64, id string, err error) {
	if len(k) < 10 || k[0] != kindGroup {
		return 0, "", fmt.Errorf("group key %x: bad layout", k)
	}
	return binary.BigEndian.Uint64(k[1:9]), string(k[9:]), nil
}

// groupIndex maps each group's id to the sequence of its key.
type groupIndex struct {
	mu  sync.Mutex
	seq map[string]uint64
}

func (x *groupIndex) get(id string) (uint64, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	seq, ok := x.seq[id]
	return seq, ok
}

// put indexes id at seq, or reports false when id is indexed already.
func (x *groupIndex) put(id string, seq uint64) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.seq == nil {
		x.seq = make(map[string]uint64)
	}
	if _, ok := x.seq[id]; ok {
		return false
	}
	x.seq[id] = seq
	return true
}

func (x *groupIndex) forget(id string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	delete(x.seq, id)
}

// key returns the key of the group id, or an error wrapping ErrNotFound.
func (x *groupIndex) key(id string) ([]byte, error) {
	seq, ok := x.get(id)
	if !ok {
		return nil, fmt.Errorf("group %q: %w", id, backend.ErrNotFound)
	}
	return groupKey(seq, id), nil
}

var _ backend.GroupStore = (*Backend)(nil)

// PublishGroup publishes deps as PublishDependents does, with g in the same batch (see
// backend.GroupStore).
func (b *Backend) PublishGroup(ctx context.Context, g backend.GroupRecord, deps []backend.Dependent) error {
	if g.ID == "" {
		return errors.New("a group needs an id")
	}
	if g.Kind != backend.GroupWorkflow && g.Kind != backend.GroupBatch {
		return fmt.Errorf("group %s: kind %q is neither %q nor %q", g.ID, g.Kind, backend.GroupWorkflow, backend.GroupBatch)
	}
	if len(g.Members) != len(deps) {
		return fmt.Errorf("group %s has %d members and %d jobs", g.ID, len(g.Members), len(deps))
	}
	for i, m := range g.Members {
		if m.ID != deps[i].Envelope.ID || m.Queue != deps[i].Envelope.Queue {
			return fmt.Errorf("group %s: member %d is job %s of %q, its job is %s of %q", g.ID, i, m.ID, m.Queue, deps[i].Envelope.ID, deps[i].Envelope.Queue)
		}
	}
	if err := b.enter(); err != nil {
		return err
	}
	defer b.ops.Done()
	seq := b.seq.Add(1)
	if !b.groups.put(g.ID, seq) {
		return fmt.Errorf("group %s exists already: %w", g.ID, backend.ErrJobState)
	}
	g.State = backend.GroupRunning
	if g.CreatedAt.IsZero() {
		g.CreatedAt = time.Now()
	}
	g.FinishedAt = time.Time{}
	for i := range g.Members {
		g.Members[i].State, g.Members[i].Reason = backend.JobPending, ""
		if len(deps[i].Await.IDs) > 0 {
			g.Members[i].State = backend.JobWaiting
		}
	}
	value, err := json.Marshal(g)
	if err != nil {
		b.groups.forget(g.ID)
		return fmt.Errorf("group %s: %w", g.ID, err)
	}
	err = b.publishDependents(ctx, deps, func(batch *pebbledb.Batch) { batch.Set(groupKey(seq, g.ID), value, nil) })
	if err != nil && !errors.Is(err, errStillWriting) {
		b.groups.forget(g.ID)
	}
	return err
}

// Group returns the group id with its members' live states.
func (b *Backend) Group(ctx context.Context, id string) (backend.GroupRecord, error) {
	if err := b.enter(); err != nil {
		return backend.GroupRecord{}, err
	}
	defer b.ops.Done()
	key, err := b.groups.key(id)
	if err != nil {
		return backend.GroupRecord{}, err
	}
	v, err := b.get(key)
	if errors.Is(err, pebbledb.ErrNotFound) {
		return backend.GroupRecord{}, fmt.Errorf("group %q: %w", id, backend.ErrNotFound)
	}
	if err != nil {
		return backend.GroupRecord{}, &backend.TransportError{Op: "group", Err: err}
	}
	return b.decodeGroup(ctx, id, v)
}

// decodeGroup reads a stored group and its members' states from their records.
func (b *Backend) decodeGroup(ctx context.Context, id string, v []byte) (backend.GroupRecord, error) {
	var g backend.GroupRecord
	if err := json.Unmarshal(v, &g); err != nil {
		return g, fmt.Errorf("group %q in %s: %w", id, b.dir, err)
	}
	for i := range g.Members {
		if i%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return g, err
			}
		}
		m := &g.Members[i]
		rv, err := b.get(recordKey(m.ID))
		if err != nil {
			// Pruned past the record retention: it had ended long since, how is not
			// kept.
			m.State, m.Reason = backend.JobUnfinished, "its record is no longer kept"
			continue
		}
		rec, err := decodeRecord(rv)
		if err != nil {
			return g, fmt.Errorf("job %q in %s: %w", m.ID, b.dir, err)
		}
		m.State, m.Reason = rec.State, ""
		if !rec.State.Finished() && rec.State != backend.JobWaiting && b.ids.claimed(m.ID) {
			m.State = backend.JobRunning
		}
		if rec.State != backend.JobSucceeded {
			m.Reason = rec.Reason
		}
		if rec.FinishedAt.After(g.FinishedAt) {
			g.FinishedAt = rec.FinishedAt
		}
	}
	g.State = groupState(g)
	if g.State == backend.GroupRunning {
		g.FinishedAt = time.Time{}
	}
	return g, nil
}

// groupState is the state of g from its members' (callbacks do not count), unless an
// operator cancelled it.
func groupState(g backend.GroupRecord) backend.GroupState {
	state := backend.GroupSucceeded
	for _, m := range g.Members {
		if m.Role != "" {
			continue
		}
		switch {
		case !m.State.Finished() && m.State != backend.JobUnfinished:
			return cmpState(g.State, backend.GroupRunning)
		case m.State != backend.JobSucceeded:
			state = backend.GroupFailed
		}
	}
	return cmpState(g.State, state)
}

// cmpState keeps a cancelled group cancelled.
func cmpState(stored, derived backend.GroupState) backend.GroupState {
	if stored == backend.GroupCancelled {
		return stored
	}
	return derived
}

// ListGroups returns a page of the groups of kind, newest first.
func (b *Backend) ListGroups(ctx context.Context, kind backend.GroupKind, cursor string, limit int) (backend.GroupPage, error) {
	if err := b.enter(); err != nil {
		return backend.GroupPage{}, err
	}
	defer b.ops.Done()
	if limit <= 0 {
		limit = backend.DefaultJobPage
	}
	lower := []byte{kindGroup}
	upper := prefixEnd(lower)
	if cursor != "" {
		k, err := b.groups.key(cursor)
		if err != nil {
			return backend.GroupPage{}, fmt.Errorf("cursor: %w", err)
		}
		upper = k
	}
	it, err := b.db.NewIter(&pebbledb.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return backend.GroupPage{}, &backend.TransportError{Op: "list groups", Err: err}
	}
	defer it.Close()
	var page backend.GroupPage
	for valid := it.Last(); valid; valid = it.Prev() {
		_, id, err := parseGroupKey(it.Key())
		if err != nil {
			return backend.GroupPage{}, fmt.Errorf("in %s: %w", b.dir, err)
		}
		v, err := it.ValueAndErr()
		if err != nil {
			return backend.GroupPage{}, &backend.TransportError{Op: "list groups", Err: err}
		}
		var head struct {
			Kind backend.GroupKind `json:"kind"`
		}
		if err := json.Unmarshal(v, &head); err != nil {
			return backend.GroupPage{}, fmt.Errorf("group %q in %s: %w", id, b.dir, err)
		}
		if head.Kind != kind {
			continue
		}
		if len(page.Groups) == limit {
			// One more of the kind exists: the next page starts below the last one.
			page.Next = page.Groups[len(page.Groups)-1].ID
			break
		}
		g, err := b.decodeGroup(ctx, id, v)
		if err != nil {
			return backend.GroupPage{}, err
		}
		page.Groups = append(page.Groups, g)
	}
	if err := it.Error(); err != nil {
		return backend.GroupPage{}, &backend.TransportError{Op: "list groups", Err: err}
	}
	return page, nil
}

// CancelGroup marks the running group id cancelled, in a synced write, then cancels
// each member that has not ended and is not running (see backend.GroupStore): the
// waiting ones first, so that none is released by the cancel of what it awaits, and
// one being released is cancelled once it is on its queue. Should it stop half way
// (ctx, a crash), calling it again cancels the rest: a cancelled group with members
// left to cancel is not refused.
func (b *Backend) CancelGroup(ctx context.Context, id, reason string) (running []string, err error) {
	g, err := b.Group(ctx, id)
	if err != nil {
		return nil, err
	}
	left := false
	for _, m := range g.Members {
		left = left || (!m.State.Finished() && m.State != backend.JobRunning && m.State != backend.JobUnfinished)
	}
	if g.State != backend.GroupRunning && !(g.State == backend.GroupCancelled && left) {
		return nil, fmt.Errorf("%s %q is %s: %w", g.Kind, id, g.State, backend.ErrJobState)
	}
	if reason == "" {
		reason = fmt.Sprintf("%s %s cancelled by an operator", g.Kind, id)
	}
	if g.State == backend.GroupRunning {
		if err := b.markCancelled(ctx, g); err != nil {
			return nil, err
		}
	}
	for _, waitingFirst := range []bool{true, false} {
		for _, m := range g.Members {
			if m.State.Finished() || (m.State == backend.JobWaiting) != waitingFirst {
				continue
			}
			_, r, err := b.cancelAny(ctx, m.ID, reason, false)
			if err != nil {
				return running, err
			}
			running = append(running, r...)
		}
	}
	return running, nil
}

// markCancelled writes g, as read, cancelled now.
func (b *Backend) markCancelled(ctx context.Context, g backend.GroupRecord) error {
	if err := b.enter(); err != nil {
		return err
	}
	defer b.ops.Done()
	key, err := b.groups.key(g.ID)
	if err != nil {
		return err
	}
	g.State, g.FinishedAt = backend.GroupCancelled, time.Now()
	value, err := json.Marshal(g)
	if err != nil {
		return fmt.Errorf("group %s: %w", g.ID, err)
	}
	batch := b.db.NewBatch()
	batch.Set(key, value, nil)
	return b.commit(ctx, batch, pebbledb.Sync, "cancel group", "", nil, nil)
}

// pruneGroups deletes the groups every member of which has had its record pruned: a
// group is kept under the job records' retention, as long as one of its jobs' records
// is. A member whose record is there (held, or ended within the retention) keeps its
// group; the first member found so stops the group's check.
func (b *Backend) pruneGroups(ctx context.Context) error {
	if err := b.enter(); err != nil {
		return nil // closing or failed
	}
	defer b.ops.Done()
	prefix := []byte{kindGroup}
	it, err := b.db.NewIter(&pebbledb.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return err
	}
	var gone [][]byte
	var ids []string
	for valid := it.First(); valid; valid = it.Next() {
		if err := ctx.Err(); err != nil {
			break
		}
		_, id, err := parseGroupKey(it.Key())
		if err != nil {
			continue
		}
		var g struct {
			Members []struct {
				ID string `json:"id"`
			} `json:"members"`
		}
		v, err := it.ValueAndErr()
		if err != nil || json.Unmarshal(v, &g) != nil {
			continue
		}
		kept := false
		for _, m := range g.Members {
			if _, err := b.get(recordKey(m.ID)); err == nil || b.ids.holds(m.ID) {
				kept = true
				break
			}
		}
		if !kept {
			gone = append(gone, append([]byte(nil), it.Key()...))
			ids = append(ids, id)
		}
	}
	ierr := it.Error()
	it.Close()
	if ierr != nil || len(gone) == 0 {
		return ierr
	}
	batch := b.db.NewBatch()
	for _, k := range gone {
		batch.Delete(k, nil)
	}
	return b.commit(ctx, batch, pebbledb.NoSync, "prune groups", "", func() {
		for _, id := range ids {
			b.groups.forget(id)
		}
	}, nil)
}
