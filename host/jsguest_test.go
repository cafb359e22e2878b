package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/host"
	"github.com/wasmjobs/wasmjobs/internal/rigs/abitest"
	"github.com/wasmjobs/wasmjobs/internal/tools/jsbuild"
	"github.com/wasmjobs/wasmjobs/worker"
)

// The QuickJS engine is read once: each JS test module is it plus a source section.
var jsEngine = sync.OnceValues(func() ([]byte, error) {
	p, err := jsbuild.FindEngine(filepath.Join(abitest.Dir(), "..", "guest-sdk", "javascript"))
	if err != nil {
		return nil, err
	}
	return os.ReadFile(p)
})

// jsModule returns a JS handler module whose bundle is src, written by hand in the
// shape esbuild gives (a script that sets __wasmjobs_handler to the exports). Without
// the engine (npm ci in guest-sdk/javascript) the test is skipped, except under CI.
func jsModule(t testing.TB, src string) []byte {
	t.Helper()
	engine, err := jsEngine()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%v: CI must run make guests first", err)
		}
		t.Skip(err)
	}
	return jsbuild.Module(engine, []byte(src))
}

func loadJS(t testing.TB, e *host.Engine, src, manifest string) *host.Module {
	t.Helper()
	man, err := host.ParseManifest("js.toml", []byte(manifest))
	if err != nil {
		t.Fatal(err)
	}
	m, err := e.Load(context.Background(), "js", jsModule(t, src), man)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	t.Cleanup(m.Retire)
	return m
}

// jsHostile is one handler with a hostile case per payload, and "ok" a normal job.
const jsHostile = `var __wasmjobs_handler = { default: async function (job) {
  const OUT = Symbol.for("wasmjobs.outcome");
  switch (job.text) {
  case "ok": job.output("ok " + job.attempt); return;
  case "loop": for (;;) {}
  case "async-loop": await null; for (;;) {}
  case "bomb": { const a = []; for (let i = 0; ; i++) a.push(new ArrayBuffer(1 << 20)); }
  case "bomb-caught": try { const a = []; for (let i = 0; ; i++) a.push(new ArrayBuffer(1 << 20)); } catch (e) { return; }
  case "recursion": { const f = (n) => f(n + 1) + 1; f(0); }
  case "never": return new Promise(() => {});
  case "throw-string": throw "boom";
  case "throw-null": throw null;
  case "fake-outcome": throw { [OUT]: { code: 7 } };
  case "bad-output": job.output(42); return;
  case "bad-enqueue": job.enqueue("bad name!", "x"); return;
  case "output-flood": while (job.output("y".repeat(4096))) {} return;
  case "log-flood": for (let i = 0; i < 1200; i++) job.log.info("line " + i); return;
  case "tamper": globalThis.__wasmjobs_run = null; globalThis.__wasmjobs_load = null; globalThis.JSON = null; return;
  case "hold": globalThis.held = (globalThis.held || []); globalThis.held.push(new ArrayBuffer(1 << 20)); return;
  }
  throw new Error("unknown case " + job.text);
} };`

// jsHostileCase is a case of jsHostile: its payload, how its job ends and why (a
// timeout's reason is "timeout after " and its module's limit, so left empty here), and
// whether the hostile soak repeats it too.
type jsHostileCase struct {
	payload, kind, reason string
	soak                  bool
}

// jsHostileCases are jsHostile's cases, for its own test and for the hostile soak.
var jsHostileCases = []jsHostileCase{
	{"loop", "timeout", "", true},
	{"async-loop", "timeout", "", false},
	{"bomb", "trap", "trap: InternalError: out of memory", true},
	// QuickJS-ng makes "out of memory" uncatchable: a handler cannot catch it.
	{"bomb-caught", "trap", "trap: InternalError: out of memory", false},
	{"recursion", "trap", "trap: RangeError: Maximum call stack size exceeded", true},
	{"never", "trap", "trap: the handler's promise never settled", true},
	{"throw-string", "trap", `trap: uncaught "boom"`, false},
	{"throw-null", "trap", "trap: uncaught null", true},
	{"fake-outcome", "trap", "trap: uncaught [object Object]", false},
	{"bad-output", "trap", "trap: TypeError: want a string or a Uint8Array, got number", false},
	{"bad-enqueue", "trap", `trap: RangeError: enqueue into "bad name!": bad argument`, true},
	{"output-flood", "ack", "", false},
	{"log-flood", "ack", "", false},
	{"tamper", "ack", "", true},
	{"ok", "ack", "", true},
}

