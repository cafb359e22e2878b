package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// rssMB reads a process's resident set size.
func rssMB(t *testing.T, pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n / 1024
		}
	}
	return 0
}

// TestHostileGuestsInALiveHost runs hostile modules inside `wasmjobs run` next to normal
// traffic: the host never panics, normal jobs keep flowing, each hostile job ends
// dead-lettered (after its retry) with the right reason, and memory stays bounded.
func TestHostileGuestsInALiveHost(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	hostile := []struct {
		module, manifest, payload, reason string
	}{
		{"loop", `timeout = "50ms"`, "", "timeout after 50ms"},
		{"sleep", `timeout = "50ms"`, "", "timeout after 50ms"},
		{"membomb", `memory = "4MiB"`, "", "trap: unreachable"},
		{"recursion", "", "", "trap: stack overflow"},
		{"oob", "", "g", "trap: invalid memory access in output_write"},
		{"exit", "", "2", "exit code 2"},
		{"trap", "", "", "trap: unreachable"},
		{"abort", "", "", "trap: abort: boom at a.ts:3:7"},
		{"invalid_code", "", "", "invalid outcome code 7"},
	}
	for _, h := range hostile {
		installModule(t, dir, "hostile/"+h.module, h.module, "1")
		writeManifest(t, dir, h.module, h.manifest+"\nmax_attempts = 2\nbackoff_base = \"10ms\"\nbackoff_cap = \"20ms\"\n")
	}
	installModule(t, dir, "hostile/logflood", "logflood", "1")
	installModule(t, dir, "hostile/outflood", "outflood", "1")
	writeManifest(t, dir, "outflood", `max_output = "256KiB"`)
	installModule(t, dir, "abi/echo", "echo", "1")
	host := startHost(t, dir, "--log-level", "info", "--concurrency", "8")
	rss0 := rssMB(t, host.cmd.Process.Pid)

	const each, normal = 20, 400
	var floods []string // the ids of the flood jobs, which must all succeed
	storm := func(round int) {
		for _, h := range hostile {
			n := each
			if h.module == "recursion" {
				n = 4 // a stack overflow grows the guest stack to 50 MB first
			}
			if r := wasmjobs(t, "", "enqueue", h.module, h.payload, "--count", strconv.Itoa(n), "-q", "--server", host.url); r.code != 0 {
				t.Fatalf("enqueue %s: %s", h.module, r.stderr)
			}
		}
		for _, flood := range []string{"logflood", "outflood"} {
			r := wasmjobs(t, "", "enqueue", flood, "x", "--count", strconv.Itoa(each), "--server", host.url)
			if ids := strings.Fields(r.stdout); r.code != 0 || len(ids) != each {
				t.Fatalf("enqueue %s: %d %s", flood, r.code, r.stderr)
			} else {
				floods = append(floods, ids...)
			}
		}
		for _, h := range hostile {
			want := each * round
			if h.module == "recursion" {
				want = 4 * round
			}
			var out struct {
				DeadLetters []struct{ Reason string } `json:"dead_letters"`
			}
			// Under load (and -race) the recursion's 50 MB stacks alone can take minutes:
			// the wait fails when the dead letters stop coming, not at a fixed time.
			waitForProgress(t, h.module+"'s dead letters", 120*time.Second, func() (int, bool) {
				host.get("/v1/dead-letters?queue="+h.module+"&limit=1000", &out)
				return len(out.DeadLetters), len(out.DeadLetters) == want
			})
			for _, d := range out.DeadLetters {
				if d.Reason != "max attempts (2) exceeded: "+h.reason {
					t.Fatalf("%s: dead letter reason %q, want the %q failure", h.module, d.Reason, h.reason)
				}
			}
		}
	}
	lines := ""
	for i := range normal {
		lines += fmt.Sprintf("normal job %d\n", i)
	}
	r := wasmjobs(t, lines, "enqueue", "echo", "-", "--lines", "--server", host.url)
	ids := strings.Fields(r.stdout)
	if r.code != 0 || len(ids) != normal {
		t.Fatalf("enqueue echo: %d %s", r.code, r.stderr)
	}
	storm(1)
	for i, id := range ids {
		var st jobState
		waitForLong(t, "normal job "+id, 120e9, func() bool { host.get("/v1/jobs/"+id, &st); return st.State == "succeeded" })
		if st.Output != fmt.Sprintf("normal job %d", i) {
			t.Fatalf("normal job %d: output %q", i, st.Output)
		}
	}
	// The host returns the overflowed stacks to the OS a second after a burst of
	// overflows, and logs both steps: once every overflow is in (their jobs are
	// dead-lettered) and each scheduled return has run, RSS is what the host keeps.
	reclaimed := func() {
		t.Helper()
		waitForLong(t, "the overflowed stacks returned to the OS", 60e9, func() bool {
			l := host.log()
			scheduled := strings.Count(l, "returning freed memory to the OS in a second")
			return scheduled > 0 && strings.Count(l, "returned freed memory to the OS after") == scheduled
		})
	}
	floodsSucceeded := func() {
		t.Helper()
		for _, id := range floods {
			var st jobState
			waitForLong(t, "flood job "+id, 120e9, func() bool {
				host.get("/v1/jobs/"+id, &st)
				if st.State == "dead" || st.State == "retrying" {
					t.Fatalf("flood job %s: %s (%s), want it acked", id, st.State, st.Reason)
				}
				return st.State == "succeeded"
			})
		}
	}
	floodsSucceeded()
	reclaimed()
	rss1 := rssMB(t, host.cmd.Process.Pid)
	storm(2)
	floodsSucceeded()
	reclaimed()
	rss2 := rssMB(t, host.cmd.Process.Pid)
	if strings.Contains(host.log(), "panic") {
		t.Fatalf("the host logged a panic:\n%s", host.log())
	}
	if rss2 > rss1*3/2+50 {
		t.Fatalf("RSS grew with the count of hostile jobs: %d MB after one storm, %d MB after two", rss1, rss2)
	}
	t.Logf("hostile guests in a live host: 2 storms of %d hostile jobs (each run twice) next to %d normal jobs: all normal jobs succeeded, every hostile one dead-lettered with its reason; RSS %d MB at start, %d after one storm, %d after two",
		each*(len(hostile)-1)+4+2*each, normal, rss0, rss1, rss2)
}

// waitForProgress polls cond until it reports done, and fails when the count it reports
// has not changed for stall: a slow machine only slows the count, a hang stops it.
func waitForProgress(t *testing.T, what string, stall time.Duration, cond func() (n int, done bool)) {
	t.Helper()
	last, since := -1, time.Now()
	for {
		n, done := cond()
		if done {
			return
		}
		if n != last {
			last, since = n, time.Now()
		} else if time.Since(since) > stall {
			t.Fatalf("timed out waiting for %s: stuck at %d for %v", what, n, stall)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
