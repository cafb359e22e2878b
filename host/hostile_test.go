package host_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/host"
	"github.com/wasmjobs/wasmjobs/internal/rigs/abitest"
	"github.com/wasmjobs/wasmjobs/worker"
)

// hostileRuns is how many times the soak runs each hostile module: 20 by default,
// WASMJOBS_HOSTILE_RUNS to change it (`make soak` runs 1,000).
func hostileRuns(t *testing.T) int {
	if s := os.Getenv("WASMJOBS_HOSTILE_RUNS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("WASMJOBS_HOSTILE_RUNS=%q: want a positive number", s)
		}
		return n
	}
	return 20
}

// rssKiB reads the process's resident set size.
func rssKiB() int {
	b, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	return 0
}

// goroutineSlack is how far the soak's goroutines, but those of connections (see
// goroutines), may be from their count after the warm-up rounds.
const goroutineSlack = 10

// goroutines counts the process's goroutines but those serving a connection: an HTTP
// client's (idle in a pool, whose bound keeps them bounded, or in use) and a test
// server's. The soak's connections come and go with timing (a dial a cancelled request
// started still lands in the pool), not with the number of rounds, and each case
// checks its server's; the rest must not grow at all.
func goroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if !strings.Contains(g, "net/http.(*persistConn).") && !strings.Contains(g, "net/http.(*conn).serve") {
			count++
		}
	}
	return count
}

func heapMiB() float64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return float64(ms.HeapAlloc) / (1 << 20)
}

