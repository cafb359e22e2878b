package host_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/wasmjobs/wasmjobs/host"
)

// savedCanaryJobs returns the canary jobs the module's history.json in histDir keeps
// (-1 while it keeps no canary).
func savedCanaryJobs(t *testing.T, histDir, name string) int {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(histDir, name, "history.json"))
	if err != nil {
		return -1
	}
	var h struct {
		Canary *struct{ Jobs int } `json:"canary"`
	}
	if err := json.Unmarshal(data, &h); err != nil || h.Canary == nil {
		return -1
	}
	return h.Canary.Jobs
}

// savedCanaryRan returns how long the canary kept in the module's history.json in
// histDir had run when it was saved (-1 while it keeps no canary).
func savedCanaryRan(t *testing.T, histDir, name string) time.Duration {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(histDir, name, "history.json"))
	if err != nil {
		return -1
	}
	var h struct {
		Canary *struct{ Ran time.Duration } `json:"canary"`
	}
	if err := json.Unmarshal(data, &h); err != nil || h.Canary == nil {
		return -1
	}
	return h.Canary.Ran
}

// newMidCanaryRig returns a rig whose module svc (manifest man) serves v1 with v2 on
// trial, the canary having counted jobs jobs, with a history directory; and the
// config that a restart on the same directories takes.
func newMidCanaryRig(t *testing.T, man string, v1, v2 []byte, jobs int) (*regRig, host.RegistryConfig) {
	t.Helper()
	cfg := host.RegistryConfig{Rescan: time.Hour, HistoryDir: t.TempDir(), Rollout: host.Rollout{Strategy: host.StrategyCanary}}
	rig := newRegRig(t, cfg, 4)
	rig.canary(man, v1, v2)
	rig.publishIDs("svc", "x", jobIDs("before", jobs)...)
	rig.waitFor("the jobs before the restart", func() bool {
		cs := rig.status("svc").Canary
		return cs != nil && cs.Jobs == jobs
	})
	return rig, cfg
}

// TestIdleCanarySavesItsRunTime: a canary that counts no job still has the time it ran
// saved while it runs (every canary_time/20, at most 10 s apart), so that a kill of
// the host loses seconds of it, not all of it since the last job. Virtual time.
func TestIdleCanarySavesItsRunTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		e := newEngine(t)
		dir, histDir := t.TempDir(), t.TempDir()
		write := func(name string, data []byte) {
			if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		// canary_time 1h: saved every 10 s.
		write("svc.toml", []byte(fmt.Sprintf(canaryManifest, "canary_time = \"1h\"")))
		write("svc.wasm", variant(t, "abi/ack", "v1"))
		r, err := host.NewRegistry(host.RegistryConfig{Dir: dir, Engine: e, Queues: quietQueues{}, NoWatch: true,
			Rescan: time.Hour, HistoryDir: histDir})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Start(ctx); err != nil {
			t.Fatal(err)
		}
		defer r.Retire()
		defer r.Close()
		write("svc.wasm", variant(t, "abi/ack", "v2"))
		r.Sync(ctx)
		if host.CanaryOf(r.Handler("svc")) == nil {
			t.Fatal("no canary of the new version")
		}
		time.Sleep(35 * time.Second)
		synctest.Wait()
		// What a kill leaves now: the time the last save took, 30 s at least.
		if ran := savedCanaryRan(t, histDir, "svc"); ran < 30*time.Second {
			t.Fatalf("after 35 s with no job, the history keeps a canary that ran %v, want 30s or more", ran)
		}
	})
}

