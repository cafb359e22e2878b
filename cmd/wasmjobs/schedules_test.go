package main

import (
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
)

var firedLine = regexp.MustCompile(`msg="schedule fired" schedule="?([^"]+?)"? tick=(\S+) id=(\S+)`)

// fires returns the ticks a host's log says it fired for schedule, in order.
func fires(h *hostProc, schedule string) []time.Time {
	var out []time.Time
	for _, m := range firedLine.FindAllStringSubmatch(h.log(), -1) {
		if m[1] != schedule {
			continue
		}
		tick, err := time.Parse(time.RFC3339Nano, m[2])
		if err != nil {
			h.t.Fatalf("tick %q: %v", m[2], err)
		}
		out = append(out, tick)
	}
	return out
}

// TestSchedulesLeaderOnRabbitMQ runs two hosts (the real binary) with the same
// every-second schedule on the real broker: only the leader fires, each tick once;
// SIGKILL of the leader hands the schedule to the other within a few seconds, which
// continues from the last tick the token carried, with at most one duplicate.
func TestSchedulesLeaderOnRabbitMQ(t *testing.T) {
	t.Parallel()
	url := brokerURL(t)
	dir := t.TempDir()
	name := "tick-" + uniqueSuffix()
	installModule(t, dir, "abi/echo", name, "1")
	manifest := "[[schedule]]\nname = \"every-second\"\ncron = \"@every 1s\"\npayload = \"tick\"\noverlap = \"allow\"\n"
	writeManifest(t, dir, name, manifest)
	key := name + "/every-second"
	a := startHost(t, dir, "--backend", url)
	waitFor(t, "the first host to fire", func() bool { return len(fires(a, key)) > 0 })
	b := startHost(t, dir, "--backend", url)
	time.Sleep(4 * time.Second) // both up: four ticks or so, all from a

	leader, follower := a, b
	if len(fires(b, key)) > 0 {
		t.Fatalf("both hosts fire:\nA: %v\nB: %v", fires(a, key), fires(b, key))
	}
	r := wasmjobs(t, "", "schedules", "list", "--server", follower.url)
	if r.code != 0 || !strings.Contains(r.stdout, key) || !strings.Contains(r.stdout, "false") {
		t.Fatalf("schedules list on the follower: %d %q %s", r.code, r.stdout, r.stderr)
	}
	before := fires(leader, key)
	killed := time.Now()
	leader.cmd.Process.Signal(syscall.SIGKILL)
	<-leader.done
	waitFor(t, "the follower to fire", func() bool { return len(fires(follower, key)) > 0 })
	took := time.Since(killed)
	t.Logf("takeover: the first tick fired %v after SIGKILL of the leader", took.Round(10*time.Millisecond))
	if took > 5*time.Second {
		t.Errorf("takeover took %v, want a few seconds", took)
	}
	time.Sleep(3 * time.Second)
	after := fires(follower, key)

	// Each tick once on each host, consecutive seconds, at most one tick on both.
	for _, ticks := range [][]time.Time{before, after} {
		for i := 1; i < len(ticks); i++ {
			if ticks[i].Sub(ticks[i-1]) != time.Second {
				t.Errorf("ticks not one second apart (a repeat or a gap): %v", ticks)
				break
			}
		}
	}
	dups := 0
	for _, tick := range after {
		if slices.ContainsFunc(before, tick.Equal) {
			dups++
		}
	}
	if dups > 1 {
		t.Errorf("%d ticks fired by both hosts, want at most one:\nleader: %v\nfollower: %v", dups, before, after)
	}
	// The follower continued from the token: its first tick is the leader's last (a
	// duplicate) or the one after it, or the newest one missed during the handover.
	if len(before) < 4 || len(after) < 3 || after[0].Before(before[len(before)-1]) {
		t.Errorf("leader fired %v, follower %v", before, after)
	}
	var list struct {
		Schedules []struct {
			Name   string
			Last   time.Time
			Next   time.Time
			LastID string `json:"last_id"`
			Firing bool
		}
	}
	follower.get("/v1/schedules", &list)
	if len(list.Schedules) != 1 || list.Schedules[0].Name != key || !list.Schedules[0].Firing || list.Schedules[0].Last.IsZero() ||
		!list.Schedules[0].Next.After(list.Schedules[0].Last) || list.Schedules[0].LastID != backend.ScheduleID(key, list.Schedules[0].Last) {
		t.Errorf("GET /v1/schedules on the new leader: %+v", list)
	}
}

// TestSchedulesSurviveRestartOnPebble runs the real binary on the default backend: a
// host stopped and started again on its data directory neither repeats a tick nor loses
// one (the tick missed while it was down fires once at start), and the jobs run.
func TestSchedulesSurviveRestartOnPebble(t *testing.T) {
	t.Parallel()
	dir, data := t.TempDir(), t.TempDir()
	installModule(t, dir, "abi/echo", "tick", "1")
	manifest := "[[schedule]]\ncron = \"@every 1s\"\npayload = \"tick\"\n"
	writeManifest(t, dir, "tick", manifest)
	key := "tick/@every 1s"
	a := startHost(t, dir, "--data-dir", data)
	waitFor(t, "three ticks", func() bool { return len(fires(a, key)) >= 3 })
	a.stop()
	stopped := time.Now()
	first := fires(a, key)
	time.Sleep(1500 * time.Millisecond) // at least one tick while down
	b := startHost(t, dir, "--data-dir", data)
	waitFor(t, "three ticks after the restart", func() bool { return len(fires(b, key)) >= 3 })
	second := fires(b, key)
	all := append(slices.Clone(first), second...)
	for i := 1; i < len(all); i++ {
		if !all[i].After(all[i-1]) {
			t.Fatalf("a tick repeated across the restart: before %v, after %v", first, second)
		}
	}
	// The first tick after the restart is the newest one missed while down (catch_up),
	// so the one after the last fired may be skipped, but not one fired while running.
	if !second[0].After(stopped.Add(-time.Second)) || second[1].Sub(second[0]) != time.Second {
		t.Errorf("after the restart at %v: ticks %v (before: %v)", stopped, second, first)
	}
	if m := firedLine.FindStringSubmatch(b.log()); m == nil || !strings.Contains(b.log(), m[0]+" queue=tick why=catch-up") {
		t.Errorf("the first tick after the restart is not the catch-up of the one missed while down:\n%s", b.log())
	}
	var st jobState
	for _, tick := range []time.Time{first[0], second[0]} {
		id := backend.ScheduleID(key, tick)
		waitFor(t, "the tick's job to run", func() bool { b.get("/v1/jobs/"+id, &st); return st.State == "succeeded" })
		if st.Output != "tick" {
			t.Errorf("job %s of tick %v: %+v", id, tick, st)
		}
	}
	r := wasmjobs(t, "", "schedules", "list", "--server", b.url)
	if r.code != 0 || !strings.Contains(r.stdout, key) || !strings.Contains(r.stdout, "true") {
		t.Errorf("schedules list: %d %q %s", r.code, r.stdout, r.stderr)
	}
	b.stop()
}
