package host_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/host"
	"github.com/wasmjobs/wasmjobs/worker"
)

// TestCanaryTimePromotes runs a canary that sees too few jobs to reach canary_jobs: at
// canary_time it is promoted, unless it does worse, in which case it waits for
// canary_min_jobs and is then rolled back. Virtual time.
func TestCanaryTimePromotes(t *testing.T) {
	for _, c := range []struct {
		name, next string
		want       string
	}{
		{"good", "abi/ack", host.VerdictPromoted},
		{"failing", "hostile/trap", host.VerdictRolledBack},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				e := newEngine(t)
				cur := loadSvc(t, e, variant(t, "abi/ack", "v1"), host.Manifest{})
				next := loadSvc(t, e, testdataModule(t, c.next), host.Manifest{})
				h := host.NewHandler(cur, nil)
				ended := make(chan host.Verdict, 1)
				host.StartCanary(h, next, host.Rollout{CanaryPercent: 100, CanaryMinJobs: 5}, func(v host.Verdict) { ended <- v })
				run := func(i int) worker.Result {
					env := backend.NewEnvelope("svc", nil)
					env.ID = fmt.Sprintf("job-%d", i)
					return h.Handle(ctx, &worker.Job{Envelope: env, Attempt: 1, MaxAttempts: 3})
				}
				for i := range 3 {
					if res := run(i); res.Role != host.RoleCanary {
						t.Fatalf("job %d ran as %q, want on the canary", i, res.Role)
					}
				}
				time.Sleep(host.DefaultCanaryTime - time.Second)
				synctest.Wait()
				if host.CanaryOf(h) == nil {
					t.Fatalf("the canary ended before canary_time")
				}
				time.Sleep(time.Second)
				synctest.Wait()
				if c.want == host.VerdictRolledBack {
					// Worse, with 3 jobs of the 5 it needs: still on trial.
					if host.CanaryOf(h) == nil || len(ended) != 0 {
						t.Fatalf("a failing canary with too few jobs ended at canary_time")
					}
					run(3)
					run(4)
				}
				select {
				case v := <-ended:
					if v.Kind != c.want {
						t.Fatalf("verdict %+v, want %s", v, c.want)
					}
				default:
					t.Fatalf("no verdict; canary %+v", host.CanaryOf(h))
				}
				if host.CanaryOf(h) != nil {
					t.Fatal("the canary still runs after its verdict")
				}
				wantV := cur.Version()
				if c.want == host.VerdictPromoted {
					wantV = next.Version()
				}
				if res := run(99); res.Version != wantV || res.Role != "" {
					t.Fatalf("a job after the verdict ran on %s as %q, want %s", res.Version, res.Role, wantV)
				}
				h.Module().Retire()
			})
		})
	}
}

// TestCanaryFailureDelta: the canary's share of failed jobs is compared with the current
// version's over the same window: within canary_max_failure_delta it is promoted at
// canary_jobs, above it it is rolled back once it has canary_min_jobs jobs, though not
// every job failed. The canary times out on the jobs whose payload asks it to sleep
// longer than its timeout.
func TestCanaryFailureDelta(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		fails int // of 10 canary jobs
		want  string
	}{
		{"within the delta", 1, host.VerdictPromoted},
		{"above the delta", 3, host.VerdictRolledBack},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			e := newEngine(t)
			cur := loadSvc(t, e, variant(t, "abi/ack", "v1"), host.Manifest{})
			man := host.Manifest{Limits: host.DefaultLimits()}
			man.Limits.Timeout = 20 * time.Millisecond
			next := loadSvc(t, e, testdataModule(t, "abi/sleep_ms"), man)
			h := host.NewHandler(cur, nil)
			defer func() { h.Module().Retire() }()
			ended := make(chan host.Verdict, 1)
			host.StartCanary(h, next, host.Rollout{CanaryPercent: 50, CanaryMinJobs: 10, CanaryJobs: 10, CanaryTime: time.Hour,
				CanaryMaxFailureDelta: 0.2}, func(v host.Verdict) { ended <- v })
			canaryJobs := 0
			for i := 0; canaryJobs < 10; i++ {
				id := fmt.Sprintf("job-%d", i)
				payload := ""
				onCanary := host.CanaryBucket(id) < 50
				if onCanary && canaryJobs < c.fails {
					payload = "100" // longer than its timeout
				}
				env := backend.NewEnvelope("svc", []byte(payload))
				env.ID = id
				res := h.Handle(ctx, &worker.Job{Envelope: env, Attempt: 1, MaxAttempts: 3})
				if (res.Role == host.RoleCanary) != onCanary {
					t.Fatalf("job %s (bucket %d) ran as %s", id, host.CanaryBucket(id), res.Role)
				}
				if onCanary {
					canaryJobs++
				}
			}
			select {
			case v := <-ended:
				if v.Kind != c.want || v.CanaryJobs != 10 || v.CanaryFailureRate != float64(c.fails)/10 || v.CurrentFailureRate != 0 {
					t.Fatalf("verdict %+v, want %s after 10 canary jobs, %d failed", v, c.want, c.fails)
				}
				if c.want == host.VerdictRolledBack && !strings.Contains(v.Reason, "above the current version's by more than 0.2") {
					t.Fatalf("reason %q", v.Reason)
				}
			default:
				t.Fatalf("no verdict after 10 canary jobs; canary %+v", host.CanaryOf(h))
			}
		})
	}
}

