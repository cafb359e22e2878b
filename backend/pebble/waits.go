package pebble

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	pebbledb "github.com/cockroachdb/pebble/v2"

	"github.com/wasmjobs/wasmjobs/backend"
)

// Jobs that wait for other jobs (backend.DependentPublisher, WaitingDelivery,
// AwaitedDelivery, WaitCanceller). On disk, beside the layout of the key space:
//
//	w <id>                      -> waiting job: its envelope and what it awaits
//	a <len:2> <id> <index:4>    -> how the index-th job it awaited ended
//
// A waiting job holds no ready key, so no stream sees it. How an awaited job ended is
// written in the same batch as that job's end (its settle, its cancel), under the
// waiter's id, so a crash keeps the two together. Once every awaited job has a result,
// a synced write of its own (the release) deletes the waiting key and puts the job on
// its queue, or cancels it: a crash between the two leaves a waiting job with every
// result, which Open releases. The results stay until the released job's final settle,
// so a redelivery reads them again, whatever the record retention.
const (
	kindWaiting = 'w'
	kindAwaited = 'a'
)

// waiterV1 is the first encoding of a waiting job.
const (
	waiterV1 byte = 1
	resultV1 byte = 1
)

func waitingKey(id string) []byte { return append([]byte{kindWaiting}, id...) }

// awaitedPrefix is the prefix of every result kept for the job id.
func awaitedPrefix(id string) []byte {
	k := make([]byte, 0, 3+len(id))
	k = append(k, kindAwaited)
	k = binary.BigEndian.AppendUint16(k, uint16(len(id)))
	return append(k, id...)
}

func awaitedKey(id string, index int) []byte {
	return binary.BigEndian.AppendUint32(awaitedPrefix(id), uint32(index))
}

func parseAwaitedKey(k []byte) (id string, index int, err error) {
	if len(k) < 7 || k[0] != kindAwaited {
		return "", 0, fmt.Errorf("awaited key %x: bad layout", k)
	}
	n := int(binary.BigEndian.Uint16(k[1:3]))
	if len(k) != 3+n+4 {
		return "", 0, fmt.Errorf("awaited key %x: bad layout", k)
	}
	return string(k[3 : 3+n]), int(binary.BigEndian.Uint32(k[3+n:])), nil
}

// waitMeta is what a waiting job's value holds beside its envelope.
type waitMeta struct {
	ids       []string
	onFailure backend.OnFailure
	deadline  time.Time
	delay     time.Duration
	// resume says the job is a parent that settled as waiting: it is released with
	// its round one higher. A dependent published waiting keeps its round.
	resume bool
}

func encodeWaiter(env backend.Envelope, m waitMeta) []byte {
	dst := []byte{waiterV1}
	dst = appendBytes(dst, encodeEnvelope(nil, env, 0))
	dst = binary.AppendVarint(dst, int64(m.delay))
	var flags byte
	if m.resume {
		flags |= 1
	}
	dst = append(dst, flags)
	dst = appendString(dst, string(m.onFailure))
	dst = appendTime(dst, m.deadline)
	dst = binary.AppendUvarint(dst, uint64(len(m.ids)))
	for _, id := range m.ids {
		dst = appendString(dst, id)
	}
	return dst
}

func decodeWaiter(b []byte) (env []byte, m waitMeta, err error) {
	r := reader{b: b}
	if v := r.byte(); r.err == nil && v != waiterV1 {
		return nil, m, fmt.Errorf("waiting job encoding version %d is not known to this build", v)
	}
	env = r.bytes()
	m.delay = time.Duration(r.varint())
	m.resume = r.byte()&1 != 0
	m.onFailure = backend.OnFailure(r.string())
	m.deadline = r.time()
	for range r.count() {
		m.ids = append(m.ids, r.string())
	}
	return env, m, r.finish("waiting job")
}

func encodeResult(res backend.AwaitResult) []byte {
	dst := []byte{resultV1}
	dst = appendString(dst, res.ID)
	dst = appendString(dst, res.Queue)
	dst = appendString(dst, string(res.State))
	dst = appendString(dst, res.Reason)
	dst = appendBytes(dst, res.Output)
	var flags byte
	if res.OutputTruncated {
		flags |= 1
	}
	return append(dst, flags)
}

func decodeResult(b []byte) (backend.AwaitResult, error) {
	var res backend.AwaitResult
	r := reader{b: b}
	if v := r.byte(); r.err == nil && v != resultV1 {
		return res, fmt.Errorf("awaited result encoding version %d is not known to this build", v)
	}
	res.ID, res.Queue, res.State, res.Reason = r.string(), r.string(), backend.JobState(r.string()), r.string()
	res.Output = r.bytes()
	res.OutputTruncated = r.byte()&1 != 0
	return res, r.finish("awaited result")
}

// resultOf is how a job that ends in state with reason and its run's output reads to
// the jobs that await it.
func resultOf(id, queue string, state backend.JobState, reason string, output []byte, truncated bool) backend.AwaitResult {
	res := backend.AwaitResult{ID: id, Queue: queue, State: state, Reason: reason, Output: output, OutputTruncated: truncated}
	if len(res.Output) > backend.MaxAwaitOutput {
		res.Output, res.OutputTruncated = res.Output[:backend.MaxAwaitOutput], true
	}
	return res
}

