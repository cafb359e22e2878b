package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

type moduleState struct {
	Modules []struct {
		Name, Version string
		Canary        *struct{ Version string }
		LastRollout   *struct {
			Kind, Version, Reason string
		} `json:"last_rollout"`
		Pinned *struct {
			Version     string
			FileVersion string `json:"file_version"`
		} `json:"pinned"`
	}
}

// TestRolloutThroughTheBinary runs the real binary on pebble: a version that traps on
// every job is rolled back by itself (the reason with both rates in /v1/modules), and
// every job still succeeds on the version before; the CLI shows the history, promotes
// a canary and rolls back to the version before, which stays pinned across a restart
// until the file changes, when a canary starts from it.
func TestRolloutThroughTheBinary(t *testing.T) {
	t.Parallel()
	dir, data := t.TempDir(), filepath.Join(t.TempDir(), "data")
	man := "max_attempts = 3\nbackoff_base = \"1ms\"\nbackoff_cap = \"1ms\"\n\n[rollout]\ncanary_percent = 100\ncanary_min_jobs = 5\ncanary_jobs = 1000\ncanary_time = \"1h\"\n"
	writeManifest(t, dir, "work", man)
	installModule(t, dir, "abi/sleep_ms", "work", "v1")
	h := startHost(t, dir, "--data-dir", data)
	var st moduleState
	get := func(path string, out *moduleState) { *out = moduleState{}; h.get(path, out) }
	get("/v1/modules", &st)
	v1 := st.Modules[0].Version
	cli := func(args ...string) string {
		t.Helper()
		r := wasmjobs(t, "", append(args, "--server", h.url)...)
		if r.code != 0 {
			t.Fatalf("wasmjobs %v: exit %d, %q %q", args, r.code, r.stdout, r.stderr)
		}
		return r.stdout
	}

	// A version that traps on every job: all jobs go to it (canary_percent 100), fail
	// once each, and run again on v1; after canary_min_jobs it is rolled back.
	installModule(t, dir, "hostile/trap", "work", "bad")
	waitFor(t, "the canary", func() bool { get("/v1/modules", &st); return st.Modules[0].Canary != nil })
	bad := st.Modules[0].Canary.Version
	ids := strings.Fields(cli("enqueue", "work", "", "--count", "10"))
	waitFor(t, "the rollback", func() bool { get("/v1/modules", &st); return st.Modules[0].LastRollout != nil })
	lr := st.Modules[0].LastRollout
	if lr.Kind != "rolled_back" || lr.Version != bad || !strings.Contains(lr.Reason, "canary failure rate 1.000 (5 of 5 jobs), current 0.000") ||
		st.Modules[0].Version != v1 || st.Modules[0].Pinned == nil {
		t.Fatalf("modules %+v (last rollout %+v), want %s rolled back with both rates, %s serving and pinned", st.Modules[0], *lr, bad, v1)
	}
	for _, id := range ids {
		var js jobState
		waitFor(t, "job "+id, func() bool { h.get("/v1/jobs/"+id, &js); return js.State == "succeeded" })
		if js.Module.Version != v1 {
			t.Fatalf("job %+v succeeded on %s, want %s", js, js.Module.Version, v1)
		}
	}
	if out := cli("modules", "list"); !strings.Contains(out, "rolled_back") || !strings.Contains(out, "canary failure rate 1.000") {
		t.Fatalf("modules list does not show the rollback:\n%s", out)
	}

	// A good version, promoted from the CLI; then rolled back from the CLI to v1.
	installModule(t, dir, "abi/sleep_ms", "work", "v2")
	waitFor(t, "the second canary", func() bool { get("/v1/modules", &st); return st.Modules[0].Canary != nil })
	v2 := st.Modules[0].Canary.Version
	cli("modules", "promote", "work")
	if get("/v1/modules", &st); st.Modules[0].Version != v2 || st.Modules[0].Pinned != nil {
		t.Fatalf("after promote: %+v", st.Modules[0])
	}
	if code, body := h.post("/v1/modules/work/promote", ""); code != 409 || !strings.Contains(body, "no canary") {
		t.Fatalf("promote without a canary: %d %s", code, body)
	}
	if out := cli("modules", "rollback", "work", "--to", v1[:10]); !strings.Contains(out, "serving "+v1) {
		t.Fatalf("rollback: %s", out)
	}
	if code, body := h.post("/v1/modules/work/rollback", `{"to": "0000000000"}`); code != 404 {
		t.Fatalf("rollback to an unknown version: %d %s", code, body)
	}
	hist := cli("modules", "history", "work")
	for _, want := range [][]string{{v1, "current", "pinned"}, {v2, "rolled_back", "by an operator"}, {bad, "rolled_back", "canary failure rate 1.000"}} {
		found := false
		for _, line := range strings.Split(hist, "\n") {
			f := strings.Fields(line)
			found = found || (len(f) > 2 && f[0] == want[0] && f[1] == want[1] && strings.Contains(line, want[2]))
		}
		if !found {
			t.Fatalf("history lacks a line %q:\n%s", want, hist)
		}
	}
	stopHost(t, h, syscall.SIGTERM)

	// A restart: the pin holds, the file (v2) is not served.
	h = startHost(t, dir, "--data-dir", data)
	get = func(path string, out *moduleState) { *out = moduleState{}; h.get(path, out) }
	if get("/v1/modules", &st); st.Modules[0].Version != v1 || st.Modules[0].Pinned == nil || st.Modules[0].Pinned.FileVersion != v2 {
		t.Fatalf("after the restart: %+v, want %s pinned over the files' %s", st.Modules[0], v1, v2)
	}
	var apiHist struct {
		Versions []struct {
			Version, State string
			Pinned         bool
		}
	}
	// Newest first: v2, the trap, v1 (current, pinned).
	if h.get("/v1/modules/work/history", &apiHist); len(apiHist.Versions) != 3 || apiHist.Versions[2].Version != v1 ||
		!apiHist.Versions[2].Pinned || apiHist.Versions[2].State != "current" || apiHist.Versions[0].Version != v2 {
		t.Fatalf("history after the restart: %+v", apiHist)
	}
	// The next change of the file starts a canary from the pinned version.
	installModule(t, dir, "abi/sleep_ms", "work", "v3")
	waitFor(t, "a canary from v1", func() bool { get("/v1/modules", &st); return st.Modules[0].Canary != nil })
	if st.Modules[0].Version != v1 || st.Modules[0].Pinned != nil {
		t.Fatalf("after the change: %+v", st.Modules[0])
	}
	stopHost(t, h, syscall.SIGTERM)
}

