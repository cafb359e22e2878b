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

// The job records' defaults and configuration are the backend package's, which the
// postgres backend shares.
const (
	// DefaultRecordMaxCount is backend.DefaultRecordMaxCount.
	DefaultRecordMaxCount = backend.DefaultRecordMaxCount
	// DefaultRecordMaxAge is backend.DefaultRecordMaxAge.
	DefaultRecordMaxAge = backend.DefaultRecordMaxAge
	// DefaultRecordMaxOutput is backend.DefaultRecordMaxOutput.
	DefaultRecordMaxOutput = backend.DefaultRecordMaxOutput
	// DefaultRecordMaxLogLines is backend.DefaultRecordMaxLogLines.
	DefaultRecordMaxLogLines = backend.DefaultRecordMaxLogLines
	// DefaultRecordMaxLogLine is backend.DefaultRecordMaxLogLine.
	DefaultRecordMaxLogLine = backend.DefaultRecordMaxLogLine
	// DefaultRecordPruneInterval is backend.DefaultRecordPruneInterval.
	DefaultRecordPruneInterval = backend.DefaultRecordPruneInterval
)

// RecordConfig configures the job records the backend keeps (backend.JobRecord). A
// job's record is written in the same batch as its publish and each of its settles;
// records of finished jobs (succeeded, dead or cancelled) are pruned, oldest first,
// past MaxCount or MaxAge, every PruneInterval and whenever their count passes MaxCount
// by an eighth. Records of jobs still held are never pruned.
type RecordConfig = backend.RecordConfig

// recordConfig is a RecordConfig with its defaults filled in.
type recordConfig struct {
	maxCount         int           // 0 keeps none
	maxAge, interval time.Duration // maxAge < 0 keeps them regardless of age
	caps             backend.RecordCaps
}

func normalizeRecords(c RecordConfig) recordConfig {
	n, age, interval := c.Retention()
	if age == 0 {
		age = -1
	}
	return recordConfig{maxCount: n, maxAge: age, interval: interval, caps: c.Caps()}
}

// recordIndex counts the finished records (their by-time keys) and wakes the pruner.
type recordIndex struct {
	mu       sync.Mutex
	finished int
	kick     chan struct{}
}

func (r *recordIndex) load(k, v []byte) error {
	if k[0] == kindByTime {
		if len(k) < 9 {
			return fmt.Errorf("record time key %x: bad layout", k)
		}
		r.finished++
	}
	return nil
}

func (r *recordIndex) add(n int, max int) {
	r.mu.Lock()
	r.finished += n
	over := max >= 0 && r.finished > max+max/8
	r.mu.Unlock()
	if over && r.kick != nil {
		select {
		case r.kick <- struct{}{}:
		default:
		}
	}
}

func recordKey(id string) []byte { return append([]byte{kindRecord}, id...) }

func byTimeKey(at time.Time, id string) []byte {
	k := make([]byte, 0, 9+len(id))
	k = append(k, kindByTime)
	k = binary.BigEndian.AppendUint64(k, uint64(at.UnixNano()))
	return append(k, id...)
}

// Encodings of a job record: v2 adds the module's role and the attempts after v1's
// fields, v3 each attempt's calls after v2's, v4 each attempt's trace id after v3's.
// Records are written as v4 and read as any of them.
const (
	recordV1 byte = 1
	recordV2 byte = 2
	recordV3 byte = 3
	recordV4 byte = 4
)