// waiter is a waiting job in memory.
type waiter struct {
	id, queue string
	ids       []string
	queues    []string // the awaited jobs' queues, where known
	got       []bool
	remaining int
	failed    string // why the first awaited job that did not succeed ended so
	meta      waitMeta
	timer     *time.Timer
	committed bool // its write landed
	done      bool // being released or cancelled: no more results count
	// env and resultsKept are a waiter's decided at its publish (see register): its
	// envelope, and whether it runs with its results (else it is cancelled).
	env         backend.Envelope
	resultsKept bool
	// unwritten are results known in memory only: of jobs whose end was staged
	// before w registered, written by w's release.
	unwritten map[int]backend.AwaitResult
}

type slot struct {
	w   *waiter
	idx int
}

// waitIndex is the waiting jobs in memory. Its lock is taken before the id set's (never
// while that one is held) and never across a write or a read of the store.
type waitIndex struct {
	mu      sync.Mutex
	waiters map[string]*waiter
	// byChild maps an awaited job that has not ended to the waiters' slots it fills.
	byChild map[string][]slot
	// ending holds the results of jobs whose end is staged and not applied yet: a
	// job registered meanwhile as awaiting one takes its result from here.
	ending map[string]backend.AwaitResult
	// results marks the jobs that hold results (released waiters): their final settle
	// deletes them.
	results map[string]bool
}

func (x *waitIndex) init() {
	x.waiters = make(map[string]*waiter)
	x.byChild = make(map[string][]slot)
	x.ending = make(map[string]backend.AwaitResult)
	x.results = make(map[string]bool)
}

// stageEnded writes, into batch, res as the result of every waiter that awaits res.ID,
// and deletes the results res.ID held itself (it ended). The caller runs apply once the
// batch is committed, after the job's id has left the id set, or undo if it was not.
func (b *Backend) stageEnded(batch *pebbledb.Batch, res backend.AwaitResult) (apply, undo func()) {
	if res.ID == "" {
		return func() {}, func() {}
	}
	x := &b.waits
	x.mu.Lock()
	defer x.mu.Unlock()
	x.ending[res.ID] = res
	var value []byte
	var written map[slot]bool // the slots whose result this batch holds
	if n := len(x.byChild[res.ID]); n > 0 {
		written = make(map[slot]bool, n)
	}
	for _, s := range x.byChild[res.ID] {
		if s.w.done {
			continue
		}
		if value == nil {
			value = encodeResult(res)
		}
		batch.Set(awaitedKey(s.w.id, s.idx), value, nil)
		written[s] = true
	}
	if x.results[res.ID] {
		p := awaitedPrefix(res.ID)
		batch.DeleteRange(p, prefixEnd(p), nil)
	}
	apply = func() {
		x.mu.Lock()
		delete(x.ending, res.ID)
		delete(x.results, res.ID)
		slots := x.byChild[res.ID]
		delete(x.byChild, res.ID)
		var release []*waiter
		for _, s := range slots {
			if s.w.done || s.w.got[s.idx] {
				continue
			}
			if !written[s] {
				// Registered while this end was staged: its result is not in this
				// batch, so the waiter's release writes it (after this commit).
				if s.w.unwritten == nil {
					s.w.unwritten = make(map[int]backend.AwaitResult)
				}
				s.w.unwritten[s.idx] = res
			}
			if s.w.fill(s.idx, res) {
				release = append(release, s.w)
			}
		}
		x.mu.Unlock()
		b.release(release...)
	}
	undo = func() {
		x.mu.Lock()
		delete(x.ending, res.ID)
		x.mu.Unlock()
	}
	return apply, undo
}

// fill counts res as the idx-th result of w and reports whether w is now to be
// released (it is then marked done). x.mu is held.
func (w *waiter) fill(idx int, res backend.AwaitResult) bool {
	w.got[idx] = true
	w.remaining--
	if res.State != backend.JobSucceeded && w.failed == "" {
		w.failed = fmt.Sprintf("awaited job %s ended %s", res.ID, res.State)
		if res.Reason != "" {
			w.failed += ": " + res.Reason
		}
	}
	if w.decided() && w.committed && !w.done {
		w.done = true
		return true
	}
	return false
}

// decided says w need wait no more: every awaited job ended, or one did not succeed and
// w is cancelled for it (at once: the others need not end first).
func (w *waiter) decided() bool {
	return w.remaining == 0 || (w.failed != "" && w.meta.onFailure == backend.OnFailureCancel)
}

// errAwaitRaced is returned inside register when an awaited job ended between the
// read of its record and the index's lock: the caller reads again.
var errAwaitRaced = errors.New("an awaited job ended while its record was read")

// waitSpec is one job to hold waiting: its envelope, what it awaits, whether it is a
// parent that resumes.
type waitSpec struct {
	env    backend.Envelope
	await  backend.Await
	delay  time.Duration
	resume bool
}

