package host_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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

// TestRollbackAfterAnUnrecordedAutomaticRollback: a canary that rolled back by itself
// but whose verdict is not recorded yet (the follow loop has not got to it; here it
// never will, the registry being closed) is not rolled back twice by an operator's
// Rollback with no version: the verdict is recorded first, and the rollback answers
// its pin instead of going back one version more.
func TestRollbackAfterAnUnrecordedAutomaticRollback(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rig := newRegRig(t, host.RegistryConfig{Rescan: time.Hour, Rollout: host.Rollout{Strategy: host.StrategyCanary}}, 4)
	v0, v1 := variant(t, "abi/ack", "v0"), variant(t, "abi/ack", "v1")
	rig.write("svc.wasm", v0)
	rig.start()
	rig.promoteFiles(v1, "the canary of v1")
	man := fmt.Sprintf(canaryManifest, "canary_percent = 100\ncanary_min_jobs = 5\ncanary_jobs = 1000\ncanary_time = \"1h\"")
	rig.write("svc.toml", []byte(man))
	v1m := host.VersionOf(v1, []byte(man))
	rig.waitFor("the canary of v1 with the manifest", func() bool { c := rig.status("svc").Canary; return c != nil && c.Version == v1m })
	trap := testdataModule(t, "hostile/trap")
	trapV := host.VersionOf(trap, []byte(man))
	rig.write("svc.wasm", trap)
	rig.waitFor("the canary of the trap", func() bool { c := rig.status("svc").Canary; return c != nil && c.Version == trapV })
	if err := rig.r.Close(); err != nil { // nothing records a verdict from now on but the calls
		t.Fatal(err)
	}
	rig.publishIDs("svc", "x", jobIDs("job", 20)...)
	rig.waitFor("every job", func() bool { return rig.acks() == 20 })
	if rig.status("svc").Canary != nil {
		t.Fatal("the trap was not rolled back")
	}
	p, err := rig.r.Rollback(ctx, "svc", "")
	if err != nil || p.Version != host.Version(v1) || p.FileVersion != trapV {
		t.Fatalf("rollback: %+v, %v; want the automatic rollback's pin of %s holding %s back", p, err, host.Version(v1), trapV)
	}
	st := rig.status("svc")
	if st.Version != host.Version(v1) || st.LastRollout == nil || st.LastRollout.Version != trapV || st.LastRollout.Kind != host.VerdictRolledBack {
		t.Fatalf("status %+v, want v1 serving and the trap's rollback recorded", st)
	}
	hist, _ := rig.r.History("svc")
	for _, he := range hist {
		if he.Version == host.Version(v1) && he.State != host.HistoryCurrent {
			t.Fatalf("history %+v: v1 is %s, want current", hist, he.State)
		}
	}
}