// TestCanaryResumesAfterARestart: a canary under way when the registry stops (a drain:
// Close then Retire; or a crash: nothing more done than what was saved while it ran)
// is under way again after a restart (a new registry on the same directory and
// history): the version before serves, the new one is on trial with the counts and
// start it had, and its trial goes on from them (promoted at canary_jobs counting the
// jobs before the restart). When the version before is gone from the history, the
// trial cannot resume: the log says so, and the files serve at once.
func TestCanaryResumesAfterARestart(t *testing.T) {
	t.Parallel()
	const before, canaryJobs = 20, 30
	man := fmt.Sprintf(canaryManifest, fmt.Sprintf("canary_percent = 100\ncanary_min_jobs = 5\ncanary_jobs = %d\ncanary_time = \"1h\"", canaryJobs))
	v1, v2, v3 := variant(t, "abi/ack", "v1"), variant(t, "abi/ack", "v2"), variant(t, "abi/ack", "v3")
	v1V, v2V, v3V := host.VersionOf(v1, []byte(man)), host.VersionOf(v2, []byte(man)), host.VersionOf(v3, []byte(man))
	for _, c := range []struct {
		name string
		stop func(t *testing.T, rig *regRig, histDir string)
		// resumes: the trial goes on after the restart; changed: the files changed
		// while the host was down (to v3), which go on trial beside v1; else the files
		// serve at once, with the log line wantLog.
		resumes, changed bool
		wantLog          string
	}{
		{name: "drain", resumes: true, stop: func(t *testing.T, rig *regRig, _ string) {
			rig.drain()
		}},
		{name: "crash", resumes: true, stop: func(t *testing.T, rig *regRig, histDir string) {
			// What a SIGKILL leaves: the state saved while the canary ran, no more.
			rig.waitFor("the counts saved", func() bool { return savedCanaryJobs(t, histDir, "svc") == before })
			rig.r.Close()
			rig.stopWorker()
		}},
		{name: "files changed while down", changed: true, stop: func(t *testing.T, rig *regRig, _ string) {
			rig.drain()
			rig.write("svc.wasm", v3)
		}},
		{name: "version before gone", wantLog: "a canary under way when the host stopped cannot resume", stop: func(t *testing.T, rig *regRig, histDir string) {
			rig.drain()
			if err := os.Remove(filepath.Join(histDir, "svc", v1V+".wasm")); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			rig, cfg := newMidCanaryRig(t, man, v1, v2, before)
			histDir := cfg.HistoryDir
			started := rig.status("svc").Canary.StartedAt
			c.stop(t, rig, histDir)

			var logs logBuffer
			cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			rig2 := newRegRigOn(t, rig.dir, cfg, 4)
			rig2.start()
			st := rig2.status("svc")
			if c.changed {
				hist, _ := rig2.r.History("svc")
				if st.Version != v1V || st.Canary == nil || st.Canary.Version != v3V || st.Canary.Jobs != 0 ||
					len(hist) != 3 || hist[1].Version != v2V || hist[1].State != host.HistorySuperseded {
					t.Fatalf("status %+v (canary %+v), history %+v after the restart; want %s serving, the files' %s on trial from no jobs, %s superseded",
						st, st.Canary, hist, v1V, v3V, v2V)
				}
				return
			}
			if !c.resumes {
				if st.Version != v2V || st.Canary != nil || !strings.Contains(logs.String(), c.wantLog) {
					t.Fatalf("status %+v after the restart, want the files' %s serving at once and the log to say %q; log:\n%s", st, v2V, c.wantLog, logs.String())
				}
				return
			}
			if st.Version != v1V || st.Canary == nil || st.Canary.Version != v2V || st.Canary.Jobs != before ||
				st.Canary.CurrentJobs != 0 || !st.Canary.StartedAt.Equal(started) {
				t.Fatalf("status %+v (canary %+v) after the restart, want %s serving and %s on trial with its %d jobs, started at %v",
					st, st.Canary, v1V, v2V, before, started)
			}
			rig2.publishIDs("svc", "x", jobIDs("after", canaryJobs-before)...)
			rig2.waitFor("the promotion", func() bool { return len(rig2.eventsOf(host.VerdictPromoted)) == 1 })
			v := rig2.eventsOf(host.VerdictPromoted)[0].Verdict
			if v.Version != v2V || v.Current != v1V || v.CanaryJobs != canaryJobs {
				t.Fatalf("verdict %+v, want %s promoted over %s after %d jobs, those before the restart counted", v, v2V, v1V, canaryJobs)
			}
			hist, err := rig2.r.History("svc")
			if err != nil || len(hist) != 2 || hist[0].Version != v2V || hist[0].State != host.HistoryCurrent || hist[1].State != host.HistoryPrevious {
				t.Fatalf("history %+v, %v; want v2 current, v1 previous", hist, err)
			}
			if n := savedCanaryJobs(t, histDir, "svc"); n != -1 {
				t.Fatalf("history.json keeps a canary (%d jobs) after its promotion", n)
			}
		})
	}
}