// TestJSHostileHandlersFailCleanly runs each hostile case of a JS handler, each
// followed by a normal job on the same module, on pooled VMs and on fresh ones (started
// from the load's snapshot): the case ends as wanted (an infinite loop at its deadline,
// a memory bomb in a clean failure), and the module serves on.
func TestJSHostileHandlersFailCleanly(t *testing.T) {
	t.Parallel()
	for _, isolation := range []string{"pooled", "fresh"} {
		t.Run(isolation, func(t *testing.T) {
			t.Parallel()
			hostileHandlersFailCleanly(t, "isolation = \""+isolation+"\"\n")
		})
	}
}

func hostileHandlersFailCleanly(t *testing.T, isolation string) {
	e := newEngine(t)
	// The loops run on a module with a short timeout; the other cases get one that a
	// loaded machine under -race does not reach (the same bytes: compiled once).
	loops := loadJS(t, e, jsHostile, isolation+"timeout = \"1s\"\nmemory = \"8MiB\"")
	rest := loadJS(t, e, jsHostile, isolation+"timeout = \"2m\"\nmemory = \"8MiB\"\nmax_output = \"64KiB\"")
	for _, tc := range jsHostileCases {
		m := rest
		if tc.kind == "timeout" {
			m, tc.reason = loops, "timeout after 1s"
		}
		for round := range 2 {
			x := run(m, tc.payload)
			if x.Ending() != tc.kind || x.Reason != tc.reason {
				t.Fatalf("%s (round %d): %s %q, want %s %q", tc.payload, round, x.Ending(), x.Reason, tc.kind, tc.reason)
			}
			if tc.kind == "timeout" && host.JSInterrupts(m) == 0 {
				t.Fatalf("%s: the interrupt handler did not stop it (wazero's backstop did)", tc.payload)
			}
			if res := x.Result(); tc.kind != "ack" && res.Outcome.String() != "failed" {
				t.Fatalf("%s: outcome %s, want failed (retried with backoff)", tc.payload, res.Outcome)
			}
			switch tc.payload {
			case "output-flood":
				if len(x.Output) != 64<<10 {
					t.Fatalf("output-flood wrote %d bytes, want the limit of %d", len(x.Output), 64<<10)
				}
			case "log-flood":
				if len(x.Logs) != 1001 || !strings.Contains(x.Logs[1000].Msg, "200 log lines dropped") {
					t.Fatalf("log-flood: %d lines, last %v", len(x.Logs), x.Logs[len(x.Logs)-1])
				}
			}
			if x := run(m, "ok"); x.Outcome != worker.Ack || string(x.Output) != "ok 1" {
				t.Fatalf("normal job after %s: %s %q %q", tc.payload, x.Ending(), x.Reason, x.Output)
			}
		}
	}
}

// TestJSHeldMemoryRecyclesTheVM: a handler that keeps memory in its globals fills
// QuickJS's heap; before it runs out, the host replaces the VM, so no job fails.
func TestJSHeldMemoryRecyclesTheVM(t *testing.T) {
	t.Parallel()
	e := newEngine(t)
	m := loadJS(t, e, jsHostile, `memory = "24MiB"`)
	for i := range 60 {
		if x := run(m, "hold"); x.Outcome != worker.Ack {
			t.Fatalf("job %d: %s %q", i, x.Ending(), x.Reason)
		}
	}
}

// TestJSIsolation: pooled VMs keep globals from job to job, fresh ones do not, and
// recycle_after bounds how many jobs a VM serves.
func TestJSIsolation(t *testing.T) {
	t.Parallel()
	e := newEngine(t)
	const counter = `var __wasmjobs_handler = { default(job) { globalThis.n = (globalThis.n || 0) + 1; job.output(String(globalThis.n)); } };`
	for _, tc := range []struct{ manifest, want string }{
		{"", "1234"},
		{`isolation = "fresh"`, "1111"},
		{"recycle_after = 2", "1212"},
	} {
		m := loadJS(t, e, counter, tc.manifest)
		var got strings.Builder
		for range 4 {
			x := run(m, "")
			if x.Outcome != worker.Ack {
				t.Fatalf("%s: %s %q", tc.manifest, x.Ending(), x.Reason)
			}
			got.Write(x.Output)
		}
		if got.String() != tc.want {
			t.Fatalf("%q: %q, want %q", tc.manifest, got.String(), tc.want)
		}
	}
}