// register stages, into batch, the waiting keys of specs and the results already known
// of what they await, and indexes them. With inline, a spec already decided (every job
// it awaits ended, or one failed and it is cancelled for it) is not kept waiting but
// returned in decided, its results staged, for the caller to publish or cancel in the
// same batch. Each awaited id must be in earlier (an id
// published in the same batch before the waiter, with its queue), or be a job the
// backend holds, or have a finished record. It reads the records it needs before it
// takes the index's lock. apply marks the waiters committed (releasing those whose
// every awaited job has ended); undo forgets them.
func (b *Backend) register(batch *pebbledb.Batch, specs []waitSpec, earlier map[string]string, inline bool) (decided []*waiter, apply, undo func(), err error) {
	records := make(map[string]backend.JobRecord)
	for range 3 {
		for _, sp := range specs {
			for _, id := range sp.await.IDs {
				if _, ok := earlier[id]; ok {
					continue
				}
				if _, ok := records[id]; ok {
					continue
				}
				if v, err := b.get(recordKey(id)); err == nil {
					if rec, err := decodeRecord(v); err == nil {
						records[id] = rec
					}
				}
			}
		}
		decided, apply, undo, err = b.registerLocked(batch, specs, earlier, records, inline)
		if !errors.Is(err, errAwaitRaced) {
			return decided, apply, undo, err
		}
		clear(records)
	}
	return nil, nil, nil, err
}

func (b *Backend) registerLocked(batch *pebbledb.Batch, specs []waitSpec, earlier map[string]string, records map[string]backend.JobRecord, inline bool) (decided []*waiter, apply, undo func(), err error) {
	x := &b.waits
	x.mu.Lock()
	defer x.mu.Unlock()
	now := time.Now()
	var ws []*waiter
	type result struct {
		w     *waiter
		key   []byte
		value []byte
	}
	var results []result
	for _, sp := range specs {
		if len(sp.await.IDs) == 0 {
			return nil, nil, nil, fmt.Errorf("job %s awaits no job", sp.env.ID)
		}
		timeout := sp.await.Timeout
		if timeout <= 0 {
			timeout = backend.DefaultWaitTimeout
		}
		onFailure := sp.await.OnFailure
		if sp.resume || onFailure == "" {
			onFailure = backend.OnFailureCancel
			if sp.resume {
				onFailure = backend.OnFailureRun
			}
		}
		if onFailure != backend.OnFailureCancel && onFailure != backend.OnFailureRun {
			return nil, nil, nil, fmt.Errorf("job %s: on failure %q is neither %q nor %q", sp.env.ID, onFailure, backend.OnFailureCancel, backend.OnFailureRun)
		}
		w := &waiter{
			id: sp.env.ID, queue: sp.env.Queue, ids: sp.await.IDs,
			queues: make([]string, len(sp.await.IDs)), got: make([]bool, len(sp.await.IDs)), remaining: len(sp.await.IDs),
			meta: waitMeta{ids: sp.await.IDs, onFailure: onFailure, deadline: now.Add(timeout), delay: sp.delay, resume: sp.resume},
		}
		seen := make(map[string]bool, len(w.ids))
		for i, id := range w.ids {
			if seen[id] {
				return nil, nil, nil, fmt.Errorf("job %s awaits job %s twice", w.id, id)
			}
			seen[id] = true
			if id == w.id {
				return nil, nil, nil, fmt.Errorf("job %s awaits itself", id)
			}
			if q, ok := earlier[id]; ok {
				w.queues[i] = q
				continue
			}
			if res, ok := x.ending[id]; ok {
				// Its end is staged, not committed: wait for it as for a held job
				// (its apply fills the slot), never run on a settle that may fail.
				w.queues[i] = res.Queue
				continue
			}
			rec, haveRec := records[id]
			if haveRec {
				w.queues[i] = rec.Queue
			}
			if _, waiting := x.waiters[id]; waiting || b.ids.holds(id) {
				continue
			}
			if !haveRec || !rec.State.Finished() {
				if haveRec {
					return nil, nil, nil, errAwaitRaced
				}
				return nil, nil, nil, fmt.Errorf("job %s awaits job %s: %w", w.id, id, backend.ErrUnknownAwait)
			}
			res := resultOf(id, rec.Queue, rec.State, rec.Reason, rec.Output, rec.OutputTruncated)
			results = append(results, result{w, awaitedKey(w.id, i), encodeResult(res)})
			w.fill(i, res)
		}
		earlier[w.id] = w.queue
		if inline && w.decided() {
			w.done, w.env, w.resultsKept = true, sp.env, w.remaining == 0
			decided = append(decided, w)
			continue
		}
		w.env = sp.env
		ws = append(ws, w)
	}
	for _, r := range results {
		if !r.w.done || r.w.resultsKept {
			batch.Set(r.key, r.value, nil)
		}
	}
	for _, w := range ws {
		batch.Set(waitingKey(w.id), encodeWaiter(w.env, w.meta), nil)
		x.waiters[w.id] = w
		for idx, id := range w.ids {
			if !w.got[idx] {
				x.byChild[id] = append(x.byChild[id], slot{w, idx})
			}
		}
	}
	apply = func() {
		x.mu.Lock()
		var release []*waiter
		for _, w := range ws {
			w.committed = true
			if w.remaining == 0 && !w.done {
				w.done = true
				release = append(release, w)
			} else {
				b.armLocked(w)
			}
		}
		x.mu.Unlock()
		b.release(release...)
	}
	undo = func() {
		x.mu.Lock()
		for _, w := range ws {
			x.forgetLocked(w)
		}
		x.mu.Unlock()
	}
	return decided, apply, undo, nil
}

// stopTimers stops every waiter's timeout (the backend is closing: Open arms them
// again).
func (x *waitIndex) stopTimers() {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, w := range x.waiters {
		if w.timer != nil {
			w.timer.Stop()
		}
	}
}

