package pebble

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	pebbledb "github.com/cockroachdb/pebble/v2"
)

// load checks the schema version and rebuilds the in-memory indexes with one scan of
// every key. The scan reads every data block it iterates (the live keys; not the filter
// blocks, nor data hidden by tombstones), so a checksum mismatch in any job fails Open
// with ErrCorrupt instead of surfacing mid-run.
func (b *Backend) load(ctx context.Context) error {
	start := time.Now()
	if err := b.checkSchema(); err != nil {
		return err
	}
	it, err := b.db.NewIter(nil)
	if err != nil {
		return b.corrupt("", err)
	}
	defer it.Close()
	var maxSeq uint64
	var recovered Recovered
	var ready []readyEntry
	var delays []delayEntry
	var places []placeEntry
	deadByQueue := make(map[string]int)
	var waits waitLoad
	n := 0
	for valid := it.First(); valid; valid = it.Next() {
		if n++; n%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("pebble backend: opening %s: %w", b.dir, err)
			}
		}
		k := it.Key()
		v, err := it.ValueAndErr()
		if err != nil {
			return b.corrupt(fmt.Sprintf("key %q", k), err)
		}
		switch k[0] {
		case kindMeta:
		case kindQueue:
			levels, keyLimit, err := decodeQueue(v)
			if err != nil {
				return b.corrupt(fmt.Sprintf("key %q", k), err)
			}
			name := string(k[1:])
			q := newQueue(name, levels)
			q.setKeyLimit(keyLimit)
			b.queues.PutLocked(name, q)
			recovered.Queues++
		case kindReady:
			queue, priority, seq, err := parseReadyKey(k)
			if err != nil {
				return b.corrupt("", err)
			}
			h, err := envelopeHead(v)
			if err != nil {
				return b.corrupt(fmt.Sprintf("ready job %q", k), err)
			}
			maxSeq = max(maxSeq, seq)
			it := &item{seq: seq, priority: priority, id: h.id, ckey: h.key, line: h.line}
			ready = append(ready, readyEntry{queue, it})
			places = appendPlace(places, queue, h)
		case kindDelayed:
			due, seq, deferred, priority, queue, err := parseDelayedKey(k)
			if err != nil {
				return b.corrupt("", err)
			}
			h, err := envelopeHead(v)
			if err != nil {
				return b.corrupt(fmt.Sprintf("delayed job %q", k), err)
			}
			maxSeq = max(maxSeq, seq)
			delays = append(delays, delayEntry{queue, &delayed{due: due, key: append([]byte(nil), k...), id: h.id, priority: priority, deferred: deferred, ckey: h.key, line: h.line}})
			places = appendPlace(places, queue, h)
		case kindDead:
			queue, seq, err := parseDeadKey(k)
			if err != nil {
				return b.corrupt("", err)
			}
			if _, _, _, err := decodeDead(v); err != nil {
				return b.corrupt(fmt.Sprintf("dead letter %q", k), err)
			}
			maxSeq = max(maxSeq, seq)
			deadByQueue[queue]++
			recovered.Dead++
		case kindUnique:
			if err := b.uniq.load(k, v); err != nil {
				return b.corrupt(fmt.Sprintf("unique key %q", k), err)
			}
		case kindGroup:
			seq, id, err := parseGroupKey(k)
			if err != nil {
				return b.corrupt("", err)
			}
			maxSeq = max(maxSeq, seq)
			b.groups.put(id, seq)
		case kindWaiting:
			if err := waits.loadWaiting(k, v); err != nil {
				return b.corrupt(fmt.Sprintf("waiting job %q", k), err)
			}
			recovered.Waiting++
		case kindAwaited:
			if err := waits.loadAwaited(k, v); err != nil {
				return b.corrupt(fmt.Sprintf("awaited result %q", k), err)
			}
		case kindRecord, kindByTime:
			if err := b.recs.load(k, v); err != nil {
				return b.corrupt(fmt.Sprintf("job record %q", k), err)
			}
		default:
			return b.corrupt("", fmt.Errorf("key %q of unknown kind %q", k, k[0]))
		}
	}
	if err := it.Error(); err != nil {
		return b.corrupt("", err)
	}
	// Jobs are indexed after the scan: their queues' keys do not all sort first. The
	// jobs of a concurrency key take their places in its line first, in the order
	// they were enqueued (a retry keeps its first publish's place), whether they are
	// ready or wait for a delay.
	slices.SortFunc(places, func(a, b placeEntry) int { return cmp.Compare(a.line, b.line) })
	for _, e := range places {
		if q, ok := b.queues.GetLocked(e.queue); ok {
			q.JoinKey(e.key, e.id)
		}
	}
	for _, e := range ready {
		q, ok := b.queues.GetLocked(e.queue)
		if !ok {
			return b.corrupt("", fmt.Errorf("ready job %s of queue %q, which was never declared", e.it.id, e.queue))
		}
		if int(e.it.priority) > q.Levels() {
			return b.corrupt("", fmt.Errorf("ready job %s of queue %q at priority %d above its %d levels", e.it.id, e.queue, e.it.priority, q.Levels()))
		}
		q.PushBack(e.it) // no stream yet: nothing to wake
		b.ids.add(e.it.id)
		recovered.Ready++
	}
	for _, e := range delays {
		q, ok := b.queues.GetLocked(e.queue)
		if !ok {
			return b.corrupt("", fmt.Errorf("delayed job %s of queue %q, which was never declared", e.dl.id, e.queue))
		}
		e.dl.q = q
		e.dl.priority = min(e.dl.priority, uint8(q.Levels()))
		if e.dl.deferred {
			q.deferred++
		} else {
			q.delayed++
		}
		b.delays.h = append(b.delays.h, e.dl)
		b.ids.add(e.dl.id)
		recovered.Delayed++
	}
	for name, n := range deadByQueue {
		q, ok := b.queues.GetLocked(name)
		if !ok {
			return b.corrupt("", fmt.Errorf("%d dead letters of queue %q, which was never declared", n, name))
		}
		q.dead = n
	}
	for id, w := range waits.waiters {
		if _, ok := b.queues.GetLocked(w.queue); !ok {
			return b.corrupt("", fmt.Errorf("waiting job %s of queue %q, which was never declared", id, w.queue))
		}
	}
	b.seq.Store(maxSeq)
	b.delays.initHeap()
	if b.released, err = b.finishLoad(&waits); err != nil {
		return err
	}
	recovered.Took = time.Since(start)
	b.recovered = recovered
	return nil
}

