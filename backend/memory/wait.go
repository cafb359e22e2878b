package memory

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/internal/stream"
)

var (
	_ backend.DependentPublisher = (*Backend)(nil)
	_ backend.WaitCanceller      = (*Backend)(nil)
	_ backend.GroupStore         = (*Backend)(nil)
	_ backend.WaitingDelivery    = (*delivery)(nil)
	_ backend.AwaitedDelivery    = (*delivery)(nil)
)

// waits is the wait graph: the jobs that wait for other jobs, the waiters of each
// awaited job, the results kept of the jobs that ended, and the groups. Its lock is
// taken before any queue's lock and never while one is held: every end of a job
// (a final settle, a cancel, a delete) takes it, so that under it a job is either
// held by a queue, waiting, or ended, never in between.
type waits struct {
	mu      sync.Mutex
	waiters map[string]*waiter              // by the waiting job's id
	by      map[string]map[*waiter]struct{} // an awaited job's id -> its waiters
	ended   map[string]keptResult           // the latest ended jobs' results
	order   stream.Ring[keptID]             // ended, oldest first
	seq     uint64
	keep    int

	groups      map[string]*group
	groupOrder  []*group          // as published, oldest first
	memberOf    map[string]*group // a member's job id -> its group
	endedGroups stream.Ring[*group]
}

type keptResult struct {
	res backend.AwaitResult
	seq uint64
}

type keptID struct {
	id  string
	seq uint64
}

func (w *waits) init(keep int) {
	if keep == 0 {
		keep = DefaultKeepEnded
	}
	w.keep = max(keep, 0)
	w.waiters = make(map[string]*waiter)
	w.by = make(map[string]map[*waiter]struct{})
	w.ended = make(map[string]keptResult)
	w.groups = make(map[string]*group)
	w.memberOf = make(map[string]*group)
}

// stopTimers stops the timeouts of every waiting job: the backend closes.
func (w *waits) stopTimers() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, wt := range w.waiters {
		if wt.timer != nil {
			wt.timer.Stop()
		}
	}
}

// waiter is a job that waits for other jobs: a dependent not yet put on its queue, or
// a parent that settled as waiting.
type waiter struct {
	env       backend.Envelope // as it will be put on its queue
	delay     time.Duration    // from its release, rounded
	onFailure backend.OnFailure
	ids       []string
	pos       map[string]int        // an awaited id -> its place in ids
	results   []backend.AwaitResult // in the order of ids; JobUnfinished until each ended
	left      int                   // awaited jobs not ended
	timer     *time.Timer
}

// capOutput cuts out to backend.MaxAwaitOutput, saying whether it did.
func capOutput(out []byte) ([]byte, bool) {
	if len(out) > backend.MaxAwaitOutput {
		return slices.Clone(out[:backend.MaxAwaitOutput]), true
	}
	return slices.Clone(out), false
}

// heldBy names the queue that holds the job id (ready, delayed, running, or waiting to
// run on it), or is empty. b.w.mu is held, and no queue's lock.
func (b *Backend) heldBy(id string) string {
	if wt, ok := b.w.waiters[id]; ok {
		return wt.env.Queue
	}
	qs, _ := b.queues.Snapshot()
	for _, q := range qs {
		q.Lock()
		held := q.ids[id] > 0
		q.Unlock()
		if held {
			return q.name
		}
	}
	return ""
}

// lockQueues looks up the named queues and locks each once, in name order (the order
// every caller that holds more than one queue's lock takes them in); unlock releases
// them.
func (b *Backend) lockQueues(names []string) (qs map[string]*queue, unlock func(), err error) {
	names = slices.Clone(names)
	slices.Sort(names)
	names = slices.Compact(names)
	qs = make(map[string]*queue, len(names))
	ordered := make([]*queue, 0, len(names))
	for _, name := range names {
		q, err := b.queues.Lookup(name)
		if err != nil {
			return nil, nil, err
		}
		qs[name] = q
		ordered = append(ordered, q)
	}
	for _, q := range ordered {
		q.Lock()
	}
	return qs, func() {
		for _, q := range ordered {
			q.Unlock()
		}
	}, nil
}