// forgetLocked takes w out of the index. x.mu is held.
func (x *waitIndex) forgetLocked(w *waiter) {
	if x.waiters[w.id] == w {
		delete(x.waiters, w.id)
	}
	if w.timer != nil {
		w.timer.Stop()
	}
	for idx, id := range w.ids {
		if w.got[idx] {
			continue
		}
		slots := x.byChild[id]
		for i, s := range slots {
			if s.w == w {
				slots = append(slots[:i], slots[i+1:]...)
				break
			}
		}
		if len(slots) == 0 {
			delete(x.byChild, id)
		} else {
			x.byChild[id] = slots
		}
	}
}

// armLocked starts w's wait timeout. x.mu is held.
func (b *Backend) armLocked(w *waiter) {
	if w.timer != nil {
		return
	}
	w.timer = time.AfterFunc(max(time.Until(w.meta.deadline), 0), func() {
		b.waits.mu.Lock()
		if w.done || b.waits.waiters[w.id] != w {
			b.waits.mu.Unlock()
			return
		}
		w.done = true
		b.waits.mu.Unlock()
		b.release(w)
	})
}

// release releases each of ws, every one marked done, in the background: a write of
// its own for each, since it runs after (and may run inside) another write's apply.
func (b *Backend) release(ws ...*waiter) {
	for _, w := range ws {
		if err := b.enter(); err != nil {
			return // closing or failed: Open releases it next time
		}
		go func() {
			defer b.ops.Done()
			if err := b.releaseNow(b.closing, w); err != nil {
				b.log.Error("releasing a waiting job; it is released when the store is next opened", "dir", b.dir, "job", w.id, "error", err)
			}
		}()
	}
}

// releaseNow writes the release of w, which is marked done: results for the awaited
// jobs that have not ended (JobUnfinished: the wait timed out), then the job on its
// queue, or cancelled when an awaited job failed and its OnFailure cancels.
func (b *Backend) releaseNow(ctx context.Context, w *waiter) error {
	v, err := b.get(waitingKey(w.id))
	if err != nil {
		return fmt.Errorf("reading waiting job %s: %w", w.id, err)
	}
	raw, meta, err := decodeWaiter(v)
	if err != nil {
		return fmt.Errorf("waiting job %s in %s: %w", w.id, b.dir, err)
	}
	env, err := decodeEnvelope(raw)
	if err != nil {
		return fmt.Errorf("waiting job %s in %s: %w", w.id, b.dir, err)
	}
	batch := b.db.NewBatch()
	x := &b.waits
	x.mu.Lock()
	for idx, id := range w.ids {
		if !w.got[idx] {
			res := backend.AwaitResult{ID: id, Queue: w.queues[idx], State: backend.JobUnfinished}
			batch.Set(awaitedKey(w.id, idx), encodeResult(res), nil)
		} else if res, ok := w.unwritten[idx]; ok {
			batch.Set(awaitedKey(w.id, idx), encodeResult(res), nil)
		}
	}
	failed := w.failed
	x.mu.Unlock()
	if failed != "" && meta.onFailure == backend.OnFailureCancel {
		batch.Close()
		return b.cancelWaiter(ctx, w, "cancelled: "+failed)
	}
	q, err := b.queues.Lookup(env.Queue)
	if err != nil {
		batch.Close()
		return err
	}
	if meta.resume {
		env.Round++
	}
	batch.Delete(waitingKey(w.id), nil)
	applyJob := b.stageAt(batch, q, env, meta.delay, false, 0, false)
	state := backend.JobPending
	if meta.delay > 0 {
		state = backend.JobDelayed
	}
	b.stageRecordAs(batch, env, state, b.priorAttempts(env.ID))
	return b.commit(ctx, batch, pebbledb.Sync, "release waiting job", env.Queue, func() {
		x.mu.Lock()
		x.forgetLocked(w)
		x.results[w.id] = true
		x.mu.Unlock()
		applyJob()
	}, func() { b.releaseAgain(w) })
}

// releaseAgainAfter is how long a release whose write failed waits before it is tried
// again.
const releaseAgainAfter = time.Second

// releaseAgain tries the release of w again in a while, its write having failed (a
// failed store or a closing backend ends the tries: Open releases it then).
func (b *Backend) releaseAgain(w *waiter) {
	time.AfterFunc(releaseAgainAfter, func() {
		select {
		case <-b.done:
			return
		default:
		}
		b.release(w)
	})
}

