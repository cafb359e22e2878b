package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/host"
)

// canaryManifest keeps retries quick, so that a job a canary failed runs again at once.
const canaryManifest = `
max_attempts = 3
backoff_base = "1ms"
backoff_cap = "1ms"

[rollout]
strategy = "canary"
%s
`

// canary writes man and cur as the module svc's files, starts the rig, and puts next
// on trial: it returns once the canary is under way.
func (rig *regRig) canary(man string, cur, next []byte) {
	rig.t.Helper()
	rig.write("svc.toml", []byte(man))
	rig.write("svc.wasm", cur)
	rig.start()
	rig.write("svc.wasm", next)
	rig.waitFor("the canary", func() bool { return len(rig.eventsOf("canary")) == 1 })
}

// newTrapCanaryRig returns a started rig whose module svc serves a version that acks,
// with one that traps on trial under the rollout settings ro; and their versions.
func newTrapCanaryRig(t *testing.T, ro string) (rig *regRig, goodV, trapV string) {
	t.Helper()
	rig = newRegRig(t, host.RegistryConfig{Rescan: time.Hour}, 4)
	man := fmt.Sprintf(canaryManifest, ro)
	good, trap := variant(t, "abi/ack", "v1"), testdataModule(t, "hostile/trap")
	rig.canary(man, good, trap)
	return rig, host.VersionOf(good, []byte(man)), host.VersionOf(trap, []byte(man))
}

// promoteFiles writes wasm as svc's module, waits for its canary (what names it) and
// promotes it by hand.
func (rig *regRig) promoteFiles(wasm []byte, what string) {
	rig.t.Helper()
	rig.write("svc.wasm", wasm)
	rig.waitFor(what, func() bool { return rig.status("svc").Canary != nil })
	if _, err := rig.r.Promote(context.Background(), "svc"); err != nil {
		rig.t.Fatal(err)
	}
}

// publishIDs publishes jobs with the given ids and payload.
func (rig *regRig) publishIDs(queue string, payload string, ids ...string) {
	rig.t.Helper()
	for _, id := range ids {
		env := backend.NewEnvelope(queue, []byte(payload))
		env.ID = id
		if err := rig.b.Publish(context.Background(), env, 0); err != nil {
			rig.t.Fatal(err)
		}
	}
}

func jobIDs(prefix string, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%05d", prefix, i)
	}
	return ids
}

// acks counts the jobs settled with an ack.
func (rig *regRig) acks() int {
	rig.mu.Lock()
	defer rig.mu.Unlock()
	n := 0
	for _, j := range rig.settled {
		if j.settle == "ack" {
			n++
		}
	}
	return n
}

