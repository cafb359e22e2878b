package host

import (
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