// checkPublications checks the delays of pubs and rounds them up; queues are checked
// by lockQueues.
func (b *Backend) checkPublications(pubs []backend.Publication) ([]time.Duration, error) {
	delays := make([]time.Duration, len(pubs))
	for i, p := range pubs {
		if err := backend.CheckDelay(p.Delay, backend.MaxDelay); err != nil {
			return nil, fmt.Errorf("job %s for queue %q: %w", p.Envelope.ID, p.Envelope.Queue, err)
		}
		delays[i] = backend.RoundUp(p.Delay, b.granularity)
	}
	return delays, nil
}

// putNewLocked puts a freshly published job on q, with the results it awaited (nil
// for none), unless q holds its id (a repeat, dropped). q's lock is held.
func (b *Backend) putNewLocked(q *queue, env backend.Envelope, delay time.Duration, awaited []backend.AwaitResult) {
	if env.ID != "" && q.ids[env.ID] > 0 {
		b.log.Debug("repeat publish dropped: the queue holds the job", "queue", q.name, "job", env.ID)
		return
	}
	m := &message{env: env.Clone(), awaited: awaited}
	m.env.Redelivered = false
	q.put(m, delay, false)
}

// pendingWaiter is a waiter being published, before it joins the graph.
type pendingWaiter struct {
	wt      *waiter
	timeout time.Duration
}

// resolveLocked builds the waiter of env awaiting a: each id must be in earlier (ids
// published before it in the same write) or known to the backend. b.w.mu is held, and
// no queue's lock.
func (b *Backend) resolveLocked(env backend.Envelope, delay time.Duration, a backend.Await, earlier map[string]string) (*waiter, error) {
	wt := &waiter{env: env.Clone(), delay: delay, onFailure: a.OnFailure, ids: slices.Clone(a.IDs), pos: make(map[string]int, len(a.IDs))}
	wt.env.Redelivered = false
	if wt.onFailure == "" {
		wt.onFailure = backend.OnFailureCancel
	}
	for i, id := range a.IDs {
		if _, seen := wt.pos[id]; seen {
			return nil, fmt.Errorf("job %s awaits %q twice", env.ID, id)
		}
		wt.pos[id] = i
		if id == env.ID {
			return nil, fmt.Errorf("job %s awaits itself: %w", env.ID, backend.ErrUnknownAwait)
		}
		res := backend.AwaitResult{ID: id, State: backend.JobUnfinished}
		if queue, ok := earlier[id]; ok {
			res.Queue = queue
			wt.left++
		} else if queue := b.heldBy(id); queue != "" {
			res.Queue = queue
			wt.left++
		} else if k, ok := b.w.ended[id]; ok {
			res = k.res // ended already (a dead letter ended when it died)
		} else {
			return nil, fmt.Errorf("job %s %w %q", env.ID, backend.ErrUnknownAwait, id)
		}
		wt.results = append(wt.results, res)
	}
	return wt, nil
}

// PublishDependents publishes deps in one step under the backend's locks: those that
// await nothing (or only jobs that ended) are put on their queues, the others kept
// waiting; an Await ID that names neither an earlier dependent nor a job the backend
// knows (held, waiting, or among the KeepEnded latest ended) fails the whole call with
// backend.ErrUnknownAwait.
func (b *Backend) PublishDependents(ctx context.Context, deps []backend.Dependent) error {
	b.w.mu.Lock()
	defer b.w.mu.Unlock()
	return b.publishDependentsLocked(deps, nil)
}

