package pebble_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/internal/rig"
	pebblebackend "github.com/wasmjobs/wasmjobs/backend/pebble"
)

// TestJobsSurviveReopen: jobs ready, delayed, deferred, handed out and dead-lettered
// are all there after a reopen, in order, and the delays still hold.
func TestJobsSurviveReopen(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		cfg := onMem(pebblebackend.Config{})
		b := open(t, cfg)
		q := backend.QueueConfig{Name: "jobs", Prefetch: 4, PriorityLevels: 2}
		rig.Must(t, b.Declare(ctx, q))
		var want []string
		for i, p := range []uint8{0, 2, 1, 2, 0} {
			env := backend.NewEnvelope("jobs", []byte{'a' + byte(i)})
			env.Priority = p
			rig.Must(t, b.Publish(ctx, env, 0))
		}
		want = []string{"b", "d", "c", "a", "e"}
		start := time.Now()
		rig.Must(t, b.Publish(ctx, backend.NewEnvelope("jobs", []byte("late")), time.Hour))
		deferred := backend.NewEnvelope("jobs", []byte("deferred"))
		deferred.Priority = 2
		rig.Must(t, b.Defer(ctx, deferred, 2*time.Hour))
		// One handed out and not settled, one dead letter.
		s, err := b.Consume(ctx, q)
		rig.Must(t, err)
		d := <-s.Deliveries()
		env, _ := d.Envelope()
		if string(env.Payload) != "b" {
			t.Fatalf("first delivery %q, want b", env.Payload)
		}
		d = <-s.Deliveries()
		rig.Must(t, d.DeadLetter(ctx, "poison"))
		rig.Close(t, b)

		b = open(t, cfg)
		defer rig.Close(t, b)
		rec := b.Recovered()
		if rec.Ready != 4 || rec.Delayed != 2 || rec.Dead != 1 || rec.Queues != 1 {
			t.Fatalf("Recovered = %+v, want 4 ready, 2 delayed, 1 dead, 1 queue", rec)
		}
		rig.Must(t, b.Declare(ctx, q))
		want = []string{"b", "c", "a", "e"} // d was dead-lettered
		s, err = b.Consume(ctx, backend.QueueConfig{Name: "jobs", Prefetch: 1})
		rig.Must(t, err)
		for _, w := range want {
			d := <-s.Deliveries()
			env, err := d.Envelope()
			rig.Must(t, err)
			if string(env.Payload) != w {
				t.Fatalf("after reopen got %q, want %q", env.Payload, w)
			}
			rig.Must(t, d.Ack(ctx))
		}
		// The delays hold across the restart: never early.
		for _, w := range []string{"late", "deferred"} {
			d := <-s.Deliveries()
			env, _ := d.Envelope()
			waited := time.Since(start)
			if string(env.Payload) != w {
				t.Fatalf("got %q, want %q", env.Payload, w)
			}
			if (w == "late" && waited < time.Hour) || (w == "deferred" && waited < 2*time.Hour) {
				t.Fatalf("%s came after %v: early", w, waited)
			}
			rig.Must(t, d.Ack(ctx))
		}
		dead, err := b.DeadLetters(ctx, "jobs", 0)
		rig.Must(t, err)
		if len(dead) != 1 || dead[0].Reason != "poison" || string(dead[0].Envelope.Payload) != "d" {
			t.Fatalf("dead letters after reopen = %+v", dead)
		}
		s.Drop()
	})
}

