package stream

import "container/list"

// keyGate is a queue's gate of concurrency keys (backend.Envelope.Key): every job of a
// key holds a place in its key's line, in the order it was enqueued, from its publish
// until it ends, and only the first limit places of a line may be handed out. A ready
// job further back is parked: out of the ready FIFOs, so that no stream takes it and
// it holds neither capacity nor a claim, until the places ahead of it end. A job that
// is retrying, deferred or delayed is no exception: it keeps its place, and so its
// key's next job does not overtake it.
//
// The lines are kept whatever the limit (zero is no gate), so that a limit set later,
// at a declaration or a stream, is exact for the jobs already there. Guarded by the
// queue's lock.
type keyGate[T Item] struct {
	limit  int
	lines  map[string]*list.List    // key -> *keyPlace[T], first enqueued at the front
	byID   map[string]*list.Element // job id -> its place
	parked int                      // places holding a parked ready item
}

// keyPlace is one job's place in the line of its key.
type keyPlace[T Item] struct {
	key, id string
	item    T // the ready item parked here, when parked
	parked  bool
}

func (g *keyGate[T]) init() {
	if g.lines == nil {
		g.lines = make(map[string]*list.List)
		g.byID = make(map[string]*list.Element)
	}
}

// admitted reports whether the place may be handed out: no gate, or one of the first
// limit places of its line.
func (g *keyGate[T]) admitted(el *list.Element) bool {
	if g.limit <= 0 {
		return true
	}
	p := el.Value.(*keyPlace[T])
	n := 0
	for e := g.lines[p.key].Front(); e != nil && n < g.limit; e = e.Next() {
		if e == el {
			return true
		}
		n++
	}
	return false
}

// JoinKey gives the job id of concurrency key key its place at the back of the key's
// line, where it holds it until LeaveKey: the backend calls it when the job is
// published, delayed or not, in the order of the publishes. A job that has a place
// keeps it (a retry is not a new place); an empty key is no line. PushBack and
// PushFront join an item's key themselves, if it has no place. The lock is held.
func (q *Queue[T]) JoinKey(key, id string) {
	if key == "" {
		return
	}
	g := &q.keys
	g.init()
	if _, ok := g.byID[id]; ok {
		return
	}
	l := g.lines[key]
	if l == nil {
		l = list.New()
		g.lines[key] = l
	}
	g.byID[id] = l.PushBack(&keyPlace[T]{key: key, id: id})
}

// LeaveKey frees the place of the job id, which has ended (acknowledged,
// dead-lettered, cancelled or deleted): the key's next job may run, and is made ready
// if it is parked. A job with no place is ignored. The lock is held.
func (q *Queue[T]) LeaveKey(id string) {
	g := &q.keys
	el, ok := g.byID[id]
	if !ok {
		return
	}
	p := el.Value.(*keyPlace[T])
	delete(g.byID, id)
	if p.parked {
		// Its item is dropped with its place: the backend no longer holds the job.
		g.parked--
	}
	l := g.lines[p.key]
	l.Remove(el)
	if l.Len() == 0 {
		delete(g.lines, p.key)
		return
	}
	q.admit(l)
}

// admit makes ready every parked item among the admitted places of l. The lock is
// held.
func (q *Queue[T]) admit(l *list.List) {
	g := &q.keys
	n := 0
	for e := l.Front(); e != nil && (g.limit <= 0 || n < g.limit); e = e.Next() {
		if p := e.Value.(*keyPlace[T]); p.parked {
			v := p.item
			var zero T
			p.item, p.parked = zero, false
			g.parked--
			q.ready[q.level(v)].PushBack(v)
			q.nready++
			q.wakeAll()
		}
		n++
	}
}

// park keeps v out of the ready FIFOs when its place is not admitted, and reports
// whether it did. An item without a key is never parked. The lock is held.
func (q *Queue[T]) park(v T) bool {
	key := v.Key()
	if key == "" {
		return false
	}
	q.JoinKey(key, v.ID())
	g := &q.keys
	el := g.byID[v.ID()]
	if g.admitted(el) {
		return false
	}
	p := el.Value.(*keyPlace[T])
	if !p.parked {
		g.parked++
	}
	p.item, p.parked = v, true
	return true
}

// SetKeyLimit sets how many jobs of one key may be handed out at once; zero or less
// is no limit. The ready items of places no longer admitted are parked, and the parked
// items of places now admitted made ready. It takes the lock.
func (q *Queue[T]) SetKeyLimit(n int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	g := &q.keys
	n = max(n, 0)
	if g.limit == n {
		return
	}
	g.limit = n
	for level := range q.ready {
		r := &q.ready[level]
		for i := 0; i < r.Len(); {
			v := r.At(i)
			if !q.park(v) { // a job without a key is never parked
				i++
				continue
			}
			r.Remove(i)
			q.nready--
		}
	}
	for _, l := range g.lines {
		q.admit(l)
	}
}

// KeyWaiting returns how many ready jobs wait for their key: parked behind as many
// jobs of their key as the limit lets run. The lock is held.
func (q *Queue[T]) KeyWaiting() int { return q.keys.parked }

// parkedItems yields the parked items, each key's in its line's order, the keys in no
// set order (a map's). The lock is held.
func (q *Queue[T]) parkedItems(yield func(T) bool) bool {
	for _, l := range q.keys.lines {
		for e := l.Front(); e != nil; e = e.Next() {
			if p := e.Value.(*keyPlace[T]); p.parked && !yield(p.item) {
				return false
			}
		}
	}
	return true
}

// unpark takes the first parked item that match accepts out of its place, which it
// keeps (the backend frees it with LeaveKey once the job has ended). The lock is held.
func (q *Queue[T]) unpark(match func(T) bool) (T, bool) {
	var zero T
	for _, l := range q.keys.lines {
		for e := l.Front(); e != nil; e = e.Next() {
			if p := e.Value.(*keyPlace[T]); p.parked && match(p.item) {
				v := p.item
				p.item, p.parked = zero, false
				q.keys.parked--
				return v, true
			}
		}
	}
	return zero, false
}