// publishDependentsLocked is PublishDependents, keeping g (when not nil) in the same
// step once everything is checked. b.w.mu is held.
func (b *Backend) publishDependentsLocked(deps []backend.Dependent, g *group) error {
	if len(deps) == 0 && g == nil {
		return nil
	}
	pubs := make([]backend.Publication, len(deps))
	names := make([]string, len(deps))
	for i, d := range deps {
		pubs[i], names[i] = d.Publication, d.Envelope.Queue
	}
	delays, err := b.checkPublications(pubs)
	if err != nil {
		return err
	}
	for _, name := range names {
		if _, err := b.queues.Lookup(name); err != nil {
			return err
		}
	}
	earlier := make(map[string]string, len(deps))
	waiting := make([]*pendingWaiter, len(deps))
	for i, d := range deps {
		if len(d.Await.IDs) > 0 {
			wt, err := b.resolveLocked(d.Envelope, delays[i], d.Await, earlier)
			if err != nil {
				return err
			}
			waiting[i] = &pendingWaiter{wt: wt, timeout: d.Await.Timeout}
		}
		earlier[d.Envelope.ID] = d.Envelope.Queue
	}
	qs, unlock, err := b.lockQueues(names)
	if err != nil {
		return err
	}
	var joined []*pendingWaiter
	for i, d := range deps {
		q := qs[d.Envelope.Queue]
		pw := waiting[i]
		if pw == nil {
			b.putNewLocked(q, d.Envelope, delays[i], nil)
			continue
		}
		if _, cancel := failed(pw.wt); pw.wt.left == 0 && !cancel {
			b.putNewLocked(q, d.Envelope, delays[i], pw.wt.results)
			continue
		}
		if q.ids[d.Envelope.ID] > 0 {
			continue // a repeat of a job the queue holds
		}
		q.waitJoin(d.Envelope.ID)
		joined = append(joined, pw)
	}
	unlock()
	if g != nil {
		b.keepGroupLocked(g)
	}
	for _, pw := range joined {
		b.joinLocked(pw.wt, pw.timeout)
	}
	return nil
}

// failed returns the first job wt awaits that ended and did not succeed, when wt
// cancels on failure: wt is then to be cancelled, not run, whatever it still awaits.
func failed(wt *waiter) (backend.AwaitResult, bool) {
	if wt.onFailure != backend.OnFailureCancel {
		return backend.AwaitResult{}, false
	}
	i := slices.IndexFunc(wt.results, func(r backend.AwaitResult) bool { return r.State.Finished() && r.State != backend.JobSucceeded })
	if i < 0 {
		return backend.AwaitResult{}, false
	}
	return wt.results[i], true
}

// joinLocked adds wt, counted as waiting on its queue already, to the graph, and
// settles it at once if it has nothing left to wait for. b.w.mu is held, and no
// queue's lock.
func (b *Backend) joinLocked(wt *waiter, timeout time.Duration) {
	b.w.waiters[wt.env.ID] = wt
	for i, id := range wt.ids {
		if wt.results[i].State != backend.JobUnfinished {
			continue
		}
		set := b.w.by[id]
		if set == nil {
			set = make(map[*waiter]struct{})
			b.w.by[id] = set
		}
		set[wt] = struct{}{}
	}
	if _, cancel := failed(wt); wt.left == 0 || cancel {
		b.settleWaiterLocked(wt)
		return
	}
	if timeout <= 0 {
		timeout = backend.DefaultWaitTimeout
	}
	wt.timer = time.AfterFunc(timeout, func() {
		b.w.mu.Lock()
		defer b.w.mu.Unlock()
		if b.w.waiters[wt.env.ID] != wt {
			return // released or cancelled meanwhile
		}
		b.releaseLocked(wt) // with the jobs that did not end as JobUnfinished
	})
}

// removeLocked takes wt out of the graph. b.w.mu is held.
func (b *Backend) removeLocked(wt *waiter) {
	if b.w.waiters[wt.env.ID] == wt {
		delete(b.w.waiters, wt.env.ID)
	}
	for _, id := range wt.ids {
		if set := b.w.by[id]; set != nil {
			delete(set, wt)
			if len(set) == 0 {
				delete(b.w.by, id)
			}
		}
	}
	if wt.timer != nil {
		wt.timer.Stop()
	}
}

// settleWaiterLocked ends the wait of wt, whose awaited jobs all ended: it runs, or
// is cancelled if one failed and it cancels on failure, or if its group was
// cancelled. b.w.mu is held, and no queue's lock.
func (b *Backend) settleWaiterLocked(wt *waiter) {
	if g := b.w.memberOf[wt.env.ID]; g != nil && g.rec.State == backend.GroupCancelled {
		b.cancelWaiterLocked(wt, "its group was cancelled")
		return
	}
	if r, cancel := failed(wt); cancel {
		b.cancelWaiterLocked(wt, fmt.Sprintf("job %s it awaits ended %s: %s", r.ID, r.State, r.Reason))
		return
	}
	b.releaseLocked(wt)
}