// cancelWaiter cancels the waiting job w, marked done, with reason, in one synced
// write: its waiting key and results go, its record says cancelled, and the jobs that
// await it see it cancelled. A failed write leaves it waiting.
func (b *Backend) cancelWaiter(ctx context.Context, w *waiter, reason string) error {
	x := &b.waits
	// A failed write leaves w waiting; one decided meanwhile (or a release's own
	// cancel) is released again in a while.
	restore := func() {
		x.mu.Lock()
		again := w.decided()
		w.done = again
		x.mu.Unlock()
		if again {
			b.releaseAgain(w)
		}
	}
	now := time.Now()
	rec := backend.JobRecord{ID: w.id, Queue: w.queue}
	if v, err := b.get(recordKey(w.id)); err == nil {
		if r, err := decodeRecord(v); err == nil {
			rec = r
		}
	}
	rec.State, rec.Reason, rec.FinishedAt, rec.UpdatedAt = backend.JobCancelled, reason, now, now
	batch := b.db.NewBatch()
	batch.Delete(waitingKey(w.id), nil)
	p := awaitedPrefix(w.id)
	batch.DeleteRange(p, prefixEnd(p), nil)
	batch.Set(recordKey(w.id), encodeRecord(&rec), nil)
	batch.Set(byTimeKey(now, w.id), nil, nil)
	uniqDone := b.stageUniqFinish(batch, w.id, now)
	applyEnded, undoEnded := b.stageEnded(batch, resultOf(w.id, w.queue, backend.JobCancelled, reason, nil, false))
	return b.commit(ctx, batch, pebbledb.Sync, "cancel waiting job", w.queue, func() {
		x.mu.Lock()
		x.forgetLocked(w)
		delete(x.results, w.id)
		x.mu.Unlock()
		b.ids.remove(w.id)
		uniqDone()
		b.recs.add(1, b.records.maxCount)
		applyEnded()
	}, func() {
		undoEnded()
		restore()
	})
}

// errReleasing is wrapped by takeWaiter's error for a waiter whose release is being
// written: in a moment it is on its queue (or cancelled).
var errReleasing = errors.New("it is being released or cancelled")

// takeWaiter marks the waiting job id done for the caller to cancel, or says why it
// cannot be: ErrNotFound for a job the backend has no record of, ErrJobState (and
// errReleasing, while its release is written) for one that is not waiting.
func (b *Backend) takeWaiter(id string) (*waiter, error) {
	x := &b.waits
	x.mu.Lock()
	w := x.waiters[id]
	switch {
	case w != nil && w.committed && w.done:
		x.mu.Unlock()
		return nil, fmt.Errorf("job %q: %w: %w", id, errReleasing, backend.ErrJobState)
	case w != nil && w.committed:
		w.done = true
		x.mu.Unlock()
		return w, nil
	}
	x.mu.Unlock()
	if _, err := b.get(recordKey(id)); err != nil {
		return nil, fmt.Errorf("job %q: %w", id, backend.ErrNotFound)
	}
	return nil, fmt.Errorf("job %q is not waiting: %w", id, backend.ErrJobState)
}

var (
	_ backend.DependentPublisher = (*Backend)(nil)
	_ backend.WaitCanceller      = (*Backend)(nil)
	_ backend.WaitingDelivery    = (*delivery)(nil)
	_ backend.AwaitedDelivery    = (*delivery)(nil)
)

// PublishDependents publishes deps in one synced batch (see
// backend.DependentPublisher). A dependent whose id the backend holds is dropped, as a
// repeat publish is.
func (b *Backend) PublishDependents(ctx context.Context, deps []backend.Dependent) error {
	return b.publishDependents(ctx, deps, nil)
}

// publishDependents is PublishDependents with what extra adds to the batch.
func (b *Backend) publishDependents(ctx context.Context, deps []backend.Dependent, extra func(*pebbledb.Batch)) error {
	if len(deps) == 0 {
		return nil
	}
	if err := b.enter(); err != nil {
		return err
	}
	defer b.ops.Done()
	if err := b.space.check(); err != nil {
		return err
	}
	batch := b.db.NewBatch()
	var pubs []backend.Publication
	var specs []waitSpec
	earlier := make(map[string]string, len(deps))
	for _, d := range deps {
		if len(d.Await.IDs) == 0 {
			pubs = append(pubs, d.Publication)
			if d.Envelope.ID != "" {
				earlier[d.Envelope.ID] = d.Envelope.Queue
			}
			continue
		}
		for _, id := range d.Await.IDs {
			if _, ok := earlier[id]; ok {
				continue
			}
			known, err := b.knows(ctx, id)
			if err != nil {
				batch.Close()
				return err
			}
			if !known {
				batch.Close()
				return fmt.Errorf("job %s awaits job %s: %w", d.Envelope.ID, id, backend.ErrUnknownAwait)
			}
		}
		if d.Envelope.ID == "" {
			batch.Close()
			return fmt.Errorf("a dependent on queue %q has no id: the jobs that await it could not name it", d.Envelope.Queue)
		}
		if _, err := b.queues.Lookup(d.Envelope.Queue); err != nil {
			batch.Close()
			return err
		}
		if err := backend.CheckDelay(d.Delay, backend.MaxDelay); err != nil {
			batch.Close()
			return fmt.Errorf("publishing job %s to %q: %w", d.Envelope.ID, d.Envelope.Queue, err)
		}
		specs = append(specs, waitSpec{env: d.Envelope, await: d.Await, delay: d.Delay})
		earlier[d.Envelope.ID] = d.Envelope.Queue
	}
	applyPubs, undoPubs, _, err := b.stagePublications(ctx, batch, pubs)
	if err != nil {
		batch.Close()
		return err
	}
	// The waiting ones are reserved as publishes are: a repeat of a held id is dropped.
	var owned []waitSpec
	var reserved []string
	undoReserve := func() {
		for _, id := range reserved {
			b.ids.settle(id, false)
		}
	}
	for _, sp := range specs {
		ok, err := b.ids.reserve(ctx, sp.env.ID)
		if err != nil {
			undoReserve()
			undoPubs()
			batch.Close()
			return err
		}
		if ok {
			reserved = append(reserved, sp.env.ID)
			owned = append(owned, sp)
		}
	}
	var applyWait, undoWait func()
	if len(owned) > 0 {
		// Registration checks every await against what is held, so the plain
		// publications of this batch count as earlier by their ids.
		known := make(map[string]string, len(earlier))
		for _, p := range pubs {
			if p.Envelope.ID != "" {
				known[p.Envelope.ID] = p.Envelope.Queue
			}
		}
		for _, sp := range specs {
			known[sp.env.ID] = sp.env.Queue
		}
		var decided []*waiter
		decided, applyWait, undoWait, err = b.register(batch, owned, known, true)
		if err == nil {
			var applyDecided, undoDecided func()
			applyDecided, undoDecided, err = b.stageDecided(batch, decided)
			if err == nil {
				applyRegistered, undoRegistered := applyWait, undoWait
				applyWait = func() { applyRegistered(); applyDecided() }
				undoWait = func() { undoDecided(); undoRegistered() }
			} else {
				undoWait()
			}
		}
		if err != nil {
			undoReserve()
			undoPubs()
			batch.Close()
			return err
		}
		isDecided := make(map[string]bool, len(decided))
		for _, w := range decided {
			isDecided[w.id] = true
		}
		for _, sp := range owned {
			if !isDecided[sp.env.ID] {
				b.stageRecordAs(batch, sp.env, backend.JobWaiting, nil)
			}
		}
	}
	if extra != nil {
		extra(batch)
	}
	return b.commit(ctx, batch, pebbledb.Sync, "publish dependents", deps[0].Envelope.Queue, func() {
		for _, id := range reserved {
			b.ids.settle(id, true)
		}
		applyPubs()
		if applyWait != nil {
			applyWait()
		}
	}, func() {
		if undoWait != nil {
			undoWait()
		}
		undoReserve()
		undoPubs()
	})
}