// TestScheduleTicksSurviveReopen: a tick's job and the tick are written together and
// both are there after a reopen; a tick whose job the store still holds records the
// tick without a second job.
func TestScheduleTicksSurviveReopen(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		cfg := onMem(pebblebackend.Config{})
		b := open(t, cfg)
		rig.Must(t, b.Declare(ctx, backend.QueueConfig{Name: "reports"}))
		tick := time.Now().Add(time.Minute)
		env := backend.Envelope{ID: backend.ScheduleID("reports/daily", tick), Queue: "reports", Payload: []byte("p"), Attempt: 1}
		rig.Must(t, b.PublishTick(ctx, "reports/daily", tick, env))
		rig.Must(t, b.PublishTick(ctx, "reports/daily", tick.Add(time.Hour), env)) // same id: held
		rig.Close(t, b)

		b = open(t, cfg)
		defer rig.Close(t, b)
		ticks, err := b.ScheduleTicks(ctx)
		rig.Must(t, err)
		if got := ticks["reports/daily"]; len(ticks) != 1 || !got.Equal(tick.Add(time.Hour)) {
			t.Errorf("ticks after reopen = %v, want reports/daily at %v", ticks, tick.Add(time.Hour))
		}
		st, err := b.QueueStats(ctx, "reports")
		rig.Must(t, err)
		if st.Pending != 1 {
			t.Errorf("%d jobs pending, want the one tick's job", st.Pending)
		}
		rec, err := b.JobRecord(ctx, env.ID)
		rig.Must(t, err)
		if rec.State != backend.JobPending {
			t.Errorf("record of the tick's job: %+v", rec)
		}
		if err := b.PublishTick(ctx, "reports/daily", tick, backend.Envelope{ID: "x", Queue: "nope"}); err == nil {
			t.Error("PublishTick to an undeclared queue succeeded")
		}
	})
}

// TestUniqueKeysSurviveReopenAndArePruned: a key held by a waiting job and one held
// after its job finished both hold across a restart; once their hold has passed, the
// pruner deletes them from the store.
func TestUniqueKeysSurviveReopenAndArePruned(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		cfg := onMem(pebblebackend.Config{Records: pebblebackend.RecordConfig{PruneInterval: time.Minute}})
		b := open(t, cfg)
		q := backend.QueueConfig{Name: "jobs", Prefetch: 4}
		rig.Must(t, b.Declare(ctx, q))
		pub := func(b *pebblebackend.Backend, key string, holdFor time.Duration) backend.UniqueResult {
			t.Helper()
			res, err := b.PublishUnique(ctx, []backend.UniquePublication{{
				Publication: backend.Publication{Envelope: backend.NewEnvelope("jobs", []byte(key))}, Key: key, For: holdFor}})
			rig.Must(t, err)
			return res[0]
		}
		done := pub(b, "done", time.Hour)
		s, err := b.Consume(ctx, q)
		rig.Must(t, err)
		d := <-s.Deliveries()
		rig.Must(t, d.Ack(ctx))
		s.Drop()
		waiting := pub(b, "waiting", 10*time.Minute)
		rig.Close(t, b)

		b = open(t, cfg)
		for _, c := range []struct {
			key string
			id  string
		}{{"done", done.ID}, {"waiting", waiting.ID}} {
			if r := pub(b, c.key, time.Hour); !r.Duplicate || r.ID != c.id {
				t.Fatalf("key %q after reopen: %+v, want a duplicate of %s", c.key, r, c.id)
			}
		}
		if n := b.UniqueKeys(); n != 2 {
			t.Fatalf("%d unique keys after reopen, want 2", n)
		}
		// Past the finished job's hour (and a prune round), its key is gone; the
		// waiting job's key holds while the job waits, however long.
		time.Sleep(time.Hour + 2*time.Minute)
		synctest.Wait()
		if n := b.UniqueKeys(); n != 1 {
			t.Fatalf("%d unique keys after the hold passed, want 1 (the waiting job's)", n)
		}
		if r := pub(b, "waiting", time.Hour); !r.Duplicate {
			t.Fatalf("key of the waiting job: %+v, want a duplicate", r)
		}
		if r := pub(b, "done", time.Hour); r.Duplicate {
			t.Fatalf("key of the job finished over an hour ago: %+v, want a new job", r)
		}
		rig.Close(t, b)
		b = open(t, cfg) // the pruned key stays pruned; the new one is there
		defer rig.Close(t, b)
		if n := b.UniqueKeys(); n != 2 {
			t.Fatalf("%d unique keys after the second reopen, want 2", n)
		}
	})
}

