package backendtest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
)

// publishUnique publishes one unique job and returns what became of it.
func (h *harness) publishUnique(t *testing.T, up backend.UniquePublisher, env backend.Envelope, delay time.Duration, key string, holdFor time.Duration) backend.UniqueResult {
	t.Helper()
	res, err := up.PublishUnique(h.ctx(), []backend.UniquePublication{{Publication: backend.Publication{Envelope: env, Delay: delay}, Key: key, For: holdFor}})
	if err != nil || len(res) != 1 {
		t.Fatalf("PublishUnique(%s, key %q): %v, %d results", env.ID, key, err, len(res))
	}
	return res[0]
}

// testUniqueStates publishes a job with a key, brings it into a state, then publishes
// another with the same key: a duplicate of the first while the job lives, and after
// it finished until its hold ends; a new job after that.
func testUniqueStates(t *testing.T, h *harness) {
	up := implements[backend.UniquePublisher](t, h)
	const long, short = time.Hour, 30 * time.Millisecond
	for _, tc := range []struct {
		name    string
		delay   time.Duration
		holdFor time.Duration
		// settle brings the first job's delivery into its state; nil leaves it
		// waiting, or, with run, running.
		run    bool
		settle func(d backend.Delivery, env backend.Envelope) error
		wait   time.Duration // after the settle, before the second publish
		dup    bool
	}{
		{name: "pending", holdFor: long, dup: true},
		{name: "pending, no hold after", holdFor: 0, dup: true},
		{name: "delayed", delay: time.Hour, holdFor: long, dup: true},
		{name: "running", run: true, holdFor: long, dup: true},
		{name: "retrying", holdFor: 0, dup: true, settle: func(d backend.Delivery, env backend.Envelope) error {
			env.Attempt++
			return d.Retry(h.ctx(), env, time.Hour)
		}},
		{name: "deferred", holdFor: 0, dup: true, settle: func(d backend.Delivery, env backend.Envelope) error {
			return d.Defer(h.ctx(), env, time.Hour)
		}},
		{name: "finished within unique_for", holdFor: long, dup: true, settle: ack},
		{name: "finished after unique_for", holdFor: short, wait: 2 * short, dup: false, settle: ack},
		{name: "finished, no hold after", holdFor: 0, dup: false, settle: ack},
		{name: "dead within unique_for", holdFor: long, dup: true, settle: dead},
		{name: "dead after unique_for", holdFor: short, wait: 2 * short, dup: false, settle: dead},
	} {
		// No t.Run: the suite may run in a synctest bubble, which allows none.
		func() {
			fatalf := func(format string, args ...any) { t.Helper(); t.Fatalf(tc.name+": "+format, args...) }
			q := h.declare(t, 4, 0)
			first := job(q, "first")
			if r := h.publishUnique(t, up, first, tc.delay, "k", tc.holdFor); r.Duplicate || r.ID != first.ID {
				fatalf("first publish: %+v, want a new job %s", r, first.ID)
			}
			if tc.run || tc.settle != nil {
				s := h.consume(t, q)
				d, env := h.receive(t, s)
				if tc.settle != nil {
					mustSettle(t, "settle", tc.settle(d, env))
				}
			}
			time.Sleep(tc.wait)
			second := job(q, "second")
			r := h.publishUnique(t, up, second, 0, "k", tc.holdFor)
			switch {
			case tc.dup && (!r.Duplicate || r.ID != first.ID):
				fatalf("second publish: %+v, want a duplicate of %s", r, first.ID)
			case !tc.dup && (r.Duplicate || r.ID != second.ID):
				fatalf("second publish: %+v, want a new job %s", r, second.ID)
			}
			// Another key and another queue are not held by the first.
			if r := h.publishUnique(t, up, job(q, "other key"), 0, "k2", tc.holdFor); r.Duplicate {
				fatalf("a publish with another key: %+v, a duplicate", r)
			}
			q2 := h.declare(t, 4, 0)
			if r := h.publishUnique(t, up, job(q2, "other queue"), 0, "k", tc.holdFor); r.Duplicate {
				fatalf("a publish of the key to another queue: %+v, a duplicate", r)
			}
		}()
	}
}

func ack(d backend.Delivery, _ backend.Envelope) error { return d.Ack(context.Background()) }

func dead(d backend.Delivery, _ backend.Envelope) error {
	return d.DeadLetter(context.Background(), "test")
}

