package host_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/host"
	"github.com/wasmjobs/wasmjobs/worker"
)

// TestCancelledRunFailsAsCancelled: a run whose context is cancelled with
// worker.ErrCancelled as its cause (an operator's cancel) fails with CauseCancelled and
// the reason "cancelled by an operator", soon after the cancel, whether the guest
// spins, sleeps in WASI or loops in JS; a plain cancel (the host's drain) still fails
// as the host shutting down.
func TestCancelledRunFailsAsCancelled(t *testing.T) {
	t.Parallel()
	e := newEngine(t)
	modules := []struct {
		name    string
		m       *host.Module
		payload string
		within  time.Duration
	}{
		{"wasm spinning", loadFile(t, e, "hostile/loop", `timeout = "1m"`), "", 100 * time.Millisecond},
		{"wasm in a WASI sleep", loadFile(t, e, "hostile/sleep", `timeout = "1m"`), "", 100 * time.Millisecond},
		{"js spinning", loadJS(t, e, jsHostile, `timeout = "1m"`), "loop", 250 * time.Millisecond},
	}
	t.Run("js during its VM's setup", func(t *testing.T) {
		m := loadJS(t, e, jsHostile, `timeout = "1m"`)
		// The first run takes the VM made at load and is cancelled before it starts; the
		// second makes a new VM (hundreds of milliseconds) and is cancelled meanwhile.
		for _, after := range []time.Duration{0, 20 * time.Millisecond} {
			ctx, cancel := context.WithCancelCause(context.Background())
			time.AfterFunc(after, func() { cancel(worker.ErrCancelled) })
			if x := m.Run(ctx, jobOf(m, "loop"), nil); x.Cause != host.CauseCancelled || x.Reason != "cancelled by an operator" {
				t.Fatalf("cancelled after %v: %s %q, want cancelled by an operator", after, x.Ending(), x.Reason)
			}
		}
	})
	for _, mod := range modules {
		for _, c := range []struct {
			name   string
			cause  error
			kind   host.Cause
			reason string
		}{
			{"by an operator", worker.ErrCancelled, host.CauseCancelled, "cancelled by an operator"},
			{"by the drain", nil, host.CauseTimeout, "cancelled: the host is shutting down"},
		} {
			t.Run(fmt.Sprintf("%s %s", mod.name, c.name), func(t *testing.T) {
				if mod.payload == "loop" {
					run(mod.m, "ok") // a warm VM: the cancel comes in the run, not its setup
				}
				ctx, cancel := context.WithCancelCause(context.Background())
				defer cancel(nil)
				var at time.Time
				time.AfterFunc(100*time.Millisecond, func() { at = time.Now(); cancel(c.cause) })
				x := mod.m.Run(ctx, jobOf(mod.m, mod.payload), nil)
				took := time.Since(at)
				if x.Outcome != worker.Failed || x.Cause != c.kind || x.Reason != c.reason {
					t.Fatalf("%s %q, want %s %q", x.Ending(), x.Reason, c.kind, c.reason)
				}
				if took > mod.within {
					t.Errorf("the run ended %v after the cancel, want within %v", took, mod.within)
				}
			})
		}
	}
}