type delayEntry struct {
	queue string
	dl    *delayed
}

type readyEntry struct {
	queue string
	it    *item
}

// placeEntry is a job of a concurrency key found at open: its place in its key's line.
type placeEntry struct {
	queue, key, id string
	line           uint64
}

// appendPlace adds the place of a job of queue read from its head, if it has a key.
func appendPlace(places []placeEntry, queue string, h head) []placeEntry {
	if h.key == "" {
		return places
	}
	return append(places, placeEntry{queue: queue, key: h.key, id: h.id, line: h.line})
}

// corrupt returns an ErrCorrupt error naming the directory, the damaged file when
// Pebble reported one, what was being read and the problem.
func (b *Backend) corrupt(what string, err error) error {
	where := b.dir
	if info := b.corruption.Load(); info != nil {
		where = info.Path
	}
	if what != "" {
		return fmt.Errorf("pebble backend: %w: %s: %s: %v", ErrCorrupt, where, what, err)
	}
	return fmt.Errorf("pebble backend: %w: %s: %v", ErrCorrupt, where, err)
}

// checkSchema writes the schema version into a new store and refuses a store of
// another version.
func (b *Backend) checkSchema() error {
	v, closer, err := b.db.Get(schemaKey)
	if errors.Is(err, pebbledb.ErrNotFound) {
		it, err := b.db.NewIter(nil)
		if err != nil {
			return b.corrupt("", err)
		}
		empty := !it.First()
		ierr := it.Error()
		it.Close()
		if ierr != nil {
			return b.corrupt("", ierr)
		}
		if !empty {
			return b.corrupt("", errors.New("the store has data but no schema version: not a wasmjobs data directory"))
		}
		return b.db.Set(schemaKey, binary.AppendUvarint(nil, schemaVersion), pebbledb.Sync)
	}
	if err != nil {
		return b.corrupt("schema version", err)
	}
	defer closer.Close()
	got, n := binary.Uvarint(v)
	if n <= 0 {
		return b.corrupt("schema version", fmt.Errorf("value %x does not decode", v))
	}
	if got != schemaVersion {
		return fmt.Errorf("pebble backend: data directory %s has schema version %d; this build reads version %d", b.dir, got, schemaVersion)
	}
	return nil
}

// initHeap orders the delayed jobs found at Open and arms the timer.
func (x *delayIndex) initHeap() {
	x.mu.Lock()
	defer x.mu.Unlock()
	if len(x.h) == 0 {
		return
	}
	heapInit(&x.h)
	x.arm(time.Until(x.h[0].due))
}