// TestJSInvalidHandlersAreRefusedAtLoad: a bundle that throws, one without a default
// function, an engine too small for its memory limit, and a section on a module that
// is not the engine are each refused with a message that names the problem.
func TestJSInvalidHandlersAreRefusedAtLoad(t *testing.T) {
	t.Parallel()
	e := newEngine(t)
	for _, tc := range []struct {
		name, src, manifest, want string
		wasm                      []byte
	}{
		{"throws", `throw new TypeError("no config")`, "", "evaluating the handler: TypeError: no config", nil},
		{"no default", `var __wasmjobs_handler = { handle() {} };`, "", "the bundle's default export is not a function", nil},
		{"syntax", `var __wasmjobs_handler = {`, "", "evaluating the handler: SyntaxError", nil},
		// At load, the engine's setup gets at least 10 s, whatever the job's timeout.
		{"loops at load", `for (;;) {}`, `timeout = "100ms"`, "loading the JS handler: timeout after 10s", nil},
		{"memory too small", `var __wasmjobs_handler = { default() {} };`, `memory = "2MiB"`, "leaves QuickJS", nil},
		{"not the engine", "", "", "is not the QuickJS engine of quickjs-wasi: missing export",
			jsbuild.Module(mustRead(t, filepath.Join(abitest.Dir(), "abi", "echo.wasm")), []byte("x"))},
	} {
		wasm := tc.wasm
		if wasm == nil {
			wasm = jsModule(t, tc.src)
		}
		man, err := host.ParseManifest("bad.toml", []byte(tc.manifest))
		if err != nil {
			t.Fatal(err)
		}
		_, err = e.Load(context.Background(), "bad", wasm, man)
		if !errors.Is(err, host.ErrInvalidModule) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an invalid module error with %q", tc.name, err, tc.want)
		}
	}
}

// TestJSShutdownInterruptsAHandler: cancelling the job's context (the host shutting
// down) stops a looping JS handler at once, not at its timeout.
func TestJSShutdownInterruptsAHandler(t *testing.T) {
	t.Parallel()
	e := newEngine(t)
	m := loadJS(t, e, jsHostile, `timeout = "1m"`)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	x := m.Run(ctx, jobOf(m, "loop"), nil)
	if x.Cause != host.CauseTimeout || x.Reason != "cancelled: the host is shutting down" || host.JSInterrupts(m) != 1 {
		t.Fatalf("%s %q, %d interrupts", x.Ending(), x.Reason, host.JSInterrupts(m))
	}
}

// TestJSHandlerSwapsLive serves a queue with a JS handler from the modules directory,
// replaces the file with a new version, and checks that the jobs before the swap ran on
// the old version and those after it on the new one, none failing.
func TestJSHandlerSwapsLive(t *testing.T) {
	t.Parallel()
	src := func(v string) []byte {
		return jsModule(t, `var __wasmjobs_handler = { default: async function (job) { await null; job.output("`+v+`"); } };`)
	}
	v1, v2 := src("v1"), src("v2")
	rig := newRegRig(t, host.RegistryConfig{Rescan: time.Hour}, 4)
	rig.start()
	rig.write("greet.wasm", v1)
	// Compiling the engine takes seconds, tens of them under -race on a loaded machine.
	for deadline := time.Now().Add(3 * time.Minute); rig.loads() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the JS handler did not load in 3 minutes")
		}
	}
	rig.publish("greet", 20)
	rig.waitFor("jobs on v1", func() bool { return rig.settledCount() == 20 })
	old := rig.status("greet").Version
	rig.write("greet.wasm", v2)
	for deadline := time.Now().Add(3 * time.Minute); rig.status("greet").Version != host.Version(v2); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the new version did not load in 3 minutes")
		}
	}
	rig.publish("greet", 20)
	rig.waitFor("jobs on v2", func() bool { return rig.settledCount() == 40 })
	rig.mu.Lock()
	defer rig.mu.Unlock()
	for i, r := range rig.settled {
		if r.outcome != worker.Ack {
			t.Fatalf("job %d: %s", i, r.outcome)
		}
		want := old
		if i >= 20 {
			want = host.Version(v2)
		}
		if r.version != want {
			t.Fatalf("job %d ran on %s, want %s", i, r.version, want)
		}
	}
}