// stageDecided stages the dependents that need not wait (see register): published at
// once with their results, or cancelled for an awaited job that failed (the jobs that
// await them, later in the same call, see them cancelled).
func (b *Backend) stageDecided(batch *pebbledb.Batch, ws []*waiter) (apply, undo func(), err error) {
	var applies, undos []func()
	now := time.Now()
	for _, w := range ws {
		if w.resultsKept {
			q, err := b.queues.Lookup(w.env.Queue)
			if err != nil {
				return nil, nil, err
			}
			applyJob := b.stageAt(batch, q, w.env, w.meta.delay, false, 0, false)
			state := backend.JobPending
			if w.meta.delay > 0 {
				state = backend.JobDelayed
			}
			b.stageRecordAs(batch, w.env, state, nil)
			applies = append(applies, func() {
				b.waits.mu.Lock()
				b.waits.results[w.id] = true
				b.waits.mu.Unlock()
				applyJob()
			})
			continue
		}
		reason := "cancelled: " + w.failed
		rec := backend.JobRecord{ID: w.id, Queue: w.queue, State: backend.JobCancelled, Attempt: max(w.env.Attempt, 1), MaxAttempts: w.env.MaxAttempts,
			Reason: reason, CreatedAt: w.env.EnqueuedAt, FinishedAt: now, UpdatedAt: now}
		batch.Set(recordKey(w.id), encodeRecord(&rec), nil)
		batch.Set(byTimeKey(now, w.id), nil, nil)
		applyEnded, undoEnded := b.stageEnded(batch, resultOf(w.id, w.queue, backend.JobCancelled, reason, nil, false))
		applies = append(applies, func() {
			b.ids.remove(w.id)
			b.recs.add(1, b.records.maxCount)
			applyEnded()
		})
		undos = append(undos, undoEnded)
	}
	return func() {
			for _, f := range applies {
				f()
			}
		}, func() {
			for _, f := range undos {
				f()
			}
		}, nil
}

// knows reports whether the backend holds the job id or may have a record of it: a
// first check, before anything is staged, that an await names something. A publish of
// id in flight is waited for (with ctx): should it fail, id is unknown.
func (b *Backend) knows(ctx context.Context, id string) (bool, error) {
	held, err := b.ids.settled(ctx, id)
	if err != nil || held {
		return held, err
	}
	_, err = b.get(recordKey(id))
	return err == nil, nil
}

