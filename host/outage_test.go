package host_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/host"
	"github.com/wasmjobs/wasmjobs/internal/outbound"
	"github.com/wasmjobs/wasmjobs/worker"
)

// waitingSince returns a job's envelope that has waited out an outage since since
// before now; none when since is 0.
func waitingSince(now time.Time, since time.Duration) backend.Envelope {
	env := backend.NewEnvelope("q", nil)
	if since > 0 {
		env.Headers = map[string]string{worker.OutageHeader: strconv.FormatInt(now.Add(-since).UnixMilli(), 10)}
	}
	return env
}

// checkDeferred checks got, the result of in after an outage's accounting: a defer
// flagged Outage of delay keeping the reason when deferred (what says which), else
// in untouched.
func checkDeferred(t *testing.T, in, got worker.Result, deferred bool, delay time.Duration, what string) {
	t.Helper()
	if !deferred {
		if got.Outcome != in.Outcome || got.Outage || got.Delay != in.Delay || got.Reason != in.Reason {
			t.Fatalf("result %+v, want it untouched", got)
		}
		return
	}
	if got.Outcome != worker.Defer || !got.Outage || got.Delay != delay || !strings.HasSuffix(got.Reason, ": boom") {
		t.Fatalf("result %+v, want %s of %v keeping the reason", got, what, delay)
	}
}

// A failed run that met an outage is deferred until the breakers let calls through
// again, plus jitter, flagged as an outage (no attempt, no max_defers); within
// outage_wait in all, counted from the outage's start the job carries. Its own
// choices (ack, dead letter, defer) stand, and a run that met no outage is untouched.
func TestOutageDefer(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	g := &outbound.Grant{OutageWait: time.Hour, BreakerCooldown: 40 * time.Second}
	at := func(d time.Duration) *time.Time { t := now.Add(d); return &t }
	jitter := func(max time.Duration) time.Duration {
		if max != 10*time.Second {
			t.Errorf("jitter up to %v, want a quarter of the cooldown", max)
		}
		return 3 * time.Second
	}
	for _, tc := range []struct {
		name      string
		outcome   worker.Outcome
		outage    *time.Time    // Execution.Outage
		since     time.Duration // the outage began this long before now; 0: none yet
		wantDefer bool
		wantDelay time.Duration
	}{
		{"retry", worker.Retry, at(20 * time.Second), 0, true, 23 * time.Second},
		{"a trap or timeout", worker.Failed, at(20 * time.Second), 0, true, 23 * time.Second},
		{"half-open: the time is now", worker.Retry, at(0), 0, true, 3 * time.Second},
		{"reopen passed", worker.Retry, at(-time.Minute), 0, true, 3 * time.Second},
		{"no outage met", worker.Retry, nil, 0, false, 0},
		{"an ack stands", worker.Ack, at(20 * time.Second), 0, false, 0},
		{"a dead letter stands", worker.DeadLetter, at(20 * time.Second), 0, false, 0},
		{"a defer stands", worker.Defer, at(20 * time.Second), 0, false, 0},
		{"within outage_wait", worker.Retry, at(20 * time.Second), 50 * time.Minute, true, 23 * time.Second},
		{"capped at what is left of outage_wait", worker.Retry, at(20 * time.Second), time.Hour - 5*time.Second, true, 5 * time.Second},
		{"past outage_wait: the usual accounting", worker.Retry, at(20 * time.Second), time.Hour, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			job := &worker.Job{Envelope: waitingSince(now, tc.since), Attempt: 1}
			in := worker.Result{Outcome: tc.outcome, Reason: "boom", Delay: time.Minute}
			got := host.OutageDefer(in, &host.Execution{Outage: tc.outage}, job, g, now, jitter)
			checkDeferred(t, in, got, tc.wantDefer, tc.wantDelay, "an outage defer")
		})
	}
}

// TestRateLimitDefer: a run that failed after a request was held back by a limit of
// [http.limits] is deferred until the limit would let it go, plus a jitter of up to a
// quarter of that, flagged as an outage's is (no attempt, no max_defers: the limit is
// the host's own), for at most outage_wait in all; past it, the usual accounting. An
// ack, a dead letter or a defer (an outage's too) stands.
func TestRateLimitDefer(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	g := &outbound.Grant{OutageWait: time.Hour, BreakerCooldown: 40 * time.Second}
	at := func(d time.Duration) *time.Time { t := now.Add(d); return &t }
	for _, tc := range []struct {
		name      string
		outcome   worker.Outcome
		limited   *time.Time
		since     time.Duration // the wait began this long before now; 0: none yet
		wantDelay time.Duration // 0: untouched
	}{
		{"retry", worker.Retry, at(8 * time.Second), 0, 10 * time.Second},
		{"a failed run", worker.Failed, at(8 * time.Second), 0, 10 * time.Second},
		{"the token is due now", worker.Retry, at(0), 0, time.Millisecond},
		{"not held back", worker.Retry, nil, 0, 0},
		{"an ack stands", worker.Ack, at(8 * time.Second), 0, 0},
		{"a dead letter stands", worker.DeadLetter, at(8 * time.Second), 0, 0},
		{"a defer stands", worker.Defer, at(8 * time.Second), 0, 0},
		{"within outage_wait", worker.Retry, at(8 * time.Second), 50 * time.Minute, 10 * time.Second},
		{"capped at what is left of outage_wait", worker.Retry, at(8 * time.Second), time.Hour - 5*time.Second, 5 * time.Second},
		{"past outage_wait: the usual accounting", worker.Retry, at(8 * time.Second), time.Hour, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			job := &worker.Job{Envelope: waitingSince(now, tc.since), Attempt: 1}
			jitter := func(max time.Duration) time.Duration { return max } // the most
			in := worker.Result{Outcome: tc.outcome, Reason: "boom", Delay: time.Minute}
			got := host.RateLimitDefer(in, &host.Execution{RateLimited: tc.limited}, job, g, now, jitter)
			checkDeferred(t, in, got, tc.wantDelay != 0, tc.wantDelay, "a defer flagged Outage (not counted toward max_defers)")
		})
	}
}

// TestOutageOutlivesItsBreaker: a job already waiting out an outage whose run fails
// after a request failed as the breakers count (a restarted host's breakers start
// closed) is deferred again, by the jitter alone; a job not waiting, or a run whose
// requests did not fail so, keeps the usual accounting.
func TestOutageOutlivesItsBreaker(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	g := &outbound.Grant{OutageWait: time.Hour, BreakerCooldown: 40 * time.Second}
	jitter := func(time.Duration) time.Duration { return 3 * time.Second }
	for _, tc := range []struct {
		name            string
		waiting, failed bool
		wantDefer       bool
	}{
		{"waiting, and the destination failed again", true, true, true},
		{"waiting, but no request failed so", true, false, false},
		{"not waiting: the breaker must open first", false, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var since time.Duration
			if tc.waiting {
				since = 10 * time.Minute
			}
			env := waitingSince(now, since)
			in := worker.Result{Outcome: worker.Retry, Reason: "boom"}
			got := host.OutageDefer(in, &host.Execution{DestinationFailed: tc.failed}, &worker.Job{Envelope: env, Attempt: 3, MaxAttempts: 3}, g, now, jitter)
			if tc.wantDefer != (got.Outcome == worker.Defer) || (tc.wantDefer && (!got.Outage || got.Delay != 3*time.Second)) {
				t.Fatalf("result %+v; want a defer of the jitter: %v", got, tc.wantDefer)
			}
		})
	}
}
