package host

import (
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/worker"
)

// TestRolloutOfAModule: a module's rollout is its manifest's settings over the
// registry's, then Rollout's defaults, field by field.
func TestRolloutOfAModule(t *testing.T) {
	r := &Registry{cfg: RegistryConfig{Rollout: Rollout{CanaryJobs: 7, CanaryPercent: 20, History: 3}}}
	m := &Module{manifest: Manifest{Rollout: Rollout{CanaryPercent: 50, CanaryMinJobs: 4}}}
	want := Rollout{
		Strategy:              StrategyCanary,               // the default
		CanaryPercent:         50,                           // the manifest's, over the registry's
		CanaryJobs:            7,                            // the registry's
		CanaryTime:            DefaultCanaryTime,            // the default
		CanaryMaxFailureDelta: DefaultCanaryMaxFailureDelta, // the default
		CanaryMinJobs:         4,                            // the manifest's
		History:               3,                            // the registry's
	}
	if got := r.rollout(m); got != want {
		t.Fatalf("rollout %+v, want %+v", got, want)
	}
	if got := (Rollout{}).withDefaults(); got != (Rollout{Strategy: StrategyCanary, CanaryPercent: DefaultCanaryPercent,
		CanaryJobs: DefaultCanaryJobs, CanaryTime: 60 * time.Second, CanaryMaxFailureDelta: DefaultCanaryMaxFailureDelta,
		CanaryMinJobs: DefaultCanaryMinJobs, History: DefaultHistory}) {
		t.Fatalf("defaults %+v", got)
	}
}

// TestRunFailedForACanary: a canary's version is judged by its runs: an ack and a wait
// for children it staged are successes; a wait without an awaited child, and anything
// else, are failures.
func TestRunFailedForACanary(t *testing.T) {
	t.Parallel()
	awaited := []worker.Child{{Queue: "q"}, {Queue: "q", Await: true}}
	for _, tc := range []struct {
		name   string
		res    worker.Result
		failed bool
	}{
		{"ack", worker.Result{Outcome: worker.Ack}, false},
		{"wait for a child", worker.Result{Outcome: worker.Wait, Children: awaited}, false},
		{"wait for nothing", worker.Result{Outcome: worker.Wait, Children: awaited[:1]}, true},
		{"retry", worker.Result{Outcome: worker.Retry}, true},
		{"dead letter", worker.Result{Outcome: worker.DeadLetter}, true},
		{"failed", worker.Result{Outcome: worker.Failed}, true},
	} {
		if got := runFailed(tc.res); got != tc.failed {
			t.Errorf("%s: runFailed = %v, want %v", tc.name, got, tc.failed)
		}
	}
}
