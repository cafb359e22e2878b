package host

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/wasmjobs/wasmjobs/internal/outbound"
	"github.com/wasmjobs/wasmjobs/worker"
)

// outageDefer turns the result of a run that failed after meeting an outage (a
// request found its destination's circuit breaker open, or its failure opened it:
// Execution.Outage) into a defer that waits it out: until the breakers let calls
// through again, plus a jitter of up to a quarter of breaker_cooldown so that the jobs
// waiting do not all wake at once. The defer spends no attempt and does not count
// toward max_defers (worker.Result.Outage). A failure is a retry the guest asked for,
// or a run that failed (an error, a trap, a timeout); an ack, a dead letter and a
// defer the guest asked for are its own choices and stand. The waits of one outage
// (worker.Job.OutageSince) are bounded by outage_wait in all: past it the result
// stands, for the queue's usual accounting.
func outageDefer(res worker.Result, x *Execution, job *worker.Job, g *outbound.Grant, now time.Time, jitter func(max time.Duration) time.Duration) worker.Result {
	if x.Outage == nil || g == nil || (res.Outcome != worker.Retry && res.Outcome != worker.Failed) {
		return res
	}
	since, ok := job.OutageSince()
	if !ok {
		since = now
	}
	left := since.Add(g.OutageWait).Sub(now)
	if left <= 0 {
		return res
	}
	wait := max(x.Outage.Sub(now), 0) + jitter(max(g.BreakerCooldown/4, time.Millisecond))
	wait = max(min(wait, left), time.Millisecond) // a defer needs a delay
	reason := res.Reason
	if reason == "" {
		reason = res.Outcome.String()
	}
	res.Outcome, res.Outage, res.Delay = worker.Defer, true, wait
	res.Reason = fmt.Sprintf("waiting out an outage of a destination (for %v, at most %v more): %s", wait.Round(time.Millisecond), left.Round(time.Second), reason)
	return res
}

// outageJitter is a uniform wait in [0, max).
func outageJitter(max time.Duration) time.Duration { return rand.N(max) }

// rateLimitDefer turns the result of a run that failed after one of its requests
// failed as rate limited (a limit of [http.limits] on this host would have held it
// past its deadline: Execution.RateLimited) into a defer until the limit would let it
// go, plus a jitter of up to a quarter of that wait (at least a millisecond's worth),
// so that the jobs held back do not all come back at the same instant: the job spent
// no attempt on the host's own limit. It is an ordinary defer, counted toward
// max_defers. As for an outage, only a failure is turned (a retry the guest asked for,
// or a run that failed); an ack, a dead letter and a defer stand, an outage's defer
// included.
func rateLimitDefer(res worker.Result, x *Execution, now time.Time, jitter func(max time.Duration) time.Duration) worker.Result {
	if x.RateLimited == nil || (res.Outcome != worker.Retry && res.Outcome != worker.Failed) {
		return res
	}
	wait := max(x.RateLimited.Sub(now), 0)
	wait = max(wait+jitter(max(wait/4, time.Millisecond)), time.Millisecond) // a defer needs a delay
	reason := res.Reason
	if reason == "" {
		reason = res.Outcome.String()
	}
	res.Outcome, res.Delay = worker.Defer, wait
	res.Reason = fmt.Sprintf("held back by a limit of [http.limits] (for %v): %s", wait.Round(time.Millisecond), reason)
	return res
}