// BenchmarkPebblePublishUnique measures synced publishes of jobs from 8 publishers a CPU, each
// with a key of its own ("unique") or none ("plain"): what the key's lock and entry
// cost. One op is one job.
func BenchmarkPebblePublishUnique(b *testing.B) {
	for _, unique := range []bool{false, true} {
		name := "plain"
		if unique {
			name = "unique"
		}
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			be, err := pebblebackend.Open(ctx, pebblebackend.Config{Dir: b.TempDir() + "/data"})
			if err != nil {
				b.Fatal(err)
			}
			defer be.Close(ctx)
			if err := be.Declare(ctx, backend.QueueConfig{Name: "bench"}); err != nil {
				b.Fatal(err)
			}
			var next atomic.Int64
			b.SetParallelism(8)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					env := backend.NewEnvelope("bench", []byte(`{"n":1}`))
					var err error
					if unique {
						_, err = be.PublishUnique(ctx, []backend.UniquePublication{{
							Publication: backend.Publication{Envelope: env}, Key: strconv.FormatInt(next.Add(1), 10), For: time.Hour}})
					} else {
						err = be.Publish(ctx, env, 0)
					}
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
		})
	}
}

// Finished records are pruned oldest first past the count, and past the age; records of
// jobs still held are kept; output and log lines are capped. Records survive a reopen.
func TestRecordRetentionAndCaps(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		cfg := onMem(pebblebackend.Config{Records: pebblebackend.RecordConfig{
			MaxCount: 5, MaxAge: time.Hour, PruneInterval: time.Minute, MaxOutput: 4, MaxLogLines: 2, MaxLogLine: 3,
		}})
		b := open(t, cfg)
		q := backend.QueueConfig{Name: "jobs", Prefetch: 1}
		rig.Must(t, b.Declare(ctx, q))
		held := backend.NewEnvelope("jobs", []byte("held"))
		rig.Must(t, b.Publish(ctx, held, 10*time.Hour))
		var ids []string
		s, err := b.Consume(ctx, q)
		rig.Must(t, err)
		for i := range 10 {
			env := backend.NewEnvelope("jobs", []byte{byte('a' + i)})
			rig.Must(t, b.Publish(ctx, env, 0))
			ids = append(ids, env.ID)
			d := <-s.Deliveries()
			rig.Must(t, d.(backend.AtomicDelivery).AckWith(ctx, nil, &backend.JobRecord{
				Output: []byte("abcdefgh"), Logs: []string{"one", "two", "three"},
			}))
			time.Sleep(time.Second) // distinct finish times
		}
		s.Drop()
		rec, err := b.JobRecord(ctx, ids[9])
		rig.Must(t, err)
		if string(rec.Output) != "abcd" || !rec.OutputTruncated || len(rec.Logs) != 2 || rec.Logs[1] != "two" || !rec.LogsTruncated {
			t.Fatalf("capped record = %+v, want output abcd and the first 2 log lines, both marked truncated", rec)
		}
		rig.Close(t, b)
		b = open(t, cfg) // the count of finished records is rebuilt at Open
		defer rig.Close(t, b)
		time.Sleep(2 * time.Minute)
		for i, id := range ids {
			_, err := b.JobRecord(ctx, id)
			if kept := err == nil; kept != (i >= 5) {
				t.Errorf("record %d of 10 kept = %v (%v), want only the newest 5 kept", i, kept, err)
			}
		}
		time.Sleep(2 * time.Hour)
		for _, id := range ids[5:] {
			if _, err := b.JobRecord(ctx, id); !errors.Is(err, backend.ErrNotFound) {
				t.Errorf("record %s older than MaxAge: %v, want ErrNotFound", id, err)
			}
		}
		if rec, err := b.JobRecord(ctx, held.ID); err != nil || rec.State != backend.JobDelayed {
			t.Errorf("record of a job still held = %+v, %v; want it kept, delayed", rec, err)
		}
	})
}