func encodeRecord(r *backend.JobRecord) []byte {
	dst := make([]byte, 0, 128+len(r.Output))
	dst = append(dst, recordV4)
	dst = appendString(dst, r.ID)
	dst = appendString(dst, r.Queue)
	dst = appendString(dst, string(r.State))
	dst = binary.AppendVarint(dst, int64(r.Attempt))
	dst = binary.AppendVarint(dst, int64(r.MaxAttempts))
	dst = appendString(dst, r.Reason)
	dst = appendBytes(dst, r.Output)
	var flags byte
	if r.OutputTruncated {
		flags |= 1
	}
	if r.LogsTruncated {
		flags |= 2
	}
	dst = append(dst, flags)
	dst = binary.AppendUvarint(dst, uint64(len(r.Logs)))
	for _, l := range r.Logs {
		dst = appendString(dst, l)
	}
	dst = appendString(dst, r.Module)
	dst = appendString(dst, r.ModuleVersion)
	for _, t := range []time.Time{r.CreatedAt, r.StartedAt, r.FinishedAt, r.UpdatedAt} {
		dst = appendTime(dst, t)
	}
	dst = binary.AppendUvarint(dst, uint64(len(r.Children)))
	for _, c := range r.Children {
		dst = appendString(dst, c)
	}
	dst = appendString(dst, r.ModuleRole)
	dst = binary.AppendUvarint(dst, uint64(len(r.Attempts)))
	for _, a := range r.Attempts {
		dst = binary.AppendVarint(dst, int64(a.Attempt))
		dst = appendString(dst, string(a.State))
		dst = appendString(dst, a.Reason)
		dst = appendString(dst, a.Module)
		dst = appendString(dst, a.Version)
		dst = appendString(dst, a.Role)
		dst = appendTime(dst, a.StartedAt)
		dst = appendTime(dst, a.FinishedAt)
	}
	for _, a := range r.Attempts {
		dst = binary.AppendUvarint(dst, uint64(len(a.Calls)))
		for _, c := range a.Calls {
			dst = appendString(dst, c.Method)
			dst = appendString(dst, c.Target)
			dst = appendString(dst, c.Path)
			dst = binary.AppendVarint(dst, int64(c.Status))
			dst = appendString(dst, c.Error)
			dst = binary.AppendVarint(dst, int64(c.Duration))
			dst = binary.AppendVarint(dst, c.Bytes)
		}
		dst = binary.AppendVarint(dst, int64(a.CallsDropped))
	}
	for _, a := range r.Attempts {
		dst = appendString(dst, a.TraceID)
	}
	return dst
}

func decodeRecord(b []byte) (backend.JobRecord, error) {
	var rec backend.JobRecord
	r := reader{b: b}
	v := r.byte()
	if r.err == nil && (v < recordV1 || v > recordV4) {
		return rec, fmt.Errorf("job record encoding version %d is not known to this build", v)
	}
	rec.ID = r.string()
	rec.Queue = r.string()
	rec.State = backend.JobState(r.string())
	rec.Attempt = r.int()
	rec.MaxAttempts = r.int()
	rec.Reason = r.string()
	rec.Output = r.bytes()
	flags := r.byte()
	rec.OutputTruncated, rec.LogsTruncated = flags&1 != 0, flags&2 != 0
	for range r.count() {
		rec.Logs = append(rec.Logs, r.string())
	}
	rec.Module = r.string()
	rec.ModuleVersion = r.string()
	rec.CreatedAt, rec.StartedAt, rec.FinishedAt, rec.UpdatedAt = r.time(), r.time(), r.time(), r.time()
	for range r.count() {
		rec.Children = append(rec.Children, r.string())
	}
	if v >= recordV2 {
		rec.ModuleRole = r.string()
		if n := r.count(); r.err == nil {
			rec.Attempts = make([]backend.AttemptRecord, 0, n)
			for range n {
				a := backend.AttemptRecord{Attempt: r.int(), State: backend.JobState(r.string()), Reason: r.string()}
				a.Module, a.Version, a.Role = r.string(), r.string(), r.string()
				a.StartedAt, a.FinishedAt = r.time(), r.time()
				rec.Attempts = append(rec.Attempts, a)
			}
		}
	}
	if v >= recordV3 {
		for i := range rec.Attempts {
			a := &rec.Attempts[i]
			n := r.count()
			if r.err != nil {
				break
			}
			for range n {
				c := backend.CallRecord{Method: r.string(), Target: r.string(), Path: r.string(), Status: r.int()}
				c.Error, c.Duration, c.Bytes = r.string(), time.Duration(r.varint()), r.varint()
				a.Calls = append(a.Calls, c)
			}
			a.CallsDropped = r.int()
		}
	}
	if v >= recordV4 {
		for i := range rec.Attempts {
			rec.Attempts[i].TraceID = r.string()
		}
	}
	return rec, r.finish("job record")
}

// stageRecord writes the record of a job being published (pending, delayed or
// deferred) into batch.
func (b *Backend) stageRecord(batch *pebbledb.Batch, env backend.Envelope, delay time.Duration, deferred bool) {
	b.stageRecordAttempts(batch, env, delay, deferred, nil)
}

// stageRecordAttempts is stageRecord keeping attempts, the runs of the job before it was
// published again (a replayed dead letter lists its earlier runs).
func (b *Backend) stageRecordAttempts(batch *pebbledb.Batch, env backend.Envelope, delay time.Duration, deferred bool, attempts []backend.AttemptRecord) {
	state := backend.JobPending
	switch {
	case delay > 0 && deferred:
		state = backend.JobDeferred
	case delay > 0:
		state = backend.JobDelayed
	}
	b.stageRecordAs(batch, env, state, attempts)
}

