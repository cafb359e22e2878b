package host_test

import (
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/host"
)

// TestRolloutManifest reads the [rollout] table, and refuses a bad entry with its line
// and dotted field.
func TestRolloutManifest(t *testing.T) {
	t.Parallel()
	m, err := host.ParseManifest("m.toml", []byte("[rollout]\nstrategy = \"canary\"\ncanary_percent = 25\ncanary_jobs = 50\ncanary_time = \"2m\"\ncanary_max_failure_delta = 0.1\ncanary_min_jobs = 5\nhistory = 3\n"))
	want := host.Rollout{Strategy: "canary", CanaryPercent: 25, CanaryJobs: 50, CanaryTime: 2 * time.Minute, CanaryMaxFailureDelta: 0.1, CanaryMinJobs: 5, History: 3}
	if err != nil || m.Rollout != want {
		t.Fatalf("got %+v, %v; want %+v", m.Rollout, err, want)
	}
	if m, err := host.ParseManifest("m.toml", []byte("rollout = { strategy = \"immediate\" }")); err != nil || m.Rollout.Strategy != host.StrategyImmediate {
		t.Fatalf("inline table: %+v, %v", m.Rollout, err)
	}
	for _, c := range []struct{ name, doc, want string }{
		{"strategy", "[rollout]\nstrategy = \"blue-green\"", `m.toml:2:1: field rollout.strategy: want "canary" or "immediate", got "blue-green"`},
		{"percent", "[rollout]\ncanary_percent = 0", "m.toml:2:1: field rollout.canary_percent: want 1 to 100, got 0"},
		{"delta", "[rollout]\ncanary_max_failure_delta = 2", "m.toml:2:1: field rollout.canary_max_failure_delta: want a number from 0.001 to 1 such as 0.05, got 2"},
		{"time", "[rollout]\ncanary_time = 60", "m.toml:2:1: field rollout.canary_time: want a duration from 1ms to 24h such as \"60s\", got 60"},
		{"unknown", "\n[rollout]\ncanary_pct = 5", "m.toml:3:1: field rollout.canary_pct: unknown rollout setting (known: canary_jobs, canary_max_failure_delta, canary_min_jobs, canary_percent, canary_time, history, strategy)"},
		{"not a table", "rollout = \"canary\"", `m.toml:1:1: field rollout: want a table such as [rollout] then canary_percent = 10, got "canary"`},
	} {
		if _, err := host.ParseManifest("m.toml", []byte(c.doc)); err == nil || err.Error() != c.want {
			t.Errorf("%s: got %v\nwant %s", c.name, err, c.want)
		}
	}
}