// WaitWith settles the delivery as waiting for await (see backend.WaitingDelivery):
// its children are published, its record says waiting and its waiting key is written,
// in one batch; it is released with its round one higher.
func (d *delivery) WaitWith(ctx context.Context, children []backend.Publication, await backend.Await, run *backend.JobRecord) error {
	b := d.b
	if d.decodeErr != nil {
		return fmt.Errorf("job %s cannot wait: %w", d.it.id, d.decodeErr)
	}
	if d.env.ID == "" {
		return errors.New("a job without an id cannot wait: the jobs it awaits could not name it")
	}
	return d.settle(ctx, "wait", false, func(batch *pebbledb.Batch) (func(), func(), error) {
		if len(children) > 0 {
			if err := b.space.check(); err != nil {
				return nil, nil, err
			}
		}
		applyChildren, undoChildren, ids, err := b.stagePublications(ctx, batch, children)
		if err != nil {
			return nil, nil, err
		}
		earlier := make(map[string]string, len(children))
		for _, c := range children {
			if c.Envelope.ID != "" {
				earlier[c.Envelope.ID] = c.Envelope.Queue
			}
		}
		env := d.env
		env.Redelivered = false
		b.waits.mu.Lock()
		hadResults := b.waits.results[env.ID]
		b.waits.mu.Unlock()
		if hadResults {
			// A new round's results replace the last one's.
			p := awaitedPrefix(env.ID)
			batch.DeleteRange(p, prefixEnd(p), nil)
		}
		_, applyWait, undoWait, err := b.register(batch, []waitSpec{{env: env, await: backend.Await{IDs: await.IDs, Timeout: await.Timeout}, resume: true}}, earlier, false)
		if err != nil {
			undoChildren()
			return nil, nil, err
		}
		b.stageSettleRecord(batch, d, backend.JobWaiting, "", ids, run)
		return func() {
				b.waits.mu.Lock()
				delete(b.waits.results, env.ID)
				b.waits.mu.Unlock()
				applyChildren()
				d.q.leaveKey(d.it.id)
				applyWait()
			}, func() {
				undoWait()
				undoChildren()
			}, nil
	})
}

// Awaited returns how each job the delivered job last waited for ended, in the order
// it awaited them; nil for a job that never waited.
func (d *delivery) Awaited(ctx context.Context) ([]backend.AwaitResult, error) {
	if d.env.ID == "" {
		return nil, nil
	}
	if err := d.b.enter(); err != nil {
		return nil, err
	}
	defer d.b.ops.Done()
	return d.b.awaited(ctx, d.env.ID)
}

// awaited reads the results kept for the job id, in order.
func (b *Backend) awaited(ctx context.Context, id string) ([]backend.AwaitResult, error) {
	p := awaitedPrefix(id)
	it, err := b.db.NewIter(&pebbledb.IterOptions{LowerBound: p, UpperBound: prefixEnd(p)})
	if err != nil {
		return nil, &backend.TransportError{Op: "awaited results", Err: err}
	}
	defer it.Close()
	var out []backend.AwaitResult
	total := 0
	for valid := it.First(); valid; valid = it.Next() {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		v, err := it.ValueAndErr()
		if err != nil {
			return nil, &backend.TransportError{Op: "awaited results", Err: err}
		}
		res, err := decodeResult(v)
		if err != nil {
			return nil, fmt.Errorf("job %q in %s: %w", id, b.dir, err)
		}
		if total+len(res.Output) > backend.MaxAwaitTotal { // as backend.CapAwaitTotal, while reading
			res.Output, res.OutputTruncated = nil, res.OutputTruncated || len(res.Output) > 0
		}
		total += len(res.Output)
		out = append(out, res)
	}
	if err := it.Error(); err != nil {
		return nil, &backend.TransportError{Op: "awaited results", Err: err}
	}
	return out, nil
}

// CancelWaiting cancels the waiting job id with reason, and with cascade the jobs it
// awaits that have not ended, a waiting one with its own cascade (see
// backend.WaitCanceller).
func (b *Backend) CancelWaiting(ctx context.Context, id, reason string, cascade bool) (cancelled, running []string, err error) {
	if err := b.enter(); err != nil {
		return nil, nil, err
	}
	defer b.ops.Done()
	if reason == "" {
		reason = "cancelled by an operator"
	}
	w, err := b.takeWaiter(id)
	if err != nil {
		return nil, nil, err
	}
	return b.cancelTaken(ctx, w, reason, cascade)
}

// cancelTaken cancels the waiter w, which takeWaiter gave, and with cascade what it
// awaits that has not ended.
func (b *Backend) cancelTaken(ctx context.Context, w *waiter, reason string, cascade bool) (cancelled, running []string, err error) {
	b.waits.mu.Lock()
	var pending []string
	for idx, cid := range w.ids {
		if !w.got[idx] {
			pending = append(pending, cid)
		}
	}
	b.waits.mu.Unlock()
	if err := b.cancelWaiter(ctx, w, reason); err != nil {
		return nil, nil, err
	}
	cancelled = []string{w.id}
	if !cascade {
		return cancelled, nil, nil
	}
	for _, cid := range pending {
		c, r, err := b.cancelAny(ctx, cid, reason, true)
		if err != nil {
			return cancelled, running, err
		}
		cancelled, running = append(cancelled, c...), append(running, r...)
	}
	return cancelled, running, nil
}