// releaseLocked puts wt on its queue, with the results it gathered. b.w.mu is held,
// and no queue's lock.
func (b *Backend) releaseLocked(wt *waiter) {
	b.removeLocked(wt)
	q, err := b.queues.Lookup(wt.env.Queue)
	if err != nil {
		return // closed: nothing survives it
	}
	m := &message{env: wt.env, awaited: wt.results}
	q.Lock()
	q.waitLeave(wt.env.ID)
	q.put(m, wt.delay, false)
	q.Unlock()
}

// cancelWaiterLocked cancels the waiting wt with reason: its own waiters see it
// cancelled. b.w.mu is held, and no queue's lock.
func (b *Backend) cancelWaiterLocked(wt *waiter, reason string) {
	b.removeLocked(wt)
	if q, err := b.queues.Lookup(wt.env.Queue); err == nil {
		q.Lock()
		q.waitLeave(wt.env.ID)
		q.uniqFinished(wt.env.ID, time.Now()) // a parent's unique key: the job ended
		q.Unlock()
	}
	b.endedLocked(backend.AwaitResult{ID: wt.env.ID, Queue: wt.env.Queue, State: backend.JobCancelled, Reason: reason})
}

// endedLocked records that a job ended as res says: its result is kept, its group
// counts it, and its waiters learn of it. b.w.mu is held, and no queue's lock.
func (b *Backend) endedLocked(res backend.AwaitResult) {
	res.Output, res.OutputTruncated = capOutput(res.Output)
	if b.w.keep > 0 {
		b.w.seq++
		b.w.ended[res.ID] = keptResult{res: res, seq: b.w.seq}
		b.w.order.PushBack(keptID{id: res.ID, seq: b.w.seq})
		for b.w.order.Len() > b.w.keep {
			old := b.w.order.PopFront()
			if k, ok := b.w.ended[old.id]; ok && k.seq == old.seq {
				delete(b.w.ended, old.id)
			}
		}
	}
	if g := b.w.memberOf[res.ID]; g != nil {
		b.memberEndedLocked(g, res)
	}
	set := b.w.by[res.ID]
	delete(b.w.by, res.ID)
	waiters := make([]*waiter, 0, len(set))
	for wt := range set {
		waiters = append(waiters, wt)
	}
	// By id (ids sort by creation time), so that their releases come in a set order.
	slices.SortFunc(waiters, func(x, y *waiter) int { return cmp.Compare(x.env.ID, y.env.ID) })
	for _, wt := range waiters {
		if b.w.waiters[wt.env.ID] != wt {
			continue // cancelled by an earlier one's end
		}
		wt.results[wt.pos[res.ID]] = res
		wt.left--
		if _, cancel := failed(wt); wt.left == 0 || cancel {
			b.settleWaiterLocked(wt)
		}
	}
}

// cancelHeldLocked cancels the job id where a queue holds it ready or delayed, with
// reason. It reports whether it did, and whether the job is running instead (handed to
// a consumer and not settled). b.w.mu is held, and no queue's lock.
func (b *Backend) cancelHeldLocked(id, reason string) (cancelled, running bool) {
	if _, ok := b.w.waiters[id]; ok {
		return false, false // counted by its queue, yet not running: the caller cancels its wait
	}
	qs, _ := b.queues.Snapshot()
	for _, q := range qs {
		q.Lock()
		w := q.where(id)
		switch {
		case w == ready || w == held:
			q.unwait(id, w)
			q.uniqFinished(id, time.Now())
			q.Unlock()
			b.endedLocked(backend.AwaitResult{ID: id, Queue: q.name, State: backend.JobCancelled, Reason: reason})
			return true, false
		case w == nowhere && q.ids[id] > 0:
			q.Unlock()
			return false, true
		}
		q.Unlock()
	}
	return false, false
}