// TestHostileModulesNeverTakeTheHostDown runs every hostile module of the conformance
// table, the hostile cases of a JS handler, and the hostile HTTP cases (each worker
// against loopback servers of its own), many times, interleaved with normal jobs on two
// goroutines, and checks that each ends as the table says, that normal jobs keep their
// exact results, and that the host's memory, goroutines and connections do not grow
// with the number of runs.
//
// Not parallel: the heap it checks is the whole test process's, and the package's
// parallel tests, running beside it, made it grow past the bound in a CI run (17.4 MiB over
// 15 rounds; alone, 3 MiB over 15 or 54). A test that is not parallel runs while none runs.
func TestHostileModulesNeverTakeTheHostDown(t *testing.T) {
	runs := hostileRuns(t)
	e := newEngine(t)
	type loaded struct {
		c abitest.Case
		m *host.Module
	}
	var hostile []loaded
	for _, c := range abitest.Cases() {
		if c.Invalid != "" || !strings.HasPrefix(c.Module, "hostile/") {
			continue
		}
		if c.Module == "hostile/loop" || c.Module == "hostile/sleep" {
			c.Manifest, c.Reason = `timeout = "10ms"`, "timeout after 10ms"
		}
		m, err := load(t, e, c)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Retire()
		hostile = append(hostile, loaded{c, m})
	}
	echo := loadFile(t, e, "abi/echo", "")
	// The HTTP cases with a short timeout, a 1 MiB max_response and 200 requests to
	// churn, so that a round stays short (TestHTTPHostileServersAndGuests runs them at
	// full size: 10 MiB, 10,000 requests). Under -race the heavy ones (the gzip bomb,
	// the churn) run every tenth round.
	const workers = 2
	httpMods := loadHostileHTTP(t, e, 20*time.Millisecond, 1<<20, 200)
	var httpRigs [workers]*hostileHTTP
	var httpCases [workers][]hostileHTTPCase
	for w := range workers {
		httpRigs[w] = newHostileHTTP(t)
		httpCases[w] = hostileHTTPCases(httpRigs[w], httpMods)
	}
	// The JS cases: one handler (jsHostile) with a case per payload.
	// The loop runs on a module of its own with a short timeout; the others get one a
	// loaded machine cannot pass (the same bytes: compiled once).
	// Without the engine (npm ci in guest-sdk/javascript) they are left out, except
	// under CI, where jsModule fails the test.
	var jsLoop, js *host.Module
	var jsCases []jsHostileCase
	for _, c := range jsHostileCases {
		if c.soak {
			jsCases = append(jsCases, c)
		}
	}
	if _, err := jsEngine(); err == nil || os.Getenv("CI") == "true" {
		jsLoop = loadJS(t, e, jsHostile, "timeout = \"100ms\"")
		js = loadJS(t, e, jsHostile, "timeout = \"2m\"\nmemory = \"8MiB\"")
	} else {
		t.Logf("no JS cases: %v", err)
		jsCases = nil
	}

	round := func(i int) error {
		for _, h := range hostile {
			// Under -race, a stack overflow costs about a second (wazero grows the guest's
			// stack to 50 MB, and the race detector shadows every byte): it runs every
			// tenth round there, and every round without -race.
			if raceEnabled && h.c.Module == "hostile/recursion" && i%10 != 0 {
				continue
			}
			job := jobFor(h.c, h.m)
			x := h.m.Run(context.Background(), job, nil)
			settle, reason := worker.Decide(job, x.Result(), 0)
			if x.Ending() != h.c.Kind || settle.String() != h.c.Settle || reason != h.c.Reason {
				return fmt.Errorf("run %d of %s: %s %s %q", i, h.c.Name, x.Ending(), settle, reason)
			}
			payload := fmt.Sprintf("normal job %d after %s", i, h.c.Name)
			normal := &worker.Job{Envelope: backend.NewEnvelope("echo", []byte(payload)), Attempt: 1, MaxAttempts: 1}
			if x := echo.Run(context.Background(), normal, nil); x.Outcome != worker.Ack || string(x.Output) != payload {
				return fmt.Errorf("normal job after %s: %s %q %q", h.c.Name, x.Ending(), x.Reason, x.Output)
			}
		}
		// A worker's rounds all have the same parity: each uses its own servers, whose
		// counts no other round touches.
		for _, c := range httpCases[i%workers] {
			if raceEnabled && c.heavy && i%10 >= workers {
				continue
			}
			if err := c.run(); err != nil {
				return fmt.Errorf("run %d of HTTP %w", i, err)
			}
		}
		for _, c := range jsCases {
			// Under -race the memory bomb and the recursion (which grows wazero's stack,
			// as hostile/recursion does) cost seconds: every tenth round there.
			if raceEnabled && (c.payload == "bomb" || c.payload == "recursion") && i%10 != 0 {
				continue
			}
			m := js
			if c.payload == "loop" {
				m, c.reason = jsLoop, "timeout after 100ms"
			}
			x := run(m, c.payload)
			// The loop's 100 ms include a new VM's setup after the last loop's timeout
			// killed its VM: on a loaded machine the setup itself can run out of them.
			initTimeout := c.payload == "loop" && x.Reason == "_initialize failed: "+c.reason
			if x.Ending() != c.kind || (x.Reason != c.reason && !initTimeout) {
				return fmt.Errorf("run %d of JS %s: %s %q", i, c.payload, x.Ending(), x.Reason)
			}
		}
		return nil
	}
	soak := func(from, to int) {
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for w := range workers {
			wg.Go(func() {
				for i := from + w; i < to; i += workers {
					if err := round(i); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
	warm := max(runs/10, 5)
	soak(0, warm)
	heap0, rss0, g0 := heapMiB(), rssKiB(), goroutines()
	// The heap is read at three points of the last fifth and the least taken: what the
	// pools hold at one instant (an instance whose memory a hostile case grew, a VM
	// about to be replaced) varies by tens of MiB from round to round (a CI run read
	// 28.8 MiB more at its end, RSS unchanged), while something kept per run grows
	// through all three.
	step := max((runs-warm)/10, 1)
	soak(warm, runs-2*step)
	heapA := heapMiB()
	soak(runs-2*step, runs-step)
	heapB := heapMiB()
	soak(runs-step, runs)
	heap1, rss1 := min(heapA, heapB, heapMiB()), rssKiB()
	// Goroutines end a little after their requests (a connection's, when it is
	// closed): the count is given a moment to settle.
	g1 := goroutines()
	for deadline := time.Now().Add(5 * time.Second); g1 > g0+goroutineSlack && time.Now().Before(deadline); g1 = goroutines() {
		time.Sleep(10 * time.Millisecond)
	}
	note := ""
	if raceEnabled {
		note = " (under -race the stack overflow runs every tenth round)"
	}
	t.Logf("%d rounds of %d hostile cases and %d HTTP ones%s, each module case followed by a normal job: heap %.1f -> %.1f MiB, RSS %d -> %d MiB, goroutines but connections' %d -> %d (after round %d -> after round %d)",
		runs, len(hostile), len(httpCases[0]), note, heap0, heap1, rss0>>10, rss1>>10, g0, g1, warm, runs)
	if heap1-heap0 > 16 {
		t.Fatalf("heap grew by %.1f MiB over %d runs: something is kept per run", heap1-heap0, runs-warm)
	}
	if g1 > g0+goroutineSlack {
		t.Fatalf("goroutines grew from %d to %d over %d runs: something is left running per run", g0, g1, runs-warm)
	}
	httpMods.retire()
	for _, h := range httpRigs {
		if err := h.allClosed(); err != nil {
			t.Fatalf("after %d runs and the HTTP modules retired: %v", runs, err)
		}
	}
}
