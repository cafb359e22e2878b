package host

import (
	"bytes"
	"context"
	"slices"
	"time"

	"github.com/wasmjobs/wasmjobs/internal/outbound"
)

// JSInterrupts reports how many JS runs of m QuickJS's interrupt handler stopped.
func JSInterrupts(m *Module) int64 { return m.jsInterrupts.Load() }

// ResumeCanary takes up on h a trial of m that ran for ran before a restart, started at
// startedAt, with jobs canary jobs counted (none failed).
func ResumeCanary(h *Handler, m *Module, r Rollout, startedAt time.Time, ran time.Duration, jobs int, onEnd func(Verdict)) {
	h.startTrial(m, r, trial{onEnd: onEnd, from: &canaryState{
		Version: m.Version(), Current: h.Module().Version(), StartedAt: startedAt, Ran: ran, Jobs: jobs,
	}})
}

// StartCanary is h.startCanary: the canary controls are the registry's, and these
// tests drive a handler's canary without one.
func StartCanary(h *Handler, m *Module, r Rollout, onEnd func(Verdict)) { h.startCanary(m, r, onEnd) }

// CanaryOf is h.canaryStatus.
func CanaryOf(h *Handler) *CanaryStatus { return h.canaryStatus() }

// CanaryRan is how long h's canary under way has run, across restarts.
func CanaryRan(h *Handler) time.Duration { return h.trialState(false).Ran }

// OutageDefer is outageDefer.
var OutageDefer = outageDefer

// RateLimitDefer is rateLimitDefer.
var RateLimitDefer = rateLimitDefer

// GrantOf is m's [http] grant as the module's client takes it, header values included.
func GrantOf(m Manifest) *outbound.Grant { return m.http }

// FreshJSMemory starts a VM of m, a fresh JS module, as a job does, and reports whether
// its memory is one an ended VM left, whether every byte of it is the snapshot's, and
// whether grow pages grown then are all zero; then releases it as a job's run does.
func FreshJSMemory(m *Module, grow uint32) (reused, asSnapshot, grownZero bool, err error) {
	if err := m.begin(); err != nil {
		return false, false, false, err
	}
	inst, err := m.instantiate(context.Background(), time.Now().Add(time.Minute))
	if err != nil {
		m.release(nil, false)
		return false, false, false, err
	}
	defer m.release(inst, false)
	reused = inst.memory.dirty
	mem := inst.mod.Memory()
	b, _ := mem.Read(0, mem.Size())
	asSnapshot = m.jsSnap != nil && bytes.Equal(b, m.jsSnap.mem)
	from := mem.Size()
	if _, ok := mem.Grow(grow); ok {
		g, _ := mem.Read(from, mem.Size()-from)
		grownZero = len(g) > 0 && !slices.ContainsFunc(g, func(c byte) bool { return c != 0 })
	}
	return reused, asSnapshot, grownZero, nil
}

// ServeLoops reports how many serve loops run on e.
func ServeLoops(e *Engine) int64 { return e.loops.Load() }