// CancelWaiting cancels the waiting job id (its waiters see it cancelled); with
// cascade, the jobs it awaits that have not ended too, each waiting one with its own
// cascade. It returns the ids it cancelled and those of awaited jobs still running.
func (b *Backend) CancelWaiting(ctx context.Context, id, reason string, cascade bool) (cancelled, running []string, err error) {
	if b.queues.IsClosed() {
		return nil, nil, backend.ErrShutDown
	}
	b.w.mu.Lock()
	defer b.w.mu.Unlock()
	wt, ok := b.w.waiters[id]
	if !ok {
		if _, ended := b.w.ended[id]; ended || b.heldBy(id) != "" {
			return nil, nil, fmt.Errorf("job %q is not waiting: %w", id, backend.ErrJobState)
		}
		return nil, nil, notHeld(id)
	}
	cancelled, running = b.cancelWaitingLocked(wt, reason, cascade)
	return cancelled, running, nil
}

func (b *Backend) cancelWaitingLocked(wt *waiter, reason string, cascade bool) (cancelled, running []string) {
	var open []string
	for i, id := range wt.ids {
		if wt.results[i].State == backend.JobUnfinished {
			open = append(open, id)
		}
	}
	b.cancelWaiterLocked(wt, reason) // first, so that its children's ends do not release it
	cancelled = []string{wt.env.ID}
	if !cascade {
		return cancelled, nil
	}
	for _, id := range open {
		if child, ok := b.w.waiters[id]; ok {
			c, r := b.cancelWaitingLocked(child, reason, true)
			cancelled, running = append(cancelled, c...), append(running, r...)
			continue
		}
		c, r := b.cancelHeldLocked(id, reason)
		if c {
			cancelled = append(cancelled, id)
		}
		if r {
			running = append(running, id)
		}
	}
	return cancelled, running
}

// Awaited returns the results the delivered job gathered in its last wait, nil for a
// job that never waited; they travel with the job through its retries and defers.
func (d *delivery) Awaited(ctx context.Context) ([]backend.AwaitResult, error) {
	if d.m.awaited == nil {
		return nil, nil
	}
	out := make([]backend.AwaitResult, len(d.m.awaited))
	for i, r := range d.m.awaited {
		r.Output = slices.Clone(r.Output)
		out[i] = r
	}
	backend.CapAwaitTotal(out)
	return out, nil
}

// WaitWith publishes children and settles the delivery as waiting, in one step under
// the backend's locks: the job leaves its stream, freeing its slot, and is counted as
// waiting on its queue, holding no place in its key's line; once every job of await
// ended (or its timeout passed) it is put back on its queue at the same attempt, one
// round higher. rec is not kept: the backend keeps no records.
func (d *delivery) WaitWith(ctx context.Context, children []backend.Publication, await backend.Await, rec *backend.JobRecord) error {
	if err := d.begin(); err != nil {
		return err
	}
	b := d.b
	b.w.mu.Lock()
	defer b.w.mu.Unlock()
	err := func() error {
		delays, err := b.checkPublications(children)
		if err != nil {
			return err
		}
		earlier := make(map[string]string, len(children))
		names := []string{d.q.name}
		for _, c := range children {
			earlier[c.Envelope.ID] = c.Envelope.Queue
			names = append(names, c.Envelope.Queue)
		}
		next := d.m.env
		next.Round++
		await.OnFailure = backend.OnFailureRun // a waiting parent always runs again
		wt, err := b.resolveLocked(next, 0, await, earlier)
		if err != nil {
			return err
		}
		qs, unlock, err := b.lockQueues(names)
		if err != nil {
			return err
		}
		for i, c := range children {
			b.putNewLocked(qs[c.Envelope.Queue], c.Envelope, delays[i], nil)
		}
		d.c.FinishLocked()
		d.q.release(d.m)
		d.q.waitJoin(d.m.env.ID)
		unlock()
		d.c.Wake()
		b.joinLocked(wt, await.Timeout)
		return nil
	}()
	if err != nil {
		d.c.Reopen()
	}
	return err
}

// group is a workflow or batch the backend keeps.
type group struct {
	rec     backend.GroupRecord
	index   map[string]int // a member's job id -> its place in rec.Members
	counted int            // members that count in its state (no role)
	ended   int            // of them, those that ended
	failed  bool           // one of them did not succeed
}