// TestJSLeftoverPromiseWorkStaysInItsJob: a handler that settles while a chain of
// promise jobs is still queued must not have that chain run in the next job of the
// pooled VM, nor its job object act on that job.
func TestJSLeftoverPromiseWorkStaysInItsJob(t *testing.T) {
	t.Parallel()
	e := newEngine(t)
	const src = `var __wasmjobs_handler = { default: async function (job) {
  if (job.text !== "first") { for (let i = 0; i < 40; i++) await null; job.output("[second]"); return; }
  (async () => {
    for (let i = 0; i < 25; i++) await null;
    job.output("LEAK");
    job.enqueue("other", "x");
  })();
} };`
	m := loadJS(t, e, src, `enqueue = ["other"]`)
	if x := run(m, "first"); x.Outcome != worker.Ack {
		t.Fatalf("first: %s %q", x.Ending(), x.Reason)
	}
	x := run(m, "second")
	if x.Outcome != worker.Ack || string(x.Output) != "[second]" || len(x.Children) != 0 {
		t.Fatalf("second: %s %q, output %q, %d children; want an ack with output \"[second]\" and no child", x.Ending(), x.Reason, x.Output, len(x.Children))
	}
}

// TestJSTimeoutCoversVMSetup: a VM a job starts counts its set-up (a slow top level)
// against the job's timeout, as a pooled module's replacement VM does (Load alone gets
// jsSetupMin); a fresh VM starts from the load's snapshot, so the top level is the
// load's cost, never a job's.
func TestJSTimeoutCoversVMSetup(t *testing.T) {
	t.Parallel()
	e := newEngine(t)
	const src = `var __wasmjobs_handler = { default() {} };
const end = Date.now() + 3000; while (Date.now() < end) {}`
	// recycle_after = 1: the load's VM serves the first job, the second starts its own.
	m := loadJS(t, e, src, "timeout = \"100ms\"\nrecycle_after = 1")
	if x := run(m, ""); x.Outcome != worker.Ack {
		t.Fatalf("the load's VM: %s %q, want an ack", x.Ending(), x.Reason)
	}
	x := run(m, "")
	if x.Cause != host.CauseTimeout || !strings.Contains(x.Reason, "timeout after 100ms") {
		t.Fatalf("%s %q after %v, want a timeout after 100ms", x.Ending(), x.Reason, x.Duration)
	}
	fresh := loadJS(t, e, src, "timeout = \"100ms\"\nisolation = \"fresh\"")
	for i := range 3 {
		if x := run(fresh, ""); x.Outcome != worker.Ack {
			t.Fatalf("fresh job %d: %s %q after %v, want an ack (its VM from the snapshot)", i+1, x.Ending(), x.Reason, x.Duration)
		}
	}
}

// TestJSFreshVMMemoryIsNeverAnotherJobs: a fresh VM may start in the memory of one that
// ended (nothing to zero or collect a job), but all it sees is the snapshot's bytes, and
// memory it grows is zero, where the VM before filled 3 MiB of its own with 0xAB.
//
// Not parallel: the ended VM's memory waits in a sync.Pool, which a garbage collection
// empties and which, under the race detector, drops one Put in four on purpose. Run
// with no parallel test beside it and the collector off, a try misses only to the race
// detector's drop, and 30 tries all miss once in 10^18.
func TestJSFreshVMMemoryIsNeverAnotherJobs(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	const src = `var __wasmjobs_handler = { default(job) { globalThis.kept = new Uint8Array(3 << 20).fill(0xab); } };`
	m := loadJS(t, newEngine(t), src, "isolation = \"fresh\"\nmemory = \"32MiB\"")
	for try := 1; ; try++ {
		if x := run(m, ""); x.Outcome != worker.Ack {
			t.Fatalf("the filling job: %s %q", x.Ending(), x.Reason)
		}
		reused, asSnapshot, grownZero, err := host.FreshJSMemory(m, 32) // 2 MiB: within the memory the VM before grew to
		if err != nil {
			t.Fatal(err)
		}
		if !asSnapshot || !grownZero {
			t.Fatalf("a fresh VM (in reused memory: %v): every byte the snapshot's %v, 2 MiB grown all zero %v; want both", reused, asSnapshot, grownZero)
		}
		if reused {
			return
		}
		if try == 30 {
			t.Fatal("no fresh VM started in the memory of the one before, in 30 tries")
		}
	}
}

