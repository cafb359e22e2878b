package host

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/wasmjobs/wasmjobs/worker"
)

// The roles of a module's versions while a canary runs, in job results and metrics.
const (
	// RoleCurrent is the version that serves the queue.
	RoleCurrent = "current"
	// RoleCanary is the new version on trial.
	RoleCanary = "canary"
)

// The kinds of a canary's end (Verdict.Kind), also rollout event kinds.
const (
	// VerdictPromoted: the canary serves every job from now on.
	VerdictPromoted = "promoted"
	// VerdictRolledBack: the canary did worse than the current version, or an operator
	// rolled it back; it takes no more jobs.
	VerdictRolledBack = "rolled_back"
	// VerdictSuperseded: a newer version of the file replaced the canary before it
	// ended.
	VerdictSuperseded = "superseded"
)

// CanaryStatus describes a canary under way.
type CanaryStatus struct {
	Version   string    `json:"version"`
	Percent   int       `json:"percent"`
	StartedAt time.Time `json:"started_at"`
	// Jobs and Failed count the canary's jobs since it started and those that did not
	// ack; CurrentJobs and CurrentFailed count the current version's over the same
	// window.
	Jobs          int `json:"jobs"`
	Failed        int `json:"failed"`
	CurrentJobs   int `json:"current_jobs"`
	CurrentFailed int `json:"current_failed"`
}

// Verdict is how a canary ended.
type Verdict struct {
	// Kind is VerdictPromoted, VerdictRolledBack or VerdictSuperseded.
	Kind string `json:"kind"`
	// Version is the canary's version; Current the version that served beside it.
	Version string `json:"version"`
	Current string `json:"current"`
	// Reason says why, with the two failure rates.
	Reason string `json:"reason"`
	// CanaryFailureRate and CurrentFailureRate are the shares of jobs that did not ack
	// on each version over the canary's window, out of CanaryJobs and CurrentJobs.
	CanaryFailureRate  float64   `json:"canary_failure_rate"`
	CurrentFailureRate float64   `json:"current_failure_rate"`
	CanaryJobs         int       `json:"canary_jobs"`
	CurrentJobs        int       `json:"current_jobs"`
	At                 time.Time `json:"at"`
}

// canary is a new version on trial beside a handler's current one.
type canary struct {
	m     *Module
	cfg   Rollout // defaults filled in
	start time.Time
	// ran is how long the trial ran before this host took it up (after a restart);
	// resumed, when it did.
	ran     time.Duration
	resumed time.Time
	timer   *time.Timer
	// tick marks the canary changed every trialSaveEvery while it runs (the time it
	// ran grows though no job is counted); nil without onChange.
	tick     *time.Timer
	onEnd    func(Verdict)
	onChange func()

	mu     sync.Mutex
	can    tally
	cur    tally
	timeUp bool
	ended  bool
	dirty  bool // counted since the last state taken for saving
}

// trial is how a canary starts: its callbacks, and the state it resumes.
type trial struct {
	// onEnd is called when the canary ends by itself; onChange when it has state to
	// save: after a job of its window is counted, and every trialSaveEvery while it
	// runs. Both run on a job's or a timer's goroutine: they must not block.
	onEnd    func(Verdict)
	onChange func()
	// from is the state of a trial that was under way before a restart: its counts,
	// start and the time it ran are taken up.
	from *canaryState
}

// How often, at least, a canary under way has its state saved although it counts no
// job (see trialSaveEvery).
const (
	trialSaveMax = 10 * time.Second
	trialSaveMin = time.Second
)

// trialSaveEvery is how often a canary of canary_time d calls onChange though it counts
// no job: d/20, within trialSaveMin and trialSaveMax. A kill of the host loses that much
// of the time the trial ran, at most, not all of it since the last job counted.
func trialSaveEvery(d time.Duration) time.Duration {
	return max(min(d/20, trialSaveMax), trialSaveMin)
}

type tally struct{ jobs, failed int }

func (t tally) rate() float64 {
	if t.jobs == 0 {
		return 0
	}
	return float64(t.failed) / float64(t.jobs)
}