// TestCanaryResumeWaitsOutATransientLoadError: when the version a canary ran against
// cannot be loaded at a restart for a reason other than its absence from the history
// (here its kept bytes cannot be read), the trial is not given up: nothing serves, the
// status says why, the history keeps the trial, and the next read of the directory,
// once the version loads, resumes it with its counts. The untried version never
// serves all the jobs.
func TestCanaryResumeWaitsOutATransientLoadError(t *testing.T) {
	t.Parallel()
	const before = 10
	man := fmt.Sprintf(canaryManifest, "canary_percent = 100\ncanary_min_jobs = 5\ncanary_jobs = 1000\ncanary_time = \"1h\"")
	v1, v2 := variant(t, "abi/ack", "v1"), variant(t, "abi/ack", "v2")
	v1V, v2V := host.VersionOf(v1, []byte(man)), host.VersionOf(v2, []byte(man))
	rig, cfg := newMidCanaryRig(t, man, v1, v2, before)
	histDir := cfg.HistoryDir
	rig.drain()

	// The kept bytes of v1 cannot be read (a directory where the file was): an I/O
	// error, not a version missing from the history.
	blob := filepath.Join(histDir, "svc", v1V+".wasm")
	kept := mustRead(t, blob)
	if err := os.Remove(blob); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(blob, 0o755); err != nil {
		t.Fatal(err)
	}
	rig2 := newRegRigOn(t, rig.dir, cfg, 4)
	rig2.start()
	st := rig2.status("svc")
	if st.Status != "rejected" || st.Version != "" || st.Canary != nil || !strings.Contains(st.Error, "is a directory") {
		t.Fatalf("status %+v after a restart whose version before cannot be read, want nothing serving and the error", st)
	}
	if n := savedCanaryJobs(t, histDir, "svc"); n != before {
		t.Fatalf("history.json keeps a canary of %d jobs, want the trial kept with its %d", n, before)
	}
	if err := os.Remove(blob); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(blob, kept, 0o644); err != nil {
		t.Fatal(err)
	}
	rig2.r.Sync(context.Background())
	st = rig2.status("svc")
	if st.Status != "serving" || st.Error != "" || st.Version != v1V || st.Canary == nil || st.Canary.Version != v2V || st.Canary.Jobs != before {
		t.Fatalf("status %+v (canary %+v) once the version before reads again, want %s serving and %s on trial with its %d jobs",
			st, st.Canary, v1V, v2V, before)
	}
}

// TestCanaryOfAModuleRemovedWhileDownIsOver: a module whose files were removed while
// the host was down has its canary ended in the history at the first read of the
// directory (recorded as superseded, as a removal while the host runs does), so that
// files put back months later do not resume that trial: they serve as a new module's.
func TestCanaryOfAModuleRemovedWhileDownIsOver(t *testing.T) {
	t.Parallel()
	const before = 10
	man := fmt.Sprintf(canaryManifest, "canary_percent = 100\ncanary_min_jobs = 5\ncanary_jobs = 1000\ncanary_time = \"1h\"")
	v1, v2 := variant(t, "abi/ack", "v1"), variant(t, "abi/ack", "v2")
	v2V := host.VersionOf(v2, []byte(man))
	rig, cfg := newMidCanaryRig(t, man, v1, v2, before)
	histDir := cfg.HistoryDir
	rig.drain()
	for _, f := range []string{"svc.wasm", "svc.toml"} {
		if err := os.Remove(filepath.Join(rig.dir, f)); err != nil {
			t.Fatal(err)
		}
	}

	rig2 := newRegRigOn(t, rig.dir, cfg, 4)
	rig2.start()
	if n := savedCanaryJobs(t, histDir, "svc"); n != -1 {
		t.Fatalf("history.json of a module removed while the host was down keeps its canary (%d jobs)", n)
	}
	data := mustRead(t, filepath.Join(histDir, "svc", "history.json"))
	var hist struct{ Versions []host.HistoryEntry }
	if err := json.Unmarshal(data, &hist); err != nil {
		t.Fatal(err)
	}
	if i := slices.IndexFunc(hist.Versions, func(e host.HistoryEntry) bool { return e.Version == v2V }); i < 0 || hist.Versions[i].State != host.HistorySuperseded {
		t.Fatalf("history %+v, want the canary %s superseded", hist.Versions, v2V)
	}
	rig2.write("svc.toml", []byte(man))
	rig2.write("svc.wasm", v2)
	rig2.r.Sync(context.Background())
	if st := rig2.status("svc"); st.Status != "serving" || st.Version != v2V || st.Canary != nil {
		t.Fatalf("status %+v (canary %+v) once the files are back, want %s serving with no trial", st, st.Canary, v2V)
	}
}
