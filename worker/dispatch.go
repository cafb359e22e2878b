package worker

import (
	"math"
	"reflect"
	"time"

	"golang.org/x/time/rate"

	"github.com/wasmjobs/wasmjobs/backend"
)

// task is a delivery on its way to a runner.
type task struct {
	qs *queueState
	d  backend.Delivery
}

// runner runs the tasks the dispatcher hands it until the dispatcher ends. Long-lived
// runners, one per slot, keep their grown stacks: a goroutine per job costs more.
func (w *Worker) runner() {
	for t := range w.tasks {
		w.process(t.qs, t.d)
	}
}

// signal wakes the dispatcher to look at the queues again.
func (w *Worker) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// dispatch is the capacity loop: a slot first, then a delivery.
func (w *Worker) dispatch() {
	defer close(w.dispatchDone)
	defer close(w.tasks)
	var d dispatcher
	for {
		select {
		case w.slots <- struct{}{}:
		case <-w.stop:
			return
		}
		qs, del, ok := d.next(w)
		if !ok {
			<-w.slots
			return
		}
		w.mu.Lock()
		if qs.removed {
			// Unregister counts on no job of the queue starting once it is removed: leave
			// the delivery unsettled; dropping the stream gives it back to the backend.
			w.mu.Unlock()
			<-w.slots
			continue
		}
		qs.running.Add(1)
		w.jobs.Add()
		w.mu.Unlock()
		w.tasks <- task{qs, del}
	}
}

// dispatcher picks the next delivery among the eligible queues: round robin over those
// with a delivery waiting, blocking on all of them when none has.
type dispatcher struct {
	eligible []*queueState
	streams  []backend.Stream
	cases    []reflect.SelectCase
	rr       int
}

// next returns the next delivery and its queue, or false when the worker stops.
func (d *dispatcher) next(w *Worker) (*queueState, backend.Delivery, bool) {
	for {
		notReady, rateWait := d.collect(w)
		n := len(d.eligible)
		for i := range n {
			k := (d.rr + i) % n
			select {
			case del, ok := <-d.streams[k].Deliveries():
				if !ok {
					w.streamEnded(d.eligible[k], d.streams[k])
					continue
				}
				d.rr = k + 1
				return d.take(d.eligible[k], del)
			default:
			}
		}
		// Nothing waiting: block on every eligible stream, the stop signal, a change of
		// queues or capacity, a poll for handlers that are not ready, and the moment a
		// rate-limited queue may take its next job.
		d.cases = append(d.cases[:0],
			reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(w.stop)},
			reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(w.wake)})
		if notReady {
			rateWait = min(rateWait, w.cfg.ReadyPoll)
		}
		if rateWait < noWait {
			d.cases = append(d.cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(time.After(rateWait))})
		}
		base := len(d.cases)
		for _, s := range d.streams {
			d.cases = append(d.cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(s.Deliveries())})
		}
		chosen, v, ok := reflect.Select(d.cases)
		switch {
		case chosen == 0:
			return nil, nil, false
		case chosen < base:
			continue
		case !ok:
			w.streamEnded(d.eligible[chosen-base], d.streams[chosen-base])
			continue
		default:
			d.rr = chosen - base + 1
			return d.take(d.eligible[chosen-base], v.Interface().(backend.Delivery))
		}
	}
}

// noWait is collect's answer when no queue waits for its rate limit.
const noWait = time.Duration(1<<63 - 1)

// take spends the rate-limited queue's token for the delivery it just took. collect
// offered the queue's stream only once a token was there, and only the dispatcher
// spends them, so the token is still there.
func (d *dispatcher) take(qs *queueState, del backend.Delivery) (*queueState, backend.Delivery, bool) {
	// The limiter is read without Worker.mu: only the dispatcher's goroutine uses it.
	if lim := qs.limiter; lim != nil && qs.policy.Load().spec.Rate > 0 {
		lim.ReserveN(time.Now(), 1)
	}
	return qs, del, true
}

// collect gathers the queues that may take a job now; it reports whether any was
// skipped only because its handler was not ready, and how long until the first queue
// skipped for its rate limit may take one (noWait when none was).
func (d *dispatcher) collect(w *Worker) (notReady bool, rateWait time.Duration) {
	d.eligible, d.streams = d.eligible[:0], d.streams[:0]
	rateWait = noWait
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, qs := range w.queues {
		pol := qs.policy.Load()
		if qs.removed || qs.stream == nil || (pol.limit > 0 && qs.running.Load() >= pol.limit) {
			continue
		}
		if r, ok := pol.spec.Handler.(Readier); ok && !r.Ready() {
			notReady = true
			continue
		}
		// Capacity first (the slot is held, the queue has room), then the rate: a
		// queue is offered only when it may take a job now, so that no job is claimed
		// to wait for its turn.
		if wait := qs.untilToken(pol, now); wait > 0 {
			rateWait = min(rateWait, wait)
			continue
		}
		d.eligible = append(d.eligible, qs)
		d.streams = append(d.streams, qs.stream)
	}
	return notReady, rateWait
}

// untilToken returns how long until the queue's limiter has a token to spend, 0 when
// it has one now or the queue has no rate. It makes the limiter, or brings its rate
// and burst up to a new registration's.
func (qs *queueState) untilToken(pol *policy, now time.Time) time.Duration {
	r, burst := pol.spec.Rate, pol.spec.Burst
	if r <= 0 {
		return 0
	}
	switch {
	case qs.limiter == nil:
		qs.limiter = rate.NewLimiter(r, burst)
	case qs.limiter.Limit() != r || qs.limiter.Burst() != burst:
		qs.limiter.SetLimitAt(now, r)
		qs.limiter.SetBurstAt(now, burst)
	}
	missing := 1 - qs.limiter.TokensAt(now)
	if missing <= 0 {
		return 0
	}
	// Rounded up, and at least 1ns: a wait that ends a hair early would only find
	// the token still missing and wait again. Computed in float and capped: a tiny
	// rate's wait overflows a Duration, whose conversion would then be anything (1ns
	// on amd64, a spinning dispatcher). A capped wait that ends early waits again.
	ns := math.Ceil(missing / float64(r) * float64(time.Second))
	if ns >= float64(maxRateWait) {
		return maxRateWait
	}
	return max(time.Duration(ns), 1)
}

// maxRateWait caps the dispatcher's wait for a rate-limited queue's next token.
const maxRateWait = time.Hour