// TestJSFreshVMsFromTheSnapshot: a fresh VM starts from the snapshot the load took
// after the bundle's top level ran, before any job: what a job changes (its globals, a
// polluted Object.prototype, a replaced JSON.parse) never reaches the next job; values
// the top level computed are the same in every job (Math.random's there too); and
// Math.random draws from a seed of the VM's own, so no two VMs share its numbers.
func TestJSFreshVMsFromTheSnapshot(t *testing.T) {
	t.Parallel()
	const src = `const atLoad = Math.random();
globalThis.n = 0;
var __wasmjobs_handler = { default(job) {
  globalThis.n++;
  const polluted = ({}).polluted !== undefined || JSON.parse === null;
  if (job.text === "tamper") { Object.prototype.polluted = 1; JSON.parse = null; }
  job.output(JSON.stringify({ n: globalThis.n, atLoad, polluted, r: [Math.random(), Math.random()], proto: Math.random.prototype !== undefined }));
} };`
	type out struct {
		N        int
		AtLoad   float64
		Polluted bool
		R        []float64
		Proto    bool // Math.random has a prototype: a constructor, which the built-in is not
	}
	for _, tc := range []struct {
		isolation string
		wantN     []int
	}{
		{"fresh", []int{1, 1, 1, 1, 1, 1}},
		{"pooled", []int{1, 2, 3, 4, 5, 6}},
	} {
		m := loadJS(t, newEngine(t), src, "isolation = \""+tc.isolation+"\"")
		var outs []out
		for i := range len(tc.wantN) {
			x := run(m, map[bool]string{true: "tamper"}[i%2 == 0])
			var o out
			if x.Outcome != worker.Ack || json.Unmarshal(x.Output, &o) != nil {
				t.Fatalf("%s job %d: %s %q %q", tc.isolation, i+1, x.Ending(), x.Reason, x.Output)
			}
			if o.N != tc.wantN[i] || (tc.isolation == "fresh" && o.Polluted) || o.Proto {
				t.Fatalf("%s job %d: %+v; want n %d, Math.random no constructor and, fresh, nothing of the job before", tc.isolation, i+1, o, tc.wantN[i])
			}
			if i > 0 && o.AtLoad != outs[0].AtLoad {
				t.Fatalf("%s job %d: the top level's value %v, job 1's %v: want one value", tc.isolation, i+1, o.AtLoad, outs[0].AtLoad)
			}
			outs = append(outs, o)
		}
		seen := map[float64]int{}
		for i, o := range outs {
			for _, r := range append(o.R, o.AtLoad) {
				if r < 0 || r >= 1 {
					t.Fatalf("%s job %d: Math.random gave %v", tc.isolation, i+1, r)
				}
			}
			for _, r := range o.R {
				if j, ok := seen[r]; ok {
					t.Fatalf("%s: jobs %d and %d drew the same number %v from Math.random", tc.isolation, j, i+1, r)
				}
				seen[r] = i + 1
			}
		}
	}
}

// TestJSEnqueueAwaitOption: enqueue's await option takes a boolean, and anything else
// throws a TypeError naming the option before a child is staged, as a bad delay throws
// a RangeError; true stages an awaited child, false or no option a plain one.
func TestJSEnqueueAwaitOption(t *testing.T) {
	t.Parallel()
	m := loadJS(t, newEngine(t), jsEval, `enqueue = ["child"]`)
	const typeErr = "TypeError: enqueue: the await option must be a boolean, got a "
	for _, c := range []struct {
		name, option, want string
		awaited            []bool // the children staged when want is ""
	}{
		{"a number", "{await: 1}", typeErr + "number", nil},
		{"a string", `{await: "yes"}`, typeErr + "string", nil},
		{"an object", "{await: {}}", typeErr + "object", nil},
		{"true", "{await: true}", "", []bool{true}},
		{"false", "{await: false}", "", []bool{false}},
		{"null", "{await: null}", "", []bool{false}},
		{"no option", "{}", "", []bool{false}},
		{"a bad delay", "{delay: -1, await: true}", "RangeError: enqueue: delay must be a non-negative number of milliseconds, got -1", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			x := run(m, `try { job.enqueue("child", "x", `+c.option+`); return ""; } catch (e) { return e.name + ": " + e.message; }`)
			if x.Outcome != worker.Ack || string(x.Output) != c.want {
				t.Fatalf("%s %s: output %q, want %q", x.Ending(), x.Reason, x.Output, c.want)
			}
			var got []bool
			for _, ch := range x.Children {
				got = append(got, ch.Await)
			}
			if fmt.Sprint(got) != fmt.Sprint(c.awaited) {
				t.Fatalf("children awaited %v, want %v", got, c.awaited)
			}
		})
	}
}