// TestCancelledRunsDoNotCountAgainstACanary: jobs an operator cancelled while they ran
// on the canary (worker.ErrCancelled as their context's cause) are not failures of the
// new version: ten of them reach no verdict, where ten failures would roll it back.
func TestCancelledRunsDoNotCountAgainstACanary(t *testing.T) {
	t.Parallel()
	e := newEngine(t)
	cur := loadSvc(t, e, variant(t, "abi/ack", "v1"), host.Manifest{})
	next := loadSvc(t, e, testdataModule(t, "abi/sleep_ms"), host.Manifest{Limits: host.DefaultLimits()})
	h := host.NewHandler(cur, nil)
	defer func() { h.Module().Retire() }()
	ended := make(chan host.Verdict, 1)
	host.StartCanary(h, next, host.Rollout{CanaryPercent: 50, CanaryMinJobs: 10, CanaryJobs: 10, CanaryTime: time.Hour,
		CanaryMaxFailureDelta: 0.2}, func(v host.Verdict) { ended <- v })
	for i, cancelled := 0, 0; cancelled < 10; i++ {
		id := fmt.Sprintf("job-%d", i)
		if host.CanaryBucket(id) >= 50 {
			continue // on the current version
		}
		env := backend.NewEnvelope("svc", []byte("10000")) // sleeps 10 s unless cancelled
		env.ID = id
		ctx, cancel := context.WithCancelCause(context.Background())
		time.AfterFunc(20*time.Millisecond, func() { cancel(worker.ErrCancelled) })
		res := h.Handle(ctx, &worker.Job{Envelope: env, Attempt: 1, MaxAttempts: 3})
		if res.Role != host.RoleCanary || res.Outcome != worker.Failed {
			t.Fatalf("job %s: %+v, want a failed run on the canary", id, res)
		}
		cancelled++
	}
	select {
	case v := <-ended:
		t.Fatalf("ten cancelled canary runs reached a verdict: %+v", v)
	default:
	}
}

// TestResumedCanaryTimeIsWhatItHadLeft: a canary taken up after a restart keeps its
// start and counts, and is promoted at canary_time counting only the time it ran, not
// the time the host was down. Virtual time.
func TestResumedCanaryTimeIsWhatItHadLeft(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEngine(t)
		cur := loadSvc(t, e, variant(t, "abi/ack", "v1"), host.Manifest{})
		next := loadSvc(t, e, variant(t, "abi/ack", "v2"), host.Manifest{})
		h := host.NewHandler(cur, nil)
		defer func() { h.Module().Retire() }()
		ended := make(chan host.Verdict, 1)
		// Started an hour ago, it ran 50 s of its 60 before the host went down.
		startedAt := time.Now().Add(-time.Hour)
		host.ResumeCanary(h, next, host.Rollout{CanaryPercent: 100}, startedAt, 50*time.Second, 3, func(v host.Verdict) { ended <- v })
		if st := host.CanaryOf(h); st == nil || st.Jobs != 3 || !st.StartedAt.Equal(startedAt) {
			t.Fatalf("resumed canary %+v, want its 3 jobs and its start", st)
		}
		time.Sleep(9 * time.Second)
		synctest.Wait()
		if host.CanaryOf(h) == nil {
			t.Fatal("the resumed canary ended before the 10 s it had left")
		}
		if ran := host.CanaryRan(h); ran != 59*time.Second {
			t.Fatalf("the canary ran %v, want 59s (50 before the restart, 9 after)", ran)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		select {
		case v := <-ended:
			if v.Kind != host.VerdictPromoted || v.CanaryJobs != 3 {
				t.Fatalf("verdict %+v, want promoted with the 3 jobs counted before the restart", v)
			}
		default:
			t.Fatalf("no verdict at canary_time; canary %+v", host.CanaryOf(h))
		}
	})
}

// TestResumedCanaryPastItsTimeEndsAtOnce: a trial taken up after a restart that had run
// its canary_time already is promoted at once, every time: its timer fires at once, and
// must find the canary in place (else the canary stays shown, takes no jobs and is
// never judged). Real time, many rounds: the timer's goroutine races the start.
func TestResumedCanaryPastItsTimeEndsAtOnce(t *testing.T) {
	t.Parallel()
	const rounds = 300
	e := newEngine(t)
	wasm := variant(t, "abi/ack", "v1")
	load := func() *host.Module { return loadSvc(t, e, wasm, host.Manifest{}) }
	cur := load()
	defer func() { cur.Retire() }()
	startedAt := time.Now().Add(-time.Hour)
	for i := range rounds {
		next := load()
		h := host.NewHandler(cur, nil)
		ended := make(chan host.Verdict, 1)
		host.ResumeCanary(h, next, host.Rollout{CanaryPercent: 100, CanaryTime: time.Minute}, startedAt, 2*time.Minute, 0,
			func(v host.Verdict) { ended <- v })
		select {
		case v := <-ended:
			if v.Kind != host.VerdictPromoted {
				t.Fatalf("round %d: verdict %+v, want promoted", i, v)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d of %d: no verdict for a resumed canary past its canary_time; canary %+v", i, rounds, host.CanaryOf(h))
		}
		if st := host.CanaryOf(h); st != nil || h.Module() != next {
			t.Fatalf("round %d: after the promotion the canary is %+v and %s serves, want none and the canary's module", i, st, h.Module().Version())
		}
		cur = next
	}
}