// jobStream opens a backend on cfg, starts a stream of the queue "jobs" (prefetch 1,
// dropped when the test ends) and publishes env to it; the caller closes the backend.
func jobStream(t *testing.T, cfg pebblebackend.Config, env backend.Envelope) (*pebblebackend.Backend, backend.Stream) {
	t.Helper()
	b := open(t, cfg)
	s := rig.Consume(t, b, backend.QueueConfig{Name: "jobs", Prefetch: 1})
	rig.Must(t, b.Publish(context.Background(), env, 0))
	return b, s
}

// recordAfterReopen drops s, closes b, opens its directory again (closed when the test
// ends) and returns the record of the job id as the reopened store reads it.
func recordAfterReopen(t *testing.T, cfg pebblebackend.Config, b *pebblebackend.Backend, s backend.Stream, id string) backend.JobRecord {
	t.Helper()
	s.Drop()
	rig.Close(t, b)
	b = open(t, cfg)
	t.Cleanup(func() { rig.Close(t, b) })
	rec, err := b.JobRecord(context.Background(), id)
	rig.Must(t, err)
	return rec
}

// Each settle appends its attempt (number, state, reason, module version and role,
// times) to the job's record in the settle's own write; the attempts survive a reopen,
// and a record keeps only the latest backend.MaxRecordAttempts.
func TestRecordKeepsEachAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := onMem(pebblebackend.Config{})
	env := backend.NewEnvelope("jobs", []byte("flaky"))
	env.MaxAttempts = 40
	b, s := jobStream(t, cfg, env)
	const runs = backend.MaxRecordAttempts + 5
	version := func(n int) string { return fmt.Sprintf("v%d", n) }
	for n := 1; n <= runs; n++ {
		d := (<-s.Deliveries()).(backend.AtomicDelivery)
		got, err := d.Envelope()
		rig.Must(t, err)
		role := "current"
		if n%2 == 0 {
			role = "canary"
		}
		run := &backend.JobRecord{Module: "mod", ModuleVersion: version(n), ModuleRole: role,
			StartedAt: time.Unix(int64(n), 0), FinishedAt: time.Unix(int64(n), 5)}
		if n == runs {
			rig.Must(t, d.AckWith(ctx, nil, run))
			break
		}
		next := got
		next.Attempt, next.Reason = got.Attempt+1, fmt.Sprintf("failure %d", n)
		rig.Must(t, d.RetryWith(ctx, next, 0, run))
	}
	rec := recordAfterReopen(t, cfg, b, s, env.ID)
	if len(rec.Attempts) != backend.MaxRecordAttempts {
		t.Fatalf("record keeps %d attempts after %d runs and a reopen, want the latest %d: %+v", len(rec.Attempts), runs, backend.MaxRecordAttempts, rec.Attempts)
	}
	first := runs - backend.MaxRecordAttempts + 1
	for i, a := range rec.Attempts {
		n := first + i
		wantState, wantReason, wantRole := backend.JobRetrying, fmt.Sprintf("failure %d", n), "current"
		if n == runs {
			wantState, wantReason = backend.JobSucceeded, ""
		}
		if n%2 == 0 {
			wantRole = "canary"
		}
		if a.Attempt != n || a.State != wantState || a.Reason != wantReason || a.Module != "mod" || a.Version != version(n) ||
			a.Role != wantRole || !a.StartedAt.Equal(time.Unix(int64(n), 0)) || !a.FinishedAt.Equal(time.Unix(int64(n), 5)) {
			t.Errorf("attempt %d = %+v, want number %d, %s, reason %q, mod %s as %s and its times", i, a, n, wantState, wantReason, version(n), wantRole)
		}
	}
	if rec.ModuleRole != "canary" || rec.ModuleVersion != version(runs) {
		t.Errorf("record's last run: version %s role %q, want %s canary", rec.ModuleVersion, rec.ModuleRole, version(runs))
	}
}