// cancelAny cancels the job id whatever way it waits (a waiting one with cascade as
// CancelWaiting does), or reports it running; a job that has ended is neither. A
// waiter whose release is being written is cancelled once it is on its queue: a cancel
// never lets it run.
func (b *Backend) cancelAny(ctx context.Context, id, reason string, cascade bool) (cancelled, running []string, err error) {
	for {
		w, err := b.takeWaiter(id)
		if err == nil {
			return b.cancelTaken(ctx, w, reason, cascade)
		}
		if errors.Is(err, backend.ErrNotFound) {
			return nil, nil, nil
		}
		if !errors.Is(err, errReleasing) {
			break
		}
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
	rec, err := b.JobRecord(ctx, id)
	if err != nil {
		if errors.Is(err, backend.ErrNotFound) {
			return nil, nil, nil
		}
		return nil, nil, err
	}
	switch rec.State {
	case backend.JobRunning:
		return nil, []string{id}, nil
	case backend.JobPending, backend.JobDelayed, backend.JobDeferred, backend.JobRetrying:
		if err := b.removeWaitingAs(ctx, rec, false, reason); err != nil {
			if errors.Is(err, backend.ErrJobState) {
				return nil, []string{id}, nil // taken by a consumer meanwhile
			}
			return nil, nil, err
		}
		return []string{id}, nil, nil
	case backend.JobWaiting:
		// Its publish is committed and not applied yet: in a moment it is indexed.
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
		return b.cancelAny(ctx, id, reason, cascade)
	}
	return nil, nil, nil
}

// waitingCount counts the waiting jobs of queue. One being released (its wait decided,
// its release's write under way) waits no more and is not counted: for a moment it is
// in no count, until the write puts it on its queue or cancels it.
func (b *Backend) waitingCount(queue string) int {
	x := &b.waits
	x.mu.Lock()
	defer x.mu.Unlock()
	n := 0
	for _, w := range x.waiters {
		if w.queue == queue && w.committed && !w.done {
			n++
		}
	}
	return n
}

// waitLoad is what the scan at Open found of waiting jobs.
type waitLoad struct {
	waiters map[string]*waiter
	results map[string][]backend.AwaitResult // by index, of every id with results
	got     map[string][]int
}

func (l *waitLoad) loadWaiting(k, v []byte) error {
	id := string(k[1:])
	env, meta, err := decodeWaiter(v)
	if err != nil {
		return err
	}
	h, err := decodeEnvelope(env)
	if err != nil {
		return err
	}
	if l.waiters == nil {
		l.waiters = make(map[string]*waiter)
	}
	l.waiters[id] = &waiter{
		id: id, queue: h.Queue, ids: meta.ids, queues: make([]string, len(meta.ids)), got: make([]bool, len(meta.ids)),
		remaining: len(meta.ids), meta: meta, committed: true,
	}
	return nil
}

func (l *waitLoad) loadAwaited(k, v []byte) error {
	id, idx, err := parseAwaitedKey(k)
	if err != nil {
		return err
	}
	res, err := decodeResult(v)
	if err != nil {
		return err
	}
	if l.results == nil {
		l.results = make(map[string][]backend.AwaitResult)
		l.got = make(map[string][]int)
	}
	res.Output = nil // only the state and reason count here
	l.results[id] = append(l.results[id], res)
	l.got[id] = append(l.got[id], idx)
	return nil
}

// finishLoad indexes the waiting jobs found at Open once every held job is known: an
// awaited job still held fills its slot when it ends; one that is not (it ended, and
// its result was never written: it ended before a crash undid nothing, or its record
// says how) gets its result from its record, or JobUnfinished. It returns the waiters
// to release and arms the others' timeouts.
func (b *Backend) finishLoad(l *waitLoad) ([]*waiter, error) {
	// Open is alone with the store: the awaited jobs' records are read before the
	// index's lock is taken.
	records := make(map[string][]byte)
	for id, w := range l.waiters {
		got := make(map[int]bool, len(l.got[id]))
		for _, idx := range l.got[id] {
			got[idx] = true
		}
		for idx, cid := range w.ids {
			if _, waiting := l.waiters[cid]; got[idx] || waiting || b.ids.holds(cid) {
				continue
			}
			if v, err := b.get(recordKey(cid)); err == nil {
				records[cid] = v
			}
		}
	}
	x := &b.waits
	x.mu.Lock()
	fixes := b.db.NewBatch()
	for id := range l.results {
		if _, ok := l.waiters[id]; !ok {
			x.results[id] = true
		}
	}
	var release []*waiter
	for id, w := range l.waiters {
		for i, idx := range l.got[id] {
			if idx < len(w.got) && !w.got[idx] {
				w.fill(idx, l.results[id][i])
			}
		}
		x.waiters[id] = w
		b.ids.add(id)
		for idx, cid := range w.ids {
			if w.got[idx] {
				continue
			}
			if _, waiting := l.waiters[cid]; waiting || b.ids.holds(cid) {
				x.byChild[cid] = append(x.byChild[cid], slot{w, idx})
				continue
			}
			// Not held: it ended and no result was written for w (the waiter's write
			// landed after the awaited job's end was read). Its record, if kept, says
			// how; without one it counts as unfinished.
			res := backend.AwaitResult{ID: cid, State: backend.JobUnfinished}
			if rec, err := decodeRecord(records[cid]); err == nil && rec.State.Finished() {
				res = resultOf(cid, rec.Queue, rec.State, rec.Reason, rec.Output, rec.OutputTruncated)
			}
			fixes.Set(awaitedKey(id, idx), encodeResult(res), nil)
			w.fill(idx, res)
		}
		// fill marks a decided waiter done (it was loaded committed): every job it
		// awaits ended, or one failed and it cancels. Either way it is released now.
		if w.done || w.decided() {
			w.done = true
			release = append(release, w)
			continue
		}
		b.armLocked(w)
	}
	x.mu.Unlock()
	if fixes.Empty() {
		fixes.Close()
		return release, nil
	}
	if err := fixes.Commit(pebbledb.Sync); err != nil {
		fixes.Close()
		return nil, fmt.Errorf("pebble backend: writing the results of ended jobs for waiting ones in %s: %w", b.dir, err)
	}
	fixes.Close()
	return release, nil
}