// stageRecordAs writes the record of a job not yet run or between runs, in state,
// keeping attempts (its earlier runs), into batch.
func (b *Backend) stageRecordAs(batch *pebbledb.Batch, env backend.Envelope, state backend.JobState, attempts []backend.AttemptRecord) {
	if env.ID == "" {
		return
	}
	rec := backend.JobRecord{
		ID: env.ID, Queue: env.Queue, State: state, Attempt: max(env.Attempt, 1), MaxAttempts: env.MaxAttempts,
		Reason: env.Reason, CreatedAt: env.EnqueuedAt, UpdatedAt: time.Now(), Attempts: attempts,
	}
	batch.Set(recordKey(env.ID), encodeRecord(&rec), nil)
}

// stageSettleRecord writes the record of d's job as settled into batch: state, the
// run's details from run (may be nil), capped. It returns 1 when the record is finished
// (and so counts towards retention).
func (b *Backend) stageSettleRecord(batch *pebbledb.Batch, d *delivery, state backend.JobState, reason string, children []string, run *backend.JobRecord) int {
	env := d.env
	if env.ID == "" {
		return 0
	}
	now := time.Now()
	rec := backend.JobRecord{}
	if run != nil {
		rec = *run
	}
	rec.ID, rec.Queue, rec.State = env.ID, d.q.name, state
	rec.Attempt, rec.MaxAttempts, rec.Reason = max(env.Attempt, 1), env.MaxAttempts, reason
	rec.CreatedAt, rec.UpdatedAt, rec.Children = env.EnqueuedAt, now, children
	if rec.FinishedAt.IsZero() && state.Finished() {
		rec.FinishedAt = now
	}
	calls, dropped, traceID := rec.Calls, rec.CallsDropped, rec.TraceID
	if n := len(calls) - backend.MaxRecordCalls; n > 0 {
		calls, dropped = calls[:backend.MaxRecordCalls], dropped+n
	}
	if b.space.check() != nil {
		// Under the free-space reserve the calls are counted, not kept (as below).
		calls, dropped = nil, dropped+len(calls)
	}
	rec.Calls, rec.CallsDropped, rec.TraceID = nil, 0, "" // kept with the attempt only
	var prior []backend.AttemptRecord
	if !d.it.fresh {
		prior = b.priorAttempts(env.ID)
	}
	rec.Attempts = append(prior, backend.AttemptRecord{
		Attempt: rec.Attempt, State: state, Reason: reason, Module: rec.Module, Version: rec.ModuleVersion,
		Role: rec.ModuleRole, StartedAt: rec.StartedAt, FinishedAt: rec.FinishedAt, Calls: calls, CallsDropped: dropped,
		TraceID: traceID,
	})
	if n := len(rec.Attempts) - backend.MaxRecordAttempts; n > 0 {
		rec.Attempts = rec.Attempts[n:]
	}
	b.records.caps.Apply(&rec)
	if b.space.check() != nil {
		// Under the free-space reserve a settle writes as little as it can.
		rec.Output, rec.OutputTruncated = nil, rec.OutputTruncated || len(rec.Output) > 0
		rec.Logs, rec.LogsTruncated = nil, rec.LogsTruncated || len(rec.Logs) > 0
	}
	batch.Set(recordKey(env.ID), encodeRecord(&rec), nil)
	if !state.Finished() {
		return 0
	}
	batch.Set(byTimeKey(rec.FinishedAt, env.ID), nil, nil)
	return 1
}

// priorAttempts returns the attempts kept in id's record, for a settle to append its
// own. The settle holds the job's delivery, so nothing else writes the record between
// this read and the settle's batch; the read is a point lookup (the record was written
// when the job was published or last settled) and no second write. A record that cannot
// be read gives none: the settle still lands, with its own attempt only.
func (b *Backend) priorAttempts(id string) []backend.AttemptRecord {
	v, err := b.get(recordKey(id))
	if err != nil {
		return nil
	}
	rec, err := decodeRecord(v)
	if err != nil {
		return nil
	}
	return rec.Attempts
}