// A replayed dead letter's record starts again (pending, attempt 1) and keeps the runs
// before it: the job's page lists the first run and the replay's.
func TestReplayKeepsTheEarlierAttempts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := backend.NewEnvelope("jobs", []byte("bad"))
	b, s := jobStream(t, onMem(pebblebackend.Config{}), env)
	defer rig.Close(t, b)
	for run := 1; run <= 2; run++ {
		d := (<-s.Deliveries()).(backend.AtomicDelivery)
		rig.Must(t, d.DeadLetterWith(ctx, fmt.Sprintf("bad input %d", run), &backend.JobRecord{Module: "mod", ModuleVersion: fmt.Sprintf("v%d", run)}))
		if run == 1 {
			rig.Must(t, b.ReplayDeadLetter(ctx, "jobs", env.ID))
		}
	}
	rec, err := b.JobRecord(ctx, env.ID)
	rig.Must(t, err)
	if len(rec.Attempts) != 2 || rec.Attempts[0].Version != "v1" || rec.Attempts[1].Version != "v2" {
		t.Fatalf("after a dead letter, its replay and a second dead letter the record keeps %+v, want the runs on v1 and v2", rec.Attempts)
	}
}

// Each settle keeps its run's calls and trace id with its attempt, the first MaxRecordCalls and a
// count of the rest; they survive a reopen, and the next settle keeps them.
func TestRecordKeepsEachAttemptsCalls(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := onMem(pebblebackend.Config{})
	env := backend.NewEnvelope("jobs", []byte("calls"))
	b, s := jobStream(t, cfg, env)
	many := make([]backend.CallRecord, backend.MaxRecordCalls+10)
	for i := range many {
		many[i] = backend.CallRecord{Method: "GET", Target: "https://api.test:443", Path: fmt.Sprintf("/%d", i), Status: 503, Duration: time.Millisecond}
	}
	ok := backend.CallRecord{Method: "POST", Target: "http://127.0.0.1:8080", Path: "/hook", Status: 200, Duration: 3 * time.Second, Bytes: 12}
	failed := backend.CallRecord{Method: "GET", Target: "http://10.0.0.1:80", Path: "/", Error: "denied", Duration: time.Microsecond}

	d := (<-s.Deliveries()).(backend.AtomicDelivery)
	got, err := d.Envelope()
	rig.Must(t, err)
	next := got
	next.Attempt, next.Reason = got.Attempt+1, "503"
	rig.Must(t, d.RetryWith(ctx, next, 0, &backend.JobRecord{Module: "mod", Calls: many, CallsDropped: 2, TraceID: "trace-1"}))
	d = (<-s.Deliveries()).(backend.AtomicDelivery)
	rig.Must(t, d.AckWith(ctx, nil, &backend.JobRecord{Module: "mod", Calls: []backend.CallRecord{ok, failed}, TraceID: "trace-2"}))
	rec := recordAfterReopen(t, cfg, b, s, env.ID)
	if len(rec.Attempts) != 2 || rec.Calls != nil {
		t.Fatalf("record: %d attempts, calls %v; want 2 attempts and the calls with them only", len(rec.Attempts), rec.Calls)
	}
	first, second := rec.Attempts[0], rec.Attempts[1]
	if len(first.Calls) != backend.MaxRecordCalls || first.CallsDropped != 12 || first.Calls[49] != many[49] {
		t.Errorf("first attempt: %d calls, %d dropped, the last %+v; want the first %d, 12 dropped", len(first.Calls), first.CallsDropped, first.Calls[len(first.Calls)-1], backend.MaxRecordCalls)
	}
	if len(second.Calls) != 2 || second.Calls[0] != ok || second.Calls[1] != failed || second.CallsDropped != 0 {
		t.Errorf("second attempt's calls: %+v (%d dropped), want %+v and %+v", second.Calls, second.CallsDropped, ok, failed)
	}
	// Each attempt keeps its run's trace id too (record encoding v4).
	if first.TraceID != "trace-1" || second.TraceID != "trace-2" {
		t.Errorf("the attempts' trace ids %q, %q; want trace-1, trace-2", first.TraceID, second.TraceID)
	}
}