// PublishGroup publishes deps as PublishDependents does and keeps g in the same step.
func (b *Backend) PublishGroup(ctx context.Context, g backend.GroupRecord, deps []backend.Dependent) error {
	if g.ID == "" {
		return fmt.Errorf("group without an id")
	}
	if g.Kind != backend.GroupWorkflow && g.Kind != backend.GroupBatch {
		return fmt.Errorf("group %s of unknown kind %q", g.ID, g.Kind)
	}
	if len(g.Members) != len(deps) {
		return fmt.Errorf("group %s has %d members for %d jobs", g.ID, len(g.Members), len(deps))
	}
	ng := &group{index: make(map[string]int, len(deps))}
	ng.rec = g
	ng.rec.Members = slices.Clone(g.Members)
	ng.rec.State = backend.GroupRunning
	ng.rec.FinishedAt = time.Time{}
	if ng.rec.CreatedAt.IsZero() {
		ng.rec.CreatedAt = time.Now()
	}
	for i, d := range deps {
		m := &ng.rec.Members[i]
		if m.ID != d.Envelope.ID || m.Queue != d.Envelope.Queue {
			return fmt.Errorf("group %s: member %d is job %s of queue %q, but its job is %s of queue %q", g.ID, i, m.ID, m.Queue, d.Envelope.ID, d.Envelope.Queue)
		}
		if _, dup := ng.index[m.ID]; dup {
			return fmt.Errorf("group %s: job %s is two members", g.ID, m.ID)
		}
		ng.index[m.ID] = i
		m.DependsOn = slices.Clone(m.DependsOn)
		m.State, m.Reason = backend.JobPending, ""
		if len(d.Await.IDs) > 0 {
			m.State = backend.JobWaiting
		}
		if m.Role == "" {
			ng.counted++
		}
	}
	if b.queues.IsClosed() {
		return backend.ErrShutDown
	}
	b.w.mu.Lock()
	defer b.w.mu.Unlock()
	if _, ok := b.w.groups[g.ID]; ok {
		return fmt.Errorf("group %s exists already", g.ID)
	}
	return b.publishDependentsLocked(deps, ng)
}

// keepGroupLocked keeps g, whose jobs are published. b.w.mu is held.
func (b *Backend) keepGroupLocked(g *group) {
	b.w.groups[g.rec.ID] = g
	b.w.groupOrder = append(b.w.groupOrder, g)
	for _, m := range g.rec.Members {
		b.w.memberOf[m.ID] = g
	}
	if g.counted == 0 {
		b.groupEndedLocked(g, backend.GroupSucceeded)
	}
}

// memberEndedLocked counts the end of one of g's members. b.w.mu is held.
func (b *Backend) memberEndedLocked(g *group, res backend.AwaitResult) {
	i, ok := g.index[res.ID]
	if !ok {
		return
	}
	m := &g.rec.Members[i]
	if m.State.Finished() {
		return
	}
	m.State, m.Reason = res.State, res.Reason
	if m.Role != "" {
		return
	}
	g.ended++
	if res.State != backend.JobSucceeded {
		g.failed = true
	}
	if g.ended == g.counted && g.rec.State == backend.GroupRunning {
		state := backend.GroupSucceeded
		if g.failed {
			state = backend.GroupFailed
		}
		b.groupEndedLocked(g, state)
	}
}

// groupEndedLocked ends g as state, and forgets the oldest ended groups past what the
// backend keeps. b.w.mu is held.
func (b *Backend) groupEndedLocked(g *group, state backend.GroupState) {
	g.rec.State, g.rec.FinishedAt = state, time.Now()
	b.pruneGroupsLocked(g)
}

// pruneGroupsLocked counts g, which just ended, among the ended groups, and forgets the
// oldest of them past what the backend keeps. b.w.mu is held.
func (b *Backend) pruneGroupsLocked(g *group) {
	b.w.endedGroups.PushBack(g)
	for b.w.endedGroups.Len() > b.w.keep {
		old := b.w.endedGroups.PopFront()
		delete(b.w.groups, old.rec.ID)
		b.w.groupOrder = slices.DeleteFunc(b.w.groupOrder, func(x *group) bool { return x == old })
		for _, m := range old.rec.Members {
			if b.w.memberOf[m.ID] == old {
				delete(b.w.memberOf, m.ID)
			}
		}
	}
}