// TestCanaryResumesAcrossARestart runs the real binary on pebble: a canary under way
// when the host stops, drained by SIGTERM or killed by SIGKILL (once the counts were
// saved), is under way again after the restart: the version before serves, the new one
// is on trial with the counts and start it had, and counts on from them. After a kill
// the jobs whose settle the kill overtook (settles are not synced) run again, and
// count again: the counts are at least those before.
func TestCanaryResumesAcrossARestart(t *testing.T) {
	t.Parallel()
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			t.Parallel()
			const before, after = 8, 4
			dir, data := t.TempDir(), filepath.Join(t.TempDir(), "data")
			man := "[rollout]\ncanary_percent = 100\ncanary_jobs = 1000\ncanary_time = \"1h\"\n"
			writeManifest(t, dir, "work", man)
			installModule(t, dir, "abi/sleep_ms", "work", "v1")
			h := startHost(t, dir, "--data-dir", data)
			type canaryState struct {
				Modules []struct {
					Version string
					Canary  *struct {
						Version     string
						Jobs        int
						CurrentJobs int       `json:"current_jobs"`
						StartedAt   time.Time `json:"started_at"`
					}
				}
			}
			var st canaryState
			get := func() { st = canaryState{}; h.get("/v1/modules", &st) }
			get()
			v1 := st.Modules[0].Version
			installModule(t, dir, "abi/sleep_ms", "work", "v2")
			waitFor(t, "the canary", func() bool { get(); return st.Modules[0].Canary != nil })
			v2 := st.Modules[0].Canary.Version
			enqueue := func(n int) {
				t.Helper()
				if r := wasmjobs(t, "", "enqueue", "work", "", "--count", strconv.Itoa(n), "--server", h.url); r.code != 0 {
					t.Fatalf("enqueue: exit %d, %q", r.code, r.stderr)
				}
			}
			enqueue(before)
			waitFor(t, "the jobs before the restart", func() bool { get(); return st.Modules[0].Canary.Jobs == before })
			started := st.Modules[0].Canary.StartedAt
			if sig == syscall.SIGKILL {
				// A kill loses what was not saved yet: wait until the counts are.
				waitFor(t, "the counts saved", func() bool {
					b, err := os.ReadFile(filepath.Join(data, "module-history", "work", "history.json"))
					var saved struct{ Canary *struct{ Jobs int } }
					return err == nil && json.Unmarshal(b, &saved) == nil && saved.Canary != nil && saved.Canary.Jobs == before
				})
			}
			stopHost(t, h, sig)

			// atLeast: exactly n after a drain, n or more after a kill.
			atLeast := func(got, n int) bool { return got == n || (sig == syscall.SIGKILL && got > n) }
			h = startHost(t, dir, "--data-dir", data)
			get()
			if m := st.Modules[0]; m.Version != v1 || m.Canary == nil || m.Canary.Version != v2 || !atLeast(m.Canary.Jobs, before) ||
				m.Canary.CurrentJobs != 0 || !m.Canary.StartedAt.Equal(started) {
				t.Fatalf("after the restart: %+v (canary %+v), want %s serving and %s on trial with its %d jobs, started at %v",
					m, m.Canary, v1, v2, before, started)
			}
			if !strings.Contains(h.log(), "module canary resumed after a restart") {
				t.Fatalf("the log does not say the canary resumed:\n%s", h.log())
			}
			enqueue(after)
			waitFor(t, "the jobs after the restart", func() bool { get(); return atLeast(st.Modules[0].Canary.Jobs, before+after) })
			stopHost(t, h, syscall.SIGTERM)
		})
	}
}