// A job retried at once and still ready when the store is reopened keeps its first
// attempt: the settle after the reopen reads the record back and appends to it.
func TestRecordKeepsTheAttemptsAcrossAReopen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := onMem(pebblebackend.Config{})
	env := backend.NewEnvelope("jobs", []byte("x"))
	b, s := jobStream(t, cfg, env)
	d := (<-s.Deliveries()).(backend.AtomicDelivery)
	next, err := d.Envelope()
	rig.Must(t, err)
	next.Attempt, next.Reason = 2, "try again"
	rig.Must(t, d.RetryWith(ctx, next, 0, &backend.JobRecord{Module: "mod", ModuleVersion: "v1"}))
	s.Drop()
	rig.Close(t, b)
	b = open(t, cfg)
	defer rig.Close(t, b)
	s = rig.Consume(t, b, backend.QueueConfig{Name: "jobs", Prefetch: 1})
	d = (<-s.Deliveries()).(backend.AtomicDelivery)
	rig.Must(t, d.AckWith(ctx, nil, &backend.JobRecord{Module: "mod", ModuleVersion: "v2"}))
	s.Drop()
	rec, err := b.JobRecord(ctx, env.ID)
	rig.Must(t, err)
	if len(rec.Attempts) != 2 || rec.Attempts[0].Version != "v1" || rec.Attempts[1].Version != "v2" {
		t.Fatalf("the record keeps %+v, want the retried run on v1 and the ack on v2", rec.Attempts)
	}
}

// A job that waited for a child and is resumed keeps the attempt of its run before the
// wait: its settle after the resume reads the record back and appends to it.
func TestRecordKeepsTheAttemptBeforeAWait(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := backend.NewEnvelope("jobs", []byte("parent"))
	b, s := jobStream(t, onMem(pebblebackend.Config{}), env)
	defer rig.Close(t, b)
	d := (<-s.Deliveries()).(backend.WaitingDelivery)
	child := backend.NewEnvelope("jobs", []byte("child"))
	rig.Must(t, d.WaitWith(ctx, []backend.Publication{{Envelope: child}}, backend.Await{IDs: []string{child.ID}}, &backend.JobRecord{Module: "mod", ModuleVersion: "v1"}))
	c := (<-s.Deliveries()).(backend.AtomicDelivery)
	rig.Must(t, c.AckWith(ctx, nil, nil))
	resumed := (<-s.Deliveries()).(backend.AtomicDelivery)
	got, err := resumed.Envelope()
	rig.Must(t, err)
	if got.ID != env.ID || got.Round != 1 {
		t.Fatalf("after the child's ack, delivered %s at round %d; want the parent, resumed", got.ID, got.Round)
	}
	rig.Must(t, resumed.AckWith(ctx, nil, &backend.JobRecord{Module: "mod", ModuleVersion: "v2"}))
	s.Drop()
	rec, err := b.JobRecord(ctx, env.ID)
	rig.Must(t, err)
	if len(rec.Attempts) != 2 || rec.Attempts[0].Version != "v1" || rec.Attempts[1].Version != "v2" {
		t.Fatalf("the record keeps %+v, want the run that waited (v1) and the resumed one (v2)", rec.Attempts)
	}
}
