package host

import (
	"testing"
	"time"
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