// JobRecord returns the record of the job with id id. A job handed to a consumer and
// not settled is reported as running (claims are not written to disk).
func (b *Backend) JobRecord(ctx context.Context, id string) (backend.JobRecord, error) {
	if err := b.enter(); err != nil {
		return backend.JobRecord{}, err
	}
	defer b.ops.Done()
	v, err := b.get(recordKey(id))
	if errors.Is(err, pebbledb.ErrNotFound) {
		return backend.JobRecord{}, fmt.Errorf("job %q: %w", id, backend.ErrNotFound)
	}
	if err != nil {
		return backend.JobRecord{}, &backend.TransportError{Op: "job record", Err: err}
	}
	rec, err := decodeRecord(v)
	if err != nil {
		return backend.JobRecord{}, fmt.Errorf("job %q in %s: %w", id, b.dir, err)
	}
	if !rec.State.Finished() && b.ids.claimed(id) {
		rec.State = backend.JobRunning
	}
	return rec, nil
}

// pruneLoop prunes finished records every interval, and when kicked.
func (b *Backend) pruneLoop() {
	defer b.ops.Done()
	t := time.NewTicker(b.records.interval)
	defer t.Stop()
	for {
		select {
		case <-b.done:
			return
		case <-t.C:
		case <-b.recs.kick:
		}
		if err := b.prune(time.Now()); err != nil {
			b.log.Warn("pruning job records", "dir", b.dir, "error", err)
		}
		if err := b.pruneUniq(time.Now()); err != nil {
			b.log.Warn("pruning expired unique keys", "dir", b.dir, "error", err)
		}
		if err := b.pruneGroups(b.closing); err != nil {
			b.log.Warn("pruning ended groups", "dir", b.dir, "error", err)
		}
	}
}

// prune deletes the oldest finished records past the count or the age limit, a batch
// of at most 1024 at a time. A by-time key whose record was written again since (the
// id published anew) goes without its record.
//
// Every id whose record a batch deletes is reserved (idSet.tryReserve) from before its
// record is read until the batch is committed: a publish or replay of the id waits
// meanwhile, so the batch cannot delete a fresh record written after the read. An id
// the backend holds keeps its record (it is the live job's) and loses the stale key;
// an id another operation has reserved keeps both until a later pass.
func (b *Backend) prune(now time.Time) error {
	c := b.records
	for {
		b.recs.mu.Lock()
		excess := b.recs.finished - c.maxCount
		b.recs.mu.Unlock()
		n, err := b.pruneBatch(now, excess, c.maxAge)
		if err != nil {
			return err
		}
		b.recs.mu.Lock()
		b.recs.finished -= n
		b.recs.mu.Unlock()
		if n < 1024 {
			return nil
		}
	}
}

// pruneBatch deletes up to 1024 of the oldest by-time keys past excess or older than
// maxAge, with the records they still stand for, and returns how many keys it deleted.
func (b *Backend) pruneBatch(now time.Time, excess int, maxAge time.Duration) (int, error) {
	reserved := make(map[string]bool)
	defer func() {
		for id := range reserved {
			b.ids.settle(id, false)
		}
	}()
	prefix := []byte{kindByTime}
	it, err := b.db.NewIter(&pebbledb.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return 0, err
	}
	batch := b.db.NewBatch()
	n := 0
	for valid := it.First(); valid && n < 1024; valid = it.Next() {
		k := it.Key()
		at := time.Unix(0, int64(binary.BigEndian.Uint64(k[1:9])))
		if n >= excess && (maxAge < 0 || now.Sub(at) < maxAge) {
			break
		}
		id := string(k[9:])
		if !reserved[id] {
			ok, held := b.ids.tryReserve(id)
			if !ok && !held {
				// Reserved for a moment by a publish, replay or delete that may yet
				// write nothing: deleting the key now could leave the record with
				// none, never pruned. The next pass decides.
				continue
			}
			if ok {
				reserved[id] = true
			}
		}
		batch.Delete(k, nil)
		n++
		if !reserved[id] {
			continue // held: the record is the live job's, this key is stale
		}
		if v, err := b.get(recordKey(id)); err == nil {
			if rec, err := decodeRecord(v); err == nil && rec.State.Finished() && rec.FinishedAt.Equal(at) {
				batch.Delete(recordKey(id), nil)
			}
		}
	}
	ierr := it.Error()
	it.Close()
	if ierr != nil {
		batch.Close()
		return 0, ierr
	}
	if n == 0 {
		batch.Close()
		return 0, nil
	}
	// Without a deadline, commit runs the write here: the reservations end after it.
	if err := b.commit(context.Background(), batch, pebbledb.NoSync, "prune records", "", nil, nil); err != nil {
		return 0, err
	}
	return n, nil
}

// varint reads a signed varint of 64 bits (a duration, a byte count).
func (r *reader) varint() int64 { return readVarint(r, binary.Varint) }