// TestCanaryTrapRolledBack swaps in a version that traps on every job while jobs flow:
// it takes its share of the jobs (those whose id hashes below canary_percent), each
// of them at most once; once canary_min_jobs of them have failed it is rolled back by
// itself, and the reason with both rates is in the module's status; every job, allowed
// three attempts, still succeeds on the current version; and it takes no job after.
func TestCanaryTrapRolledBack(t *testing.T) {
	t.Parallel()
	rig, goodV, trapV := newTrapCanaryRig(t, "canary_percent = 10\ncanary_min_jobs = 20\ncanary_jobs = 1000\ncanary_time = \"1h\"")
	if st := rig.status("svc"); st.Version != goodV || st.Canary == nil || st.Canary.Version != trapV || st.Canary.Percent != 10 {
		t.Fatalf("status %+v, want %s serving and %s on trial", st, goodV, trapV)
	}

	const n = 1000
	ids := jobIDs("job", n)
	rig.publishIDs("svc", "x", ids...)
	rig.waitFor("the rollback", func() bool { return len(rig.eventsOf(host.VerdictRolledBack)) == 1 })
	rolledBack := rig.eventsOf(host.VerdictRolledBack)[0]
	rig.waitFor("every job", func() bool { return rig.acks() == n })

	st := rig.status("svc")
	if st.Version != goodV || st.Canary != nil || st.LastRollout == nil || st.Pinned == nil || st.Pinned.FileVersion != trapV {
		t.Fatalf("status %+v after the rollback, want %s serving, no canary, the verdict, and a pin holding %s back", st, goodV, trapV)
	}
	v := st.LastRollout
	if v.Kind != host.VerdictRolledBack || v.Version != trapV || v.CanaryJobs != 20 || v.CanaryFailureRate != 1 || v.CurrentFailureRate != 0 ||
		!strings.Contains(v.Reason, "canary failure rate 1.000 (20 of 20 jobs), current 0.000") {
		t.Fatalf("verdict %+v, want rolled back after 20 jobs with both rates in the reason", v)
	}
	js, _ := json.Marshal(st)
	if !strings.Contains(string(js), `"canary_failure_rate":1`) || !strings.Contains(string(js), `"current_failure_rate":0`) {
		t.Fatalf("status JSON %s lacks the rates", js)
	}

	rig.mu.Lock()
	onTrap := map[string]int{}
	firstStart := map[string]time.Time{}
	for _, j := range rig.settled {
		if j.version == trapV {
			onTrap[j.id]++
			if j.settle != "retry" {
				t.Errorf("job %s settled %s on the canary, want a retry", j.id, j.settle)
			}
		} else if j.version != goodV {
			t.Errorf("job %s ran on %s", j.id, j.version)
		}
		if f, ok := firstStart[j.id]; !ok || j.start.Before(f) {
			firstStart[j.id] = j.start
		}
	}
	rig.mu.Unlock()
	// The split is by the id's hash: only jobs of the canary's buckets ran on it, once.
	for id, k := range onTrap {
		if host.CanaryBucket(id) >= 10 || k != 1 {
			t.Errorf("job %s (bucket %d) ran %d times on the canary", id, host.CanaryBucket(id), k)
		}
	}
	// canary_min_jobs, and at most the three others running beside the twentieth.
	if len(onTrap) < 20 || len(onTrap) > 23 {
		t.Errorf("%d jobs ran on the canary, want canary_min_jobs (20) and at most 3 in flight: it was not rolled back at once", len(onTrap))
	}
	// Its share of the window: the jobs whose first attempt started before the rollback.
	window := 0
	for _, at := range firstStart {
		if at.Before(rolledBack.seen) {
			window++
		}
	}
	share := float64(len(onTrap)) / float64(window)
	t.Logf("the canary ran %d of the %d jobs of its window: %.3f (canary_percent 10)", len(onTrap), window, share)
	if share < 0.04 || share > 0.16 {
		t.Errorf("the canary's share of its window was %.3f, want 0.10 within 0.06", share)
	}

	// Rolled back: it takes no job any more, not even those of its buckets.
	var mine []string
	for _, id := range jobIDs("after", 400) {
		if host.CanaryBucket(id) < 10 {
			mine = append(mine, id)
		}
	}
	rig.publishIDs("svc", "x", mine...)
	rig.waitFor("the jobs after", func() bool { return rig.acks() == n+len(mine) })
	rig.mu.Lock()
	for _, j := range rig.settled {
		if strings.HasPrefix(j.id, "after-") && j.version != goodV {
			t.Errorf("job %s ran on %s after the rollback", j.id, j.version)
		}
	}
	rig.mu.Unlock()
	// The rolled-back files stay held back: a read of the directory changes nothing.
	rig.quiesce()
	if st := rig.status("svc"); st.Version != goodV || st.Canary != nil {
		t.Fatalf("status %+v after a read of the directory", st)
	}
}

// TestCanaryGoodPromoted swaps in a good version: after canary_jobs jobs it is promoted,
// and from then on every new job runs on it.
func TestCanaryGoodPromoted(t *testing.T) {
	t.Parallel()
	testCanaryPromoted(t, variant(t, "abi/ack", "v2"), "x")
}

// TestCanarySlowPromoted swaps in a version that is slower (it sleeps 20 ms a job)
// but correct: slowness is not failure, and it is promoted.
func TestCanarySlowPromoted(t *testing.T) {
	t.Parallel()
	testCanaryPromoted(t, testdataModule(t, "abi/sleep_ms"), "20")
}

func testCanaryPromoted(t *testing.T, next []byte, payload string) {
	rig := newRegRig(t, host.RegistryConfig{Rescan: time.Hour}, 4)
	man := fmt.Sprintf(canaryManifest, "canary_percent = 50\ncanary_min_jobs = 10\ncanary_jobs = 30\ncanary_time = \"1h\"")
	nextV := host.VersionOf(next, []byte(man))
	rig.canary(man, variant(t, "abi/ack", "v1"), next)
	// Jobs flow until the promotion.
	sent := 0
	for len(rig.eventsOf(host.VerdictPromoted)) == 0 {
		if sent > 2000 {
			t.Fatalf("no promotion after %d jobs; status %+v", sent, rig.status("svc"))
		}
		rig.publishIDs("svc", payload, jobIDs(fmt.Sprintf("before%d", sent), 10)...)
		sent += 10
		rig.waitFor("the jobs", func() bool { return rig.acks() == sent })
	}
	st := rig.status("svc")
	if st.Version != nextV || st.Canary != nil || st.LastRollout == nil || st.LastRollout.Kind != host.VerdictPromoted ||
		st.LastRollout.CanaryJobs != 30 || st.LastRollout.CanaryFailureRate != 0 {
		t.Fatalf("status %+v, want %s promoted after 30 jobs without a failure", st, nextV)
	}
	rig.publishIDs("svc", payload, jobIDs("after", 100)...)
	rig.waitFor("the jobs after", func() bool { return rig.acks() == sent+100 })
	rig.mu.Lock()
	defer rig.mu.Unlock()
	for _, j := range rig.settled {
		if strings.HasPrefix(j.id, "after-") && j.version != nextV {
			t.Errorf("job %s ran on %s after the promotion, want %s", j.id, j.version, nextV)
		}
	}
}

