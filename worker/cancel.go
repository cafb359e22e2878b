package worker

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// ErrCancelled is the cause (context.Cause) of a running job's handler context when an
// operator cancelled the job (Worker.Cancel): a handler that looks at the cause can
// tell a cancel from a deadline or the drain. Its message is the reason the job's
// record keeps.
var ErrCancelled = errors.New("cancelled by an operator")

// ErrLost is the cause (context.Cause) of a running job's handler context when the
// backend took the job's delivery back while it ran (backend.LeasedDelivery: a lease
// the host could not renew): another worker may run the job now, so the handler is
// stopped, and its settle is refused.
var ErrLost = errors.New("the job's claim was lost: the backend took it back while it ran")

// ErrNotRunning is wrapped by Cancel's error when the job is not running on this
// worker: never taken here, settled already, or waiting in its queue.
var ErrNotRunning = errors.New("the job is not running on this worker")

// ErrSettling is wrapped by Cancel's error when the job's handler had returned before
// the cancel: its own settle, which the error names, is under way or done, and wins.
var ErrSettling = errors.New("the job's handler had returned: its settle wins")

// errAbandoned is settle's error for a job left unacknowledged at the drain deadline.
var errAbandoned = errors.New("left unacknowledged at the drain deadline: the backend delivers it again")

// run is one job from its handler's start to the end of its settle, as Cancel finds it.
type run struct {
	id      string
	cancel  context.CancelCauseFunc // cancels the handler's context
	decided chan struct{}           // closed once settle is set
	done    chan struct{}           // closed once err is set: the settle returned
	settle  Outcome                 // written before decided is closed
	err     error                   // written before done is closed

	// guarded by runs.mu
	cancelled bool // Cancel came before the handler returned
	returned  bool // the handler returned
}

// runs are the jobs whose handlers run or whose settles are under way, by job id.
type runs struct {
	mu   sync.Mutex
	byID map[string]*run
}

// start counts in a job whose handler is about to run under a context cancel
// cancels. A second delivery of an id already running here (a broker's repeat) is
// not counted: Cancel finds the first.
func (rs *runs) start(id string, cancel context.CancelCauseFunc) *run {
	r := &run{id: id, cancel: cancel, decided: make(chan struct{}), done: make(chan struct{})}
	if id == "" {
		return r
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.byID == nil {
		rs.byID = make(map[string]*run)
	}
	if _, ok := rs.byID[id]; !ok {
		rs.byID[id] = r
	}
	return r
}

// returned marks r's handler returned and reports whether a cancel came first: then
// the job settles as cancelled whatever its result.
func (rs *runs) returned(r *run) (cancelled bool) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	r.returned = true
	return r.cancelled
}

// decide records how r settles, for a Cancel that comes too late to say so.
func (r *run) decide(settle Outcome) {
	r.settle = settle
	close(r.decided)
}

// end takes r out once its settle returned with err.
func (rs *runs) end(r *run, err error) {
	rs.mu.Lock()
	if rs.byID[r.id] == r {
		delete(rs.byID, r.id)
	}
	rs.mu.Unlock()
	r.err = err
	close(r.done)
}

// Cancel cancels the job id running on this worker: its handler's context is
// cancelled with ErrCancelled as its cause, and once the handler returns the job
// settles as cancelled whatever its result (Cancelled: what it staged is dropped, it
// is never retried), through backend.CancellableDelivery where the delivery has it
// and with a plain Ack where not. Cancel waits for that settle, or for ctx, and
// returns nil once the job is settled. It fails with an error wrapping ErrNotRunning
// when the job is not running here, and ErrSettling, naming the settle, when the
// job's handler had returned already. A second Cancel of the same run waits for the
// same settle.
func (w *Worker) Cancel(ctx context.Context, id string) error {
	w.runs.mu.Lock()
	r, ok := w.runs.byID[id]
	var first, late bool
	if ok {
		late = r.returned && !r.cancelled
		first = !r.returned && !r.cancelled
		if first {
			r.cancelled = true
		}
	}
	w.runs.mu.Unlock()
	if !ok {
		return fmt.Errorf("cancelling job %q: %w", id, ErrNotRunning)
	}
	if late {
		select {
		case <-r.decided:
			return fmt.Errorf("cancelling job %q: %w: it settles as %s", id, ErrSettling, r.settle)
		case <-ctx.Done():
			return fmt.Errorf("cancelling job %q: %w: %w", id, ErrSettling, ctx.Err())
		}
	}
	if first {
		r.cancel(ErrCancelled)
	}
	select {
	case <-r.done:
	case <-ctx.Done():
		return fmt.Errorf("cancelling job %q: waiting for its settle: %w", id, ctx.Err())
	}
	if r.err != nil {
		return fmt.Errorf("cancelling job %q: its settle failed: %w", id, r.err)
	}
	return nil
}
