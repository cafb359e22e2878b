package pebble

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	pebbledb "github.com/cockroachdb/pebble/v2"

	"github.com/wasmjobs/wasmjobs/backend"
)

// Groups (backend.GroupStore): workflows and batches. On disk:
//
//	g <id>    -> the group as published (JSON): its kind, members and creation time,
//	             and its state once an operator cancelled it
//
// A member's state is its job's record, written in the same batch as each of its
// settles, so a group is read, never updated, as its jobs run. Ids sort by creation
// time (backend.NewID), so the key order is the listing's.
const kindGroup = 'g'

func groupKey(id string) []byte { return append([]byte{kindGroup}, id...) }

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
	if _, err := b.get(groupKey(g.ID)); err == nil {
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
		return fmt.Errorf("group %s: %w", g.ID, err)
	}
	return b.publishDependents(ctx, deps, func(batch *pebbledb.Batch) { batch.Set(groupKey(g.ID), value, nil) })
}

// Group returns the group id with its members' live states.
func (b *Backend) Group(ctx context.Context, id string) (backend.GroupRecord, error) {
	if err := b.enter(); err != nil {
		return backend.GroupRecord{}, err
	}
	defer b.ops.Done()
	v, err := b.get(groupKey(id))
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
		upper = groupKey(cursor)
	}
	it, err := b.db.NewIter(&pebbledb.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return backend.GroupPage{}, &backend.TransportError{Op: "list groups", Err: err}
	}
	defer it.Close()
	var page backend.GroupPage
	for valid := it.Last(); valid; valid = it.Prev() {
		id := string(it.Key()[1:])
		if len(page.Groups) == limit {
			page.Next = page.Groups[len(page.Groups)-1].ID
			break
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
// waiting ones first, so that none is released by the cancel of what it awaits.
func (b *Backend) CancelGroup(ctx context.Context, id, reason string) (running []string, err error) {
	g, err := b.Group(ctx, id)
	if err != nil {
		return nil, err
	}
	if g.State != backend.GroupRunning {
		return nil, fmt.Errorf("%s %q is %s: %w", g.Kind, id, g.State, backend.ErrJobState)
	}
	if reason == "" {
		reason = fmt.Sprintf("%s %s cancelled by an operator", g.Kind, id)
	}
	if err := b.enter(); err != nil {
		return nil, err
	}
	stored := g
	stored.State, stored.FinishedAt = backend.GroupCancelled, time.Now()
	value, err := json.Marshal(stored)
	if err == nil {
		batch := b.db.NewBatch()
		batch.Set(groupKey(id), value, nil)
		err = b.commit(ctx, batch, pebbledb.Sync, "cancel group", "", nil, nil)
	}
	b.ops.Done()
	if err != nil {
		return nil, err
	}
	for _, waitingFirst := range []bool{true, false} {
		for _, m := range g.Members {
			if m.State.Finished() || (m.State == backend.JobWaiting) != waitingFirst {
				continue
			}
			_, r, err := b.cancelAny(ctx, m.ID, reason)
			if err != nil {
				return running, err
			}
			running = append(running, r...)
		}
	}
	return running, nil
}