// liveLocked is g's record with the live state of each member that has not ended.
// b.w.mu is held, and no queue's lock.
func (b *Backend) liveLocked(g *group) backend.GroupRecord {
	rec := g.rec
	rec.Members = slices.Clone(g.rec.Members)
	for i := range rec.Members {
		m := &rec.Members[i]
		m.DependsOn = slices.Clone(m.DependsOn)
		if m.State.Finished() {
			continue
		}
		if _, ok := b.w.waiters[m.ID]; ok {
			m.State = backend.JobWaiting
			continue
		}
		if q, err := b.queues.Lookup(m.Queue); err == nil {
			q.Lock()
			m.State = q.stateOf(m.ID)
			q.Unlock()
		}
	}
	return rec
}

// stateOf is the state of the job id the queue holds (pending when it holds it no
// more: about to be put back). the queue's lock is held.
func (q *queue) stateOf(id string) backend.JobState {
	switch q.where(id) {
	case ready:
		return backend.JobPending
	case held:
		for _, h := range q.held {
			if h.m.env.ID == id {
				switch {
				case h.deferred:
					return backend.JobDeferred
				case h.m.env.Attempt > 1:
					return backend.JobRetrying
				}
			}
		}
		return backend.JobDelayed
	case dead:
		return backend.JobDead
	}
	if q.ids[id] > 0 {
		return backend.JobRunning
	}
	return backend.JobPending
}

// Group returns the group id with its members' live states.
func (b *Backend) Group(ctx context.Context, id string) (backend.GroupRecord, error) {
	if b.queues.IsClosed() {
		return backend.GroupRecord{}, backend.ErrShutDown
	}
	b.w.mu.Lock()
	defer b.w.mu.Unlock()
	g, ok := b.w.groups[id]
	if !ok {
		return backend.GroupRecord{}, fmt.Errorf("group %q: %w", id, backend.ErrNotFound)
	}
	return b.liveLocked(g), nil
}

// ListGroups returns a page of the groups of kind, newest first; a page's Next is the
// id of the group that starts the following one.
func (b *Backend) ListGroups(ctx context.Context, kind backend.GroupKind, cursor string, limit int) (backend.GroupPage, error) {
	if b.queues.IsClosed() {
		return backend.GroupPage{}, backend.ErrShutDown
	}
	if limit <= 0 {
		limit = backend.DefaultJobPage
	}
	b.w.mu.Lock()
	defer b.w.mu.Unlock()
	var page backend.GroupPage
	started := cursor == ""
	for i := len(b.w.groupOrder) - 1; i >= 0; i-- {
		g := b.w.groupOrder[i]
		if !started {
			if g.rec.ID != cursor {
				continue
			}
			started = true
		}
		if g.rec.Kind != kind {
			continue
		}
		if len(page.Groups) == limit {
			page.Next = g.rec.ID
			break
		}
		page.Groups = append(page.Groups, b.liveLocked(g))
	}
	return page, nil
}

// CancelGroup marks the running group id cancelled and cancels its members that have
// not ended and are not running: the waiting ones first, so that none of them is put
// on its queue meanwhile (a waiter of a cancelled group is cancelled, never released).
func (b *Backend) CancelGroup(ctx context.Context, id, reason string) ([]string, error) {
	if b.queues.IsClosed() {
		return nil, backend.ErrShutDown
	}
	b.w.mu.Lock()
	defer b.w.mu.Unlock()
	g, ok := b.w.groups[id]
	if !ok {
		return nil, fmt.Errorf("group %q: %w", id, backend.ErrNotFound)
	}
	if g.rec.State != backend.GroupRunning {
		return nil, fmt.Errorf("group %q is %s: %w", id, g.rec.State, backend.ErrJobState)
	}
	// Cancelled before its members are, so that none of them is released meanwhile;
	// counted among the ended groups after them, so that it is not forgotten while
	// its members are cancelled.
	g.rec.State, g.rec.FinishedAt = backend.GroupCancelled, time.Now()
	defer b.pruneGroupsLocked(g)
	for _, m := range g.rec.Members {
		if wt, ok := b.w.waiters[m.ID]; ok {
			b.cancelWaiterLocked(wt, reason)
		}
	}
	var running []string
	for _, m := range g.rec.Members {
		if m.State.Finished() {
			continue
		}
		if _, r := b.cancelHeldLocked(m.ID, reason); r {
			running = append(running, m.ID)
		}
	}
	return running, nil
}