// TestManualRollbackPromoteHistorySurviveRestart: an operator promotes a canary, rolls
// back to the version before (pinned, the files untouched), and the pin holds after a
// restart (a new registry on the same history); the next change of the files starts a
// canary from the pinned version.
func TestManualRollbackPromoteHistorySurviveRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	histDir := t.TempDir()
	rig := newRegRig(t, host.RegistryConfig{Rescan: time.Hour, HistoryDir: histDir, Rollout: host.Rollout{Strategy: host.StrategyCanary}}, 4)
	v1, v2, v3 := variant(t, "abi/ack", "v1"), variant(t, "abi/ack", "v2"), variant(t, "abi/ack", "v3")
	rig.write("svc.wasm", v1)
	rig.start()
	if _, err := rig.r.Promote(ctx, "svc"); !errors.Is(err, host.ErrNoCanary) {
		t.Fatalf("promote without a canary: %v, want ErrNoCanary", err)
	}
	rig.write("svc.wasm", v2)
	rig.waitFor("the canary", func() bool { return rig.status("svc").Canary != nil })
	if v, err := rig.r.Promote(ctx, "svc"); err != nil || v.Kind != host.VerdictPromoted {
		t.Fatalf("promote: %+v, %v", v, err)
	}
	if st := rig.status("svc"); st.Version != host.Version(v2) || st.Canary != nil {
		t.Fatalf("status %+v after the promotion", st)
	}
	hist, err := rig.r.History("svc")
	if err != nil || len(hist) != 2 || hist[0].Version != host.Version(v2) || hist[0].State != host.HistoryCurrent ||
		hist[1].Version != host.Version(v1) || hist[1].State != host.HistoryPrevious {
		t.Fatalf("history %+v, %v; want v2 current, v1 previous", hist, err)
	}
	p, err := rig.r.Rollback(ctx, "svc", "")
	if err != nil || p.Version != host.Version(v1) || p.FileVersion != host.Version(v2) {
		t.Fatalf("rollback: %+v, %v", p, err)
	}
	if st := rig.status("svc"); st.Version != host.Version(v1) || st.Pinned == nil {
		t.Fatalf("status %+v after the rollback", st)
	}
	if got, _ := os.ReadFile(filepath.Join(rig.dir, "svc.wasm")); string(got) != string(v2) {
		t.Fatal("the rollback edited the module's file")
	}
	if _, err := rig.r.Rollback(ctx, "svc", "nosuchversion"); !errors.Is(err, host.ErrUnknownVersion) {
		t.Fatalf("rollback to an unknown version: %v", err)
	}
	rig.quiesce() // a read of the unchanged files keeps the pin
	if st := rig.status("svc"); st.Version != host.Version(v1) {
		t.Fatalf("status %+v after a read of the directory", st)
	}
	rig.stopWorker()
	rig.r.Retire()

	// A restart: a new worker and registry on the same directory and history.
	rig2 := newRegRig(t, host.RegistryConfig{Rescan: time.Hour, HistoryDir: histDir, Rollout: host.Rollout{Strategy: host.StrategyCanary}}, 4)
	rig2.dir = rig.dir
	r2, err := host.NewRegistry(host.RegistryConfig{Dir: rig.dir, Engine: newEngine(t), Queues: rig2.w, Rescan: time.Hour, HistoryDir: histDir})
	if err != nil {
		t.Fatal(err)
	}
	rig2.r = r2
	rig2.start()
	defer func() { r2.Close(); rig2.stopWorker(); r2.Retire() }()
	if st := rig2.status("svc"); st.Version != host.Version(v1) || st.Pinned == nil || st.Canary != nil {
		t.Fatalf("status %+v after the restart, want the pinned v1", st)
	}
	hist, _ = r2.History("svc")
	if len(hist) != 2 || !hist[1].Pinned {
		t.Fatalf("history %+v after the restart", hist)
	}
	rig2.write("svc.wasm", v3)
	rig2.waitFor("a canary from the pinned version", func() bool { return rig2.status("svc").Canary != nil })
	if st := rig2.status("svc"); st.Version != host.Version(v1) || st.Canary.Version != host.Version(v3) || st.Pinned != nil {
		t.Fatalf("status %+v, want v3 on trial beside v1, the pin gone", st)
	}
	// Roll back to a version named by a prefix: the canary ends, v2 serves.
	if p, err := r2.Rollback(ctx, "svc", host.Version(v2)[:8]); err != nil || p.Version != host.Version(v2) {
		t.Fatalf("rollback to v2: %+v, %v", p, err)
	}
	if st := rig2.status("svc"); st.Version != host.Version(v2) || st.Canary != nil {
		t.Fatalf("status %+v after the rollback to v2", st)
	}
}
