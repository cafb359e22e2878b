package host

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/internal/outbound"
	"github.com/wasmjobs/wasmjobs/worker"
)

// Settle returns the result a Handler gives the worker for x, a run of job on m at
// now: x's result, with a failure after an outage (outageDefer) or after a request
// held back by a limit of [http.limits] (rateLimitDefer) turned into the defer that
// waits it out. It is the step between a run and the worker's decision, shared by
// the Handler and by anything that shows what the worker would do with a run.
func (m *Module) Settle(x *Execution, job *worker.Job, now time.Time) worker.Result {
	res := outageDefer(x.Result(), x, job, m.manifest.http, now, outageJitter) // with the run's calls, the first MaxResultCalls
	if res.Outcome == worker.Wait {
		res.WaitTimeout = cmp.Or(m.manifest.WaitTimeout, backend.DefaultWaitTimeout)
	}
	return rateLimitDefer(res, x, job, m.manifest.http, now, outageJitter)
}

// outageDefer turns the result of a run that failed after meeting an outage (a
// request found its destination's circuit breaker open, or its failure opened it:
// Execution.Outage) into a defer that waits it out: until the breakers let calls
// through again, plus a jitter of up to a quarter of breaker_cooldown so that the jobs
// waiting do not all wake at once. A failure is a retry the guest asked for, or a run
// that failed (an error, a trap, a timeout); an ack, a dead letter and a defer the
// guest asked for are its own choices and stand. The defer is bounded as waitOut says.
//
// A job already waiting out an outage (worker.Job.OutageSince) whose run fails after a
// request failed in a way the breakers count (Execution.DestinationFailed) is still in
// it though no breaker is open: the breakers of a restarted host, or of a reloaded
// module, start closed and need breaker_failures failures to open again, and the job's
// attempts must not pay for that. It waits the jitter alone.
func outageDefer(res worker.Result, x *Execution, job *worker.Job, g *outbound.Grant, now time.Time, jitter func(max time.Duration) time.Duration) worker.Result {
	until := x.Outage
	if _, waiting := job.OutageSince(); until == nil && waiting && x.DestinationFailed {
		until = &now
	}
	if until == nil || g == nil || !turnable(res) {
		return res
	}
	return waitOut(res, job, g, now, "waiting out an outage of a destination", func() time.Duration {
		return max(until.Sub(now), 0) + jitter(max(g.BreakerCooldown/4, time.Millisecond))
	})
}

// rateLimitDefer turns the result of a run that failed after one of its requests
// failed as rate limited (a limit of [http.limits] on this host would have held it
// past its deadline: Execution.RateLimited) into a defer until the limit would let it
// go, plus a jitter of up to a quarter of that wait (at least a millisecond's worth),
// so that the jobs held back do not all come back at the same instant. The limit is
// the host's own, so the job spends on it neither an attempt nor one of its
// max_defers: the defer is bounded as an outage's is (waitOut), sharing its
// outage_wait. As for an outage, only a failure is turned; an ack, a dead letter and
// a defer stand, an outage's defer included.
func rateLimitDefer(res worker.Result, x *Execution, job *worker.Job, g *outbound.Grant, now time.Time, jitter func(max time.Duration) time.Duration) worker.Result {
	if x.RateLimited == nil || g == nil || !turnable(res) {
		return res
	}
	return waitOut(res, job, g, now, "held back by a limit of [http.limits]", func() time.Duration {
		wait := max(x.RateLimited.Sub(now), 0)
		return wait + jitter(max(wait/4, time.Millisecond))
	})
}

// turnable reports whether res is a failure the host may turn into a defer: a retry
// the guest asked for, or a run that failed.
func turnable(res worker.Result) bool {
	return res.Outcome == worker.Retry || res.Outcome == worker.Failed
}

// waitOut turns res into a defer of wait() flagged worker.Result.Outage: it spends no
// attempt and does not count toward max_defers, and the worker keeps, across the
// unbroken run of such defers, when the first began (worker.Job.OutageSince). Their
// waits are bounded by the grant's outage_wait in all: the delay is cut to what is
// left of it, and past it res stands, for the queue's usual accounting.
func waitOut(res worker.Result, job *worker.Job, g *outbound.Grant, now time.Time, why string, wait func() time.Duration) worker.Result {
	since, ok := job.OutageSince()
	if !ok {
		since = now
	}
	left := since.Add(g.OutageWait).Sub(now)
	if left <= 0 {
		return res
	}
	d := max(min(wait(), left), time.Millisecond) // a defer needs a delay
	reason := res.Reason
	if reason == "" {
		reason = res.Outcome.String()
	}
	res.Outcome, res.Outage, res.Delay = worker.Defer, true, d
	res.Reason = fmt.Sprintf("%s (for %v, at most %v more): %s", why, d.Round(time.Millisecond), left.Round(time.Second), reason)
	return res
}

// outageJitter is a uniform wait in [0, max).
func outageJitter(max time.Duration) time.Duration { return rand.N(max) }
