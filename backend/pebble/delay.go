package pebble

import (
	"container/heap"
	"fmt"
	"sync"
	"time"

	pebbledb "github.com/cockroachdb/pebble/v2"
)

// delayed is a delayed or deferred job in the index.
type delayed struct {
	due      time.Time // monotonic for jobs published by this process
	key      []byte
	q        *queue
	id       string
	priority uint8
	deferred bool
	// ckey and line are the job's concurrency key and its place in the key's line
	// (see item), which it holds while it waits.
	ckey string
	line uint64
	// fresh: the job's record holds no attempts yet (see item).
	fresh bool
}

type delayHeap []*delayed

func (h delayHeap) Len() int           { return len(h) }
func (h delayHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h delayHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *delayHeap) Push(x any)        { *h = append(*h, x.(*delayed)) }
func (h *delayHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return x
}

// delayIndex is the heap of due times with one timer for the earliest. When it fires,
// every due job moves from its delayed key to a ready key in one batch.
type delayIndex struct {
	b       *Backend
	mu      sync.Mutex
	h       delayHeap
	timer   *time.Timer
	stopped bool
}

// add indexes a delayed job (its key is committed) and counts it on its queue; a job
// of a concurrency key holds its place in the key's line while it waits.
func (x *delayIndex) add(dl *delayed) {
	dl.q.Lock()
	dl.q.JoinKey(dl.ckey, dl.id)
	if dl.deferred {
		dl.q.deferred++
	} else {
		dl.q.delayed++
	}
	dl.q.Unlock()
	x.mu.Lock()
	defer x.mu.Unlock()
	heap.Push(&x.h, dl)
	if x.h[0] == dl {
		x.arm(time.Until(dl.due))
	}
}

// arm sets the timer to fire after d. x.mu is held.
func (x *delayIndex) arm(d time.Duration) {
	if x.stopped {
		return
	}
	if x.timer == nil {
		x.timer = time.AfterFunc(d, x.fire)
		return
	}
	x.timer.Reset(d)
}

func (x *delayIndex) stop() {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.stopped = true
	if x.timer != nil {
		x.timer.Stop()
	}
}

// fire releases every job that is due: never one whose due time is still ahead.
func (x *delayIndex) fire() {
	b := x.b
	if b.enter() != nil {
		return
	}
	defer b.ops.Done()
	x.mu.Lock()
	now := time.Now()
	var due []*delayed
	for len(x.h) > 0 && !x.h[0].due.After(now) && len(due) < 1024 {
		due = append(due, heap.Pop(&x.h).(*delayed))
	}
	if len(x.h) > 0 {
		x.arm(max(time.Until(x.h[0].due), 0))
	}
	x.mu.Unlock()
	if len(due) == 0 {
		return
	}
	batch := b.db.NewBatch()
	var items []*item
	for _, dl := range due {
		value, err := b.get(dl.key)
		if err != nil {
			// The index holds a delayed job the store cannot give: the store is
			// damaged or failing. Dropping it from the index would leave it stuck on
			// disk until a restart; the store fails instead (every stream ends), and
			// every job stays where it is for the next Open.
			batch.Close()
			err = b.fail(fmt.Errorf("%w: %w: %s: reading delayed job %s of queue %q (key %q): %v",
				ErrStoreFailed, ErrCorrupt, b.dir, dl.id, dl.q.name, dl.key, err))
			b.log.Error("releasing a delayed job; the store is failed", "dir", b.dir, "error", err)
			x.mu.Lock()
			for _, dl := range due {
				heap.Push(&x.h, dl)
			}
			x.mu.Unlock()
			return
		}
		seq := b.seq.Add(1)
		batch.Delete(dl.key, nil)
		batch.Set(readyKey(dl.q.name, dl.priority, seq), value, nil)
		items = append(items, &item{seq: seq, priority: dl.priority, id: dl.id, ckey: dl.ckey, line: dl.line, fresh: dl.fresh})
	}
	// A release lost in a crash is released again after the restart: no fsync of its own.
	if err := b.apply(batch, pebbledb.NoSync); err != nil {
		batch.Close()
		b.log.Error("releasing delayed jobs; retrying in a second", "dir", b.dir, "error", err)
		x.mu.Lock()
		for _, dl := range due {
			heap.Push(&x.h, dl)
		}
		x.arm(time.Second)
		x.mu.Unlock()
		return
	}
	batch.Close()
	for i, dl := range due {
		dl.q.Lock()
		if dl.deferred {
			dl.q.deferred--
		} else {
			dl.q.delayed--
		}
		if items[i] != nil {
			dl.q.PushBack(items[i])
		}
		dl.q.Unlock()
	}
	if len(due) == 1024 {
		x.mu.Lock()
		x.arm(0)
		x.mu.Unlock()
	}
}