// TestJSJobObjectEndsWithItsJob: a pooled VM's next job cannot act through an earlier
// job's object, whichever way the handler kept it (the object, a method taken from it,
// its log, an object made from it), while the running job's object serves every way.
func TestJSJobObjectEndsWithItsJob(t *testing.T) {
	t.Parallel()
	e := newEngine(t)
	const src = `var __wasmjobs_handler = { default: function (job) {
  const kept = globalThis.kept;
  if (!kept) {
    globalThis.kept = { job, output: job.output, log: job.log, info: job.log.info, derived: Object.create(job) };
    const { text, output } = job;
    let proxied;
    try { proxied = new Proxy(job, {}).id; } catch (e) { proxied = e.message; }
    output(text + " " + Object.create(job).text + " " + Object.keys(JSON.parse(JSON.stringify(job))).join(",") + " " + (job.output === job.output) + "\n" + proxied);
    return;
  }
  const uses = {
    text: () => kept.job.text,
    id: () => kept.job.id,
    output: () => kept.job.output("LEAK"),
    taken: () => kept.output("LEAK"),
    log: () => kept.log.info("LEAK"),
    taken_log: () => kept.info("LEAK"),
    derived: () => kept.derived.queue,
    json: () => kept.job.json(),
  };
  for (const k of Object.keys(uses)) {
    try { uses[k](); job.output(k + ": no error\n"); } catch (e) { job.output(k + ": " + e.message + "\n"); }
  }
} };`
	m := loadJS(t, e, src, "")
	const stale = "this job has settled: its job object cannot be used in a later job (nor can a Proxy of the job object: use the object itself)"
	x := run(m, "first")
	// JSON.stringify(job) gives every field, in order; a Proxy of the job is refused,
	// saying so, even while its job runs.
	if want := "first first id,queue,module,version,traceId,spanId,attempt,maxAttempts,payload,text,log true\n" + stale; x.Outcome != worker.Ack || string(x.Output) != want {
		t.Fatalf("first job: %s %q, output %q, want %q", x.Ending(), x.Reason, x.Output, want)
	}
	x = run(m, "second")
	if x.Outcome != worker.Ack {
		t.Fatalf("second job: %s %q", x.Ending(), x.Reason)
	}
	for _, k := range []string{"text", "id", "output", "taken", "log", "taken_log", "derived", "json"} {
		if want := k + ": " + stale + "\n"; !strings.Contains(string(x.Output), want) {
			t.Errorf("second job's output %q lacks %q", x.Output, want)
		}
	}
	if strings.Contains(string(x.Output), "LEAK") || len(x.Logs) != 0 {
		t.Errorf("an earlier job's object acted on the second job: output %q, logs %v", x.Output, x.Logs)
	}
}

// TestJSEmptyValuesPassIn: an empty payload, as text and as bytes, is an empty string
// and an empty Uint8Array in a new VM's first job and after longer values, whether the
// bundle is small or larger than the buffer a VM keeps for values passed in.
func TestJSEmptyValuesPassIn(t *testing.T) {
	t.Parallel()
	e := newEngine(t)
	const src = `var __wasmjobs_handler = { default: function (job) {
  job.output(JSON.stringify(job.text) + " " + (job.payload instanceof Uint8Array) + " " + job.payload.length + ";");
} };`
	for _, tc := range []struct{ src, iso string }{
		{src, ""},
		{src, `isolation = "fresh"`},
		{src + "\n// " + strings.Repeat("x", 100<<10) + "\n", ""},
	} {
		iso := tc.iso
		m := loadJS(t, e, tc.src, iso)
		var got strings.Builder
		for _, p := range []string{"", "abc", ""} {
			x := run(m, p)
			if x.Outcome != worker.Ack {
				t.Fatalf("%q: payload %q: %s %q", iso, p, x.Ending(), x.Reason)
			}
			got.Write(x.Output)
		}
		if want := `"" true 0;"abc" true 3;"" true 0;`; got.String() != want {
			t.Errorf("%q: %q, want %q", iso, got.String(), want)
		}
	}
}