// TestPromoteAndRollbackKeepTheirDeadline: an operator's call waiting for a reconcile
// under way returns when its context ends.
func TestPromoteAndRollbackKeepTheirDeadline(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "svc.wasm"), variant(t, "abi/ack", "v1"), 0o644); err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	w := idleWorker(t)
	r, err := host.NewRegistry(host.RegistryConfig{
		Dir: dir, Engine: newEngine(t), Queues: w, Rescan: time.Hour, NoWatch: true,
		OnEvent: func(ev host.RegistryEvent) {
			if ev.Kind == "loaded" {
				close(entered)
				<-release // the first read holds the reconcile slot until released
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan error, 1)
	go func() { started <- r.Start(context.Background()) }()
	<-entered
	for _, call := range []struct {
		name string
		do   func(context.Context) error
	}{
		{"promote", func(ctx context.Context) error { _, err := r.Promote(ctx, "svc"); return err }},
		{"rollback", func(ctx context.Context) error { _, err := r.Rollback(ctx, "svc", ""); return err }},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		done := make(chan error, 1)
		go func() { done <- call.do(ctx) }()
		select {
		case err := <-done:
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%s: %v, want the deadline's error", call.name, err)
			}
		case <-time.After(20 * time.Second):
			t.Errorf("%s still waits for the read 20s after its 50ms deadline", call.name)
		}
		cancel()
	}
	close(release)
	if err := <-started; err != nil {
		t.Fatal(err)
	}
	r.Close()
	r.Retire()
}

// TestCanaryNeverRetriesAJob: a job runs on the canary once at most. Every job is in
// the canary's share and the canary, which traps, is never judged (canary_min_jobs
// above the jobs' count, canary_time an hour): each job fails once on the canary and
// acks on the current version at its retry.
func TestCanaryNeverRetriesAJob(t *testing.T) {
	t.Parallel()
	rig, goodV, trapV := newTrapCanaryRig(t, "canary_percent = 100\ncanary_min_jobs = 1000\ncanary_jobs = 1000\ncanary_time = \"1h\"")

	const n = 30
	rig.publishIDs("svc", "x", jobIDs("job", n)...)
	rig.waitFor("every job settled for good", func() bool {
		rig.mu.Lock()
		defer rig.mu.Unlock()
		done := 0
		for _, j := range rig.settled {
			if j.settle != "retry" && j.settle != "defer" {
				done++
			}
		}
		return done == n
	})
	rig.stopWorker() // nothing settles after this
	if st := rig.status("svc"); st.Canary == nil || st.Canary.Jobs != n || st.Canary.Failed != n {
		t.Fatalf("status %+v, want the canary still on trial with %d jobs failed", st, n)
	}
	rig.mu.Lock()
	defer rig.mu.Unlock()
	onCanary, acked := map[string]int{}, map[string]int{}
	for _, j := range rig.settled {
		switch {
		case j.version == trapV:
			onCanary[j.id]++
		case j.version == goodV && j.settle == "ack":
			acked[j.id]++
		default:
			t.Errorf("job %s settled %s on %s", j.id, j.settle, j.version)
		}
	}
	for _, id := range jobIDs("job", n) {
		if onCanary[id] != 1 || acked[id] != 1 {
			t.Errorf("job %s ran %d times on the canary and acked %d times on the current version, want once each", id, onCanary[id], acked[id])
		}
	}
}

// TestHistoryOfAPathIsUnknown: a name that is a path reads nothing outside the history's
// directory, and an unknown name is an unknown module.
func TestHistoryOfAPathIsUnknown(t *testing.T) {
	t.Parallel()
	top := t.TempDir()
	if err := os.MkdirAll(filepath.Join(top, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(top, "x", "history.json"), []byte(`{"versions":[{"version":"outside","state":"current"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	rig := newRegRig(t, host.RegistryConfig{Rescan: time.Hour, HistoryDir: filepath.Join(top, "hist")}, 1)
	rig.write("svc.wasm", variant(t, "abi/ack", "v1"))
	rig.start()
	for _, name := range []string{"../x", `..\x`, ".hidden", "", "nope"} {
		if h, err := rig.r.History(name); !errors.Is(err, host.ErrUnknownModule) {
			t.Errorf("history of %q: %+v, %v; want ErrUnknownModule", name, h, err)
		}
	}
	if h, err := rig.r.History("svc"); err != nil || len(h) != 1 {
		t.Errorf("history of svc: %+v, %v", h, err)
	}
}

// TestCorruptHistoryIsMovedAside: a module's history.json that does not parse is kept
// aside for an operator, not overwritten by the next save.
func TestCorruptHistoryIsMovedAside(t *testing.T) {
	t.Parallel()
	histDir := t.TempDir()
	corrupt := []byte(`{"versions": [ not json`)
	if err := os.MkdirAll(filepath.Join(histDir, "svc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(histDir, "svc", "history.json"), corrupt, 0o644); err != nil {
		t.Fatal(err)
	}
	rig := newRegRig(t, host.RegistryConfig{Rescan: time.Hour, HistoryDir: histDir}, 1)
	rig.write("svc.wasm", variant(t, "abi/ack", "v1"))
	rig.start()
	if h, err := rig.r.History("svc"); err != nil || len(h) != 1 {
		t.Fatalf("history of svc: %+v, %v; want the version loaded", h, err)
	}
	bad, _ := filepath.Glob(filepath.Join(histDir, "svc", "history.json.bad-*"))
	if len(bad) != 1 {
		t.Fatalf("files moved aside: %v, want one", bad)
	}
	if got, _ := os.ReadFile(bad[0]); string(got) != string(corrupt) {
		t.Fatalf("%s holds %q, want the corrupt file", bad[0], got)
	}
}

// TestFailedRollbackChangesNothing: a rollback to a version that cannot be loaded fails
// before it touches the canary under way or the pin.
func TestFailedRollbackChangesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	histDir := t.TempDir()
	rig := newRegRig(t, host.RegistryConfig{Rescan: time.Hour, HistoryDir: histDir, Rollout: host.Rollout{Strategy: host.StrategyCanary, CanaryTime: time.Hour}}, 1)
	v1, v2, v3 := variant(t, "abi/ack", "v1"), variant(t, "abi/ack", "v2"), variant(t, "abi/ack", "v3")
	rig.write("svc.wasm", v1)
	rig.start()
	rig.promoteFiles(v2, "the canary of v2")
	rig.write("svc.wasm", v3)
	rig.waitFor("the canary of v3", func() bool { return rig.status("svc").Canary != nil })
	if err := os.Remove(filepath.Join(histDir, "svc", host.Version(v1)+".wasm")); err != nil {
		t.Fatal(err)
	}
	if p, err := rig.r.Rollback(ctx, "svc", host.Version(v1)); err == nil {
		t.Fatalf("rollback to a version whose bytes are gone: %+v", p)
	}
	st := rig.status("svc")
	if st.Version != host.Version(v2) || st.Canary == nil || st.Canary.Version != host.Version(v3) || st.Pinned != nil || st.LastRollout != nil && st.LastRollout.Version == host.Version(v3) {
		t.Fatalf("status %+v after a failed rollback, want v3 still on trial beside v2, no pin", st)
	}
}