// testUniqueBatch: a key repeated within one call is a duplicate of its first use;
// jobs without a key are published as they are.
func testUniqueBatch(t *testing.T, h *harness) {
	up := implements[backend.UniquePublisher](t, h)
	q := h.declare(t, 4, 0)
	a, b, c, plain := job(q, "a"), job(q, "b"), job(q, "c"), job(q, "plain")
	pub := func(env backend.Envelope, key string) backend.UniquePublication {
		return backend.UniquePublication{Publication: backend.Publication{Envelope: env}, Key: key, For: time.Hour}
	}
	res, err := up.PublishUnique(h.ctx(), []backend.UniquePublication{pub(a, "x"), pub(b, "x"), pub(plain, ""), pub(c, "y")})
	if err != nil {
		t.Fatal(err)
	}
	want := []backend.UniqueResult{{ID: a.ID}, {ID: a.ID, Duplicate: true}, {ID: plain.ID}, {ID: c.ID}}
	for i := range want {
		if i >= len(res) || res[i] != want[i] {
			t.Fatalf("results %+v, want %+v", res, want)
		}
	}
	if st := h.stats(t, q); st.Pending != 3 {
		t.Fatalf("%d jobs pending, want 3 (a, plain, c)", st.Pending)
	}
}

// testUniqueConcurrent publishes one key from 1,000 goroutines at once: exactly one
// job is queued, and the 999 others are duplicates naming it.
func testUniqueConcurrent(t *testing.T, h *harness) {
	up := implements[backend.UniquePublisher](t, h)
	q := h.declare(t, 4, 0)
	const n = 1000
	results := make([]backend.UniqueResult, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			res, err := up.PublishUnique(h.ctx(), []backend.UniquePublication{{
				Publication: backend.Publication{Envelope: job(q, "same")}, Key: "one", For: time.Hour}})
			if err == nil && len(res) == 1 {
				results[i] = res[0]
			}
			errs[i] = err
		})
	}
	close(start)
	wg.Wait()
	var queued []string
	dups := 0
	for i, r := range results {
		if errs[i] != nil {
			t.Fatalf("publish %d: %v", i, errs[i])
		}
		if r.Duplicate {
			dups++
		} else {
			queued = append(queued, r.ID)
		}
	}
	if len(queued) != 1 || dups != n-1 {
		t.Fatalf("%d jobs queued, %d duplicates: want 1 and %d", len(queued), dups, n-1)
	}
	for i, r := range results {
		if r.Duplicate && r.ID != queued[0] {
			t.Fatalf("duplicate %d names job %s, not the queued %s", i, r.ID, queued[0])
		}
	}
	if st := h.stats(t, q); st.Pending != 1 {
		t.Fatalf("%d jobs pending, want 1", st.Pending)
	}
}

// testUniqueControl: cancelling a unique job ends its key's hold as a finish does (the
// hold runs unique_for from the cancel), and deleting a waiting unique job frees its key.
func testUniqueControl(t *testing.T, h *harness) {
	up := implements[backend.UniquePublisher](t, h)
	c := implements[backend.JobController](t, h)
	for _, tc := range []struct {
		name    string
		delay   time.Duration
		holdFor time.Duration
		del     bool
		dup     bool
	}{
		{name: "cancel pending, no hold after", holdFor: 0},
		{name: "cancel delayed, no hold after", delay: time.Hour, holdFor: 0},
		{name: "cancel pending within unique_for", holdFor: time.Hour, dup: true},
		{name: "delete pending", holdFor: time.Hour, del: true},
		{name: "delete delayed", delay: time.Hour, holdFor: time.Hour, del: true},
	} {
		func() {
			fatalf := func(format string, args ...any) { t.Helper(); t.Fatalf(tc.name+": "+format, args...) }
			q := h.declare(t, 4, 0)
			first := job(q, "first")
			if r := h.publishUnique(t, up, first, tc.delay, "k", tc.holdFor); r.Duplicate {
				fatalf("first publish: %+v, want a new job", r)
			}
			op, opName := c.CancelJob, "CancelJob"
			if tc.del {
				op, opName = c.DeleteJob, "DeleteJob"
			}
			if err := op(h.ctx(), first.ID); err != nil {
				fatalf("%s(%s): %v", opName, first.ID, err)
			}
			second := job(q, "second")
			r := h.publishUnique(t, up, second, 0, "k", tc.holdFor)
			switch {
			case tc.dup && (!r.Duplicate || r.ID != first.ID):
				fatalf("publish after %s: %+v, want a duplicate of %s", opName, r, first.ID)
			case !tc.dup && (r.Duplicate || r.ID != second.ID):
				fatalf("publish after %s: %+v, want a new job %s (the key must not stay held)", opName, r, second.ID)
			}
		}()
	}
}