// takes reports whether the delivery of job id at attempt runs on the canary: its
// bucket is in the canary's share and it is the job's first attempt. A retry always
// goes to the current version: the attempt before may have failed on this canary, on
// this host or on another (a broker redelivers a job to any host, and every host's
// canary of the version takes the same buckets), so the attempt number, which travels
// with the job, is what keeps a bad canary to one attempt of a job; no state is shared.
func (c *canary) takes(id string, attempt int) bool {
	if attempt > 1 || CanaryBucket(id) >= c.cfg.CanaryPercent {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.ended
}

// verdict returns the canary's end with the rates so far. Called with c.mu held.
func (c *canary) verdict(kind, reason string, current *Module) Verdict {
	return Verdict{
		Kind: kind, Version: c.m.Version(), Current: current.Version(), Reason: reason,
		CanaryFailureRate: c.can.rate(), CurrentFailureRate: c.cur.rate(),
		CanaryJobs: c.can.jobs, CurrentJobs: c.cur.jobs, At: time.Now(),
	}
}

// judge decides whether the canary ends, with c.mu held: rolled back once it has run
// CanaryMinJobs jobs and every one failed, or its share of jobs that did not ack
// passes the current version's by more than CanaryMaxFailureDelta; promoted after
// CanaryJobs jobs or CanaryTime unless it does worse. A canary that does worse with
// fewer than CanaryMinJobs jobs waits for more.
func (c *canary) judge(current *Module) (Verdict, bool) {
	cr, ur, n := c.can.rate(), c.cur.rate(), c.can.jobs
	rates := fmt.Sprintf("canary failure rate %.3f (%d of %d jobs), current %.3f (%d of %d jobs)",
		cr, c.can.failed, n, ur, c.cur.failed, c.cur.jobs)
	worse := cr-ur > c.cfg.CanaryMaxFailureDelta
	switch {
	case n >= c.cfg.CanaryMinJobs && c.can.failed == n:
		return c.verdict(VerdictRolledBack, "every job of the canary failed: "+rates, current), true
	case n >= c.cfg.CanaryMinJobs && worse:
		return c.verdict(VerdictRolledBack, fmt.Sprintf("failure rate above the current version's by more than %g: %s",
			c.cfg.CanaryMaxFailureDelta, rates), current), true
	case worse:
		return Verdict{}, false
	case n >= c.cfg.CanaryJobs:
		return c.verdict(VerdictPromoted, fmt.Sprintf("ran %d jobs: %s", n, rates), current), true
	case c.timeUp:
		return c.verdict(VerdictPromoted, fmt.Sprintf("ran for %v: %s", c.cfg.CanaryTime, rates), current), true
	}
	return Verdict{}, false
}

// startCanary puts m on trial beside the current module under r: it takes
// r.CanaryPercent of the jobs from now on, until it is promoted or rolled back by
// itself, by promoteCanary or rollBackCanary, or replaced by another startCanary (its
// module then retires). onEnd, if not nil, is called when the canary ends by itself,
// on the goroutine that ended it (a job's or a timer's): it must not block. The
// canary controls are the registry's: unexported, so that the handler's contract is
// serving jobs and swapping modules.
func (h *Handler) startCanary(m *Module, r Rollout, onEnd func(Verdict)) {
	h.startTrial(m, r, trial{onEnd: onEnd})
}

// startTrial is startCanary, resuming t.from if it is set: the canary_time left is what
// the trial had not run yet.
func (h *Handler) startTrial(m *Module, r Rollout, t trial) {
	now := time.Now()
	c := &canary{m: m, cfg: r.withDefaults(), start: now, resumed: now, onEnd: t.onEnd, onChange: t.onChange}
	if f := t.from; f != nil {
		c.start, c.ran = f.StartedAt, f.Ran
		c.can = tally{jobs: f.Jobs, failed: f.Failed}
		c.cur = tally{jobs: f.CurrentJobs, failed: f.CurrentFailed}
	}
	// c.mu is held until c is in place: the timer may fire at once (a resumed trial
	// that ran its canary_time already), and its verdict must find c in h.can, or no
	// one gives it.
	c.mu.Lock()
	c.timer = time.AfterFunc(max(c.cfg.CanaryTime-c.ran, 0), func() {
		c.mu.Lock()
		if c.ended {
			c.mu.Unlock()
			return
		}
		c.timeUp = true
		v, ok := c.judge(h.cur.Load())
		c.ended = ok
		c.mu.Unlock()
		if ok && h.end(c, v) && c.onEnd != nil {
			c.onEnd(v)
		}
	})
	if c.onChange != nil {
		every := trialSaveEvery(c.cfg.CanaryTime)
		c.tick = time.AfterFunc(every, func() {
			c.mu.Lock()
			if c.ended {
				c.mu.Unlock()
				return
			}
			c.dirty = true
			c.tick.Reset(every) // under c.mu: once ended is set, no tick arms again
			c.mu.Unlock()
			c.onChange()
		})
	}
	old := h.can.Swap(c)
	c.mu.Unlock()
	if old != nil {
		old.mu.Lock()
		old.ended = true
		old.mu.Unlock()
		old.stopTimers()
		old.m.Retire()
	}
}

// stopTimers stops the canary's timers, once it ended.
func (c *canary) stopTimers() {
	c.timer.Stop()
	if c.tick != nil {
		c.tick.Stop()
	}
}

// canaryStatus describes the canary under way, or returns nil.
func (h *Handler) canaryStatus() *CanaryStatus {
	c := h.can.Load()
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return &CanaryStatus{
		Version: c.m.Version(), Percent: c.cfg.CanaryPercent, StartedAt: c.start,
		Jobs: c.can.jobs, Failed: c.can.failed, CurrentJobs: c.cur.jobs, CurrentFailed: c.cur.failed,
	}
}

// trialState returns the canary under way as the history keeps it, or nil; with
// changedOnly, nil also when it did not change since the last such call (no job
// counted, no tick of trialSaveEvery).
func (h *Handler) trialState(changedOnly bool) *canaryState {
	c := h.can.Load()
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended || (changedOnly && !c.dirty) {
		return nil
	}
	c.dirty = false
	return &canaryState{
		Version: c.m.Version(), Current: h.cur.Load().Version(), StartedAt: c.start, Ran: c.ran + time.Since(c.resumed),
		Jobs: c.can.jobs, Failed: c.can.failed, CurrentJobs: c.cur.jobs, CurrentFailed: c.cur.failed,
	}
}

// canaryModule returns the module of the canary under way, or nil.
func (h *Handler) canaryModule() *Module {
	if c := h.can.Load(); c != nil {
		return c.m
	}
	return nil
}

// promoteCanary ends the canary under way now, making its module the current one. It
// reports false when no canary runs.
func (h *Handler) promoteCanary(reason string) (Verdict, bool) {
	return h.endNow(VerdictPromoted, reason)
}

// rollBackCanary ends the canary under way now; its module takes no more jobs and
// retires. It reports false when no canary runs.
func (h *Handler) rollBackCanary(reason string) (Verdict, bool) {
	return h.endNow(VerdictRolledBack, reason)
}

func (h *Handler) endNow(kind, reason string) (Verdict, bool) {
	c := h.can.Load()
	if c == nil {
		return Verdict{}, false
	}
	c.mu.Lock()
	if c.ended {
		c.mu.Unlock()
		return Verdict{}, false
	}
	c.ended = true
	v := c.verdict(kind, fmt.Sprintf("%s: canary failure rate %.3f (%d of %d jobs), current %.3f (%d of %d jobs)",
		reason, c.can.rate(), c.can.failed, c.can.jobs, c.cur.rate(), c.cur.failed, c.cur.jobs), h.cur.Load())
	c.mu.Unlock()
	return v, h.end(c, v)
}

// end puts a canary's verdict in place, once: the canary stops taking jobs, and is
// either retired or made the current module.
func (h *Handler) end(c *canary, v Verdict) bool {
	if !h.can.CompareAndSwap(c, nil) {
		return false // replaced by a newer canary, which retired it
	}
	c.stopTimers()
	if v.Kind == VerdictPromoted {
		h.Swap(c.m)
	} else {
		c.m.Retire()
	}
	return true
}

// record counts a job's result in the canary's window and ends the canary if that
// decides it. A defer is neither a success nor a failure.
// runFailed reports whether a run's result counts as a failure of its version: anything
// but an ack, or a wait for children it staged (a wait without one fails).
func runFailed(res worker.Result) bool {
	switch res.Outcome {
	case worker.Ack:
		return false
	case worker.Wait:
		return !slices.ContainsFunc(res.Children, func(c worker.Child) bool { return c.Await })
	}
	return true
}

func (h *Handler) record(c *canary, role string, res worker.Result) {
	if res.Outcome == worker.Defer {
		return
	}
	bad := runFailed(res)
	c.mu.Lock()
	if c.ended {
		c.mu.Unlock()
		return
	}
	t := &c.cur
	if role == RoleCanary {
		t = &c.can
	}
	t.jobs++
	if bad {
		t.failed++
	}
	c.dirty = true
	v, ok := c.judge(h.cur.Load())
	c.ended = ok
	c.mu.Unlock()
	if !ok {
		if c.onChange != nil {
			c.onChange()
		}
		return
	}
	if !h.end(c, v) {
		return
	}
	if c.onEnd != nil {
		c.onEnd(v)
	}
}
