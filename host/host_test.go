package host_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/host"
	"github.com/wasmjobs/wasmjobs/internal/rigs/abitest"
	"github.com/wasmjobs/wasmjobs/worker"
)

// loadFile loads testdata's module rel (without .wasm) with manifest text.
func loadFile(t testing.TB, e *host.Engine, rel, manifest string) *host.Module {
	t.Helper()
	m, err := load(t, e, abitest.Case{Module: rel, Manifest: manifest})
	if err != nil {
		t.Fatalf("Load(%s): %v", rel, err)
	}
	t.Cleanup(m.Retire)
	return m
}

func TestPooledInstancesKeepStateFreshOnesDoNot(t *testing.T) {
	t.Parallel()
	e := newEngine(t)
	for _, tc := range []struct {
		name, manifest string
		want           string
	}{
		{"pooled reuses the warm instance", "", "1234"},
		{"fresh makes one per job", `isolation = "fresh"`, "1111"},
		{"recycle after 2 jobs", "recycle_after = 2", "1212"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := loadFile(t, e, "abi/init_ok", tc.manifest)
			var got strings.Builder
			for range 4 {
				x := run(m, "")
				if x.Outcome != worker.Ack {
					t.Fatalf("kind %s: %s", x.Ending(), x.Reason)
				}
				got.Write(x.Output)
			}
			if got.String() != tc.want {
				t.Fatalf("runs per instance %q, want %q", got.String(), tc.want)
			}
		})
	}
}

func TestFailedInstanceIsDiscarded(t *testing.T) {
	t.Parallel()
	e := newEngine(t)
	// exit.wasm exits on every job: each job needs a new instance, and must get one.
	m := loadFile(t, e, "hostile/exit", "")
	for range 5 {
		if x := run(m, "3"); x.Cause != host.CauseExit || x.Reason != "exit code 3" {
			t.Fatalf("kind %s reason %q", x.Ending(), x.Reason)
		}
	}
	// A trapped pooled instance is not reused: init_ok counts jobs per instance, and
	// after a timeout the count starts again.
	loop := loadFile(t, e, "hostile/loop", `timeout = "20ms"`)
	for range 3 {
		if x := run(loop, ""); x.Cause != host.CauseTimeout {
			t.Fatalf("kind %s", x.Ending())
		}
	}
}

func TestPayloadOverLimitIsDeadLettered(t *testing.T) {
	t.Parallel()
	e := newEngine(t)
	m := loadFile(t, e, "abi/echo", "max_payload = 8")
	x := run(m, "123456789")
	if x.Outcome != worker.DeadLetter || x.Reason != "payload of 9 bytes passes the module's limit of 8 bytes" {
		t.Fatalf("kind %s reason %q", x.Ending(), x.Reason)
	}
	if x := run(m, "12345678"); x.Outcome != worker.Ack || string(x.Output) != "12345678" {
		t.Fatalf("kind %s output %q", x.Ending(), x.Output)
	}
}

func TestSwapDrainsTheOldVersion(t *testing.T) {
	t.Parallel()
	e := newEngine(t)
	slow := loadFile(t, e, "hostile/loop", `timeout = "300ms"`)
	fast := loadFile(t, e, "abi/ack", "")
	h := host.NewHandler(slow, nil)
	job := func() *worker.Job {
		return &worker.Job{Envelope: backend.NewEnvelope("q", nil), Attempt: 1, MaxAttempts: 3}
	}
	done := make(chan worker.Result)
	go func() { done <- h.Handle(context.Background(), job()) }()
	for slow.InUse() == 0 {
		time.Sleep(time.Millisecond)
	}
	if old := h.Swap(fast); old != slow {
		t.Fatal("Swap did not return the old module")
	}
	select {
	case <-slow.Done():
		t.Fatal("the old version closed while a job ran on it")
	default:
	}
	if res := h.Handle(context.Background(), job()); res.Outcome != worker.Ack || res.Version != fast.Version() {
		t.Fatalf("a new job ran as %+v, want an ack on the new version", res)
	}
	res := <-done
	if res.Outcome != worker.Failed || res.Version != slow.Version() {
		t.Fatalf("the running job ended as %+v, want it to finish on the old version", res)
	}
	select {
	case <-slow.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the old version was not closed after its last job")
	}
	if x := slow.Run(context.Background(), job(), nil); x.Cause != host.CauseTrap || !strings.Contains(x.Reason, "retired") {
		t.Fatalf("a retired module ran a job: %+v", x)
	}
}

func TestHandlerQueueFromManifest(t *testing.T) {
	t.Parallel()
	e := newEngine(t)
	m := loadFile(t, e, "abi/ack", "queue = \"mail\"\nconcurrency = 3\nkey_concurrency = 2\nmax_attempts = 7\nmax_defers = 2\nbackoff_base = \"2s\"\nbackoff_cap = \"1m\"")
	q := host.NewHandler(m, nil).Queue()
	if q.Name != "mail" || q.Concurrency != 3 || q.KeyConcurrency != 2 || q.MaxAttempts != 7 || q.MaxDefers != 2 ||
		q.Backoff != (worker.Backoff{Base: 2 * time.Second, Cap: time.Minute}) {
		t.Fatalf("Queue() = %+v", q)
	}
}

// TestGoExampleOnAWorker runs the Go example under a real worker on the memory backend.
func TestGoExampleOnAWorker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEngine(t)
	wasm := guestModule(t, "greet-go")
	man, err := host.ReadManifest(filepath.Join(abitest.Dir(), "..", "examples", "greet-go", "greet-go.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := e.Load(ctx, "greet-go", wasm, man)
	if err != nil {
		t.Fatal(err)
	}
	b := backendWithQueues(t, "notify")
	var mu sync.Mutex
	var settled []worker.Event
	all := make(chan struct{})
	const jobs = 60
	stop := serve(t, b, m, worker.Config{Concurrency: 4, Observer: worker.ObserverFunc(func(ev worker.Event) {
		if ev.Kind != worker.EventSettled {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		settled = append(settled, ev)
		if len(settled) == jobs {
			close(all)
		}
	})})
	payloads := []string{`{"name":"Ada","lang":"fr","notify":true}`, `{"name":"Grace"}`, `not json`}
	for i := range jobs {
		if err := b.Publish(ctx, backend.NewEnvelope("greet", []byte(payloads[i%3])), 0); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-all:
	case <-time.After(60 * time.Second):
		t.Fatal("jobs did not settle")
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for _, ev := range settled {
		counts[ev.Settle.String()]++
		if ev.Result.Version != m.Version() {
			t.Errorf("job ran on version %q", ev.Result.Version)
		}
		if ev.Settle == worker.Ack {
			if out := string(ev.Result.Output); out != "Bonjour, Ada!" && out != "Hello, Grace!" {
				t.Errorf("output %q", out)
			}
		}
	}
	if counts["ack"] != 40 || counts["dead_letter"] != 20 {
		t.Fatalf("settles %v, want 40 acks and 20 dead letters", counts)
	}
	if st, _ := b.Stats("notify"); st.Pending != 20 {
		t.Fatalf("notify queue %+v, want the 20 child jobs", st)
	}
	dead, _ := b.DeadLetters(ctx, "greet", 0)
	if len(dead) != 20 || !strings.HasPrefix(dead[0].Reason, "payload is not a JSON object") {
		t.Fatalf("dead letters: %d, first %q", len(dead), dead[0].Reason)
	}
}

// A Handler returns the guest's log lines in the result, for the job's record: the log
// host function's and stdout's and stderr's, each "LEVEL message", in order, bounded
// by the manifest's max_log_lines (then one line saying how many were dropped).
func TestHandlerReturnsTheGuestsLogLines(t *testing.T) {
	t.Parallel()
	e := newEngine(t)
	for _, c := range []struct {
		manifest string
		want     []string
	}{
		{"", []string{"DEBUG debug line", "INFO info line", "WARN warn line", "ERROR error line", "ERROR clamped high",
			"DEBUG clamped low", "INFO out 1", "WARN err 1", "INFO out 2"}},
		{"max_log_lines = 2", []string{"DEBUG debug line", "INFO info line", "WARN 7 log lines dropped (limit 2 per job)"}},
	} {
		m := loadFile(t, e, "abi/log", c.manifest)
		res := host.NewHandler(m, nil).Handle(context.Background(), &worker.Job{Envelope: backend.NewEnvelope("q", nil), Attempt: 1})
		if res.Outcome != worker.Ack || !slices.Equal(res.Logs, c.want) {
			t.Errorf("manifest %q: %v logs %q, want an ack with %q", c.manifest, res.Outcome, res.Logs, c.want)
		}
	}
}

func TestCheckValidatesWithoutRunningGuestCode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEngine(t)
	for _, tc := range []struct {
		file string
		ok   bool
	}{
		{"../testdata/abi/echo.wasm", true},
		// They trap or loop in _initialize: Load refuses them, Check never runs them.
		{"../testdata/hostile/init_trap.wasm", true},
		{"../testdata/hostile/init_loop.wasm", true},
		{"../testdata/hostile/no_marker.wasm", false},
		{"../testdata/hostile/bad_import.wasm", false},
	} {
		wasm, err := os.ReadFile(tc.file)
		if err != nil {
			t.Skipf("%s: %v (make guests)", tc.file, err)
		}
		v, err := e.Check(ctx, "upload", wasm)
		switch {
		case tc.ok && (err != nil || v != host.Version(wasm)):
			t.Errorf("Check(%s) = %q, %v; want its version", tc.file, v, err)
		case !tc.ok && !errors.Is(err, host.ErrInvalidModule):
			t.Errorf("Check(%s): %v, want ErrInvalidModule", tc.file, err)
		}
	}
	if _, err := e.Check(ctx, "upload", []byte("not wasm")); !errors.Is(err, host.ErrInvalidModule) {
		t.Errorf("Check of bytes without the header: %v, want ErrInvalidModule", err)
	}
}

// TestCloseWaitsForTheJobsItsCallerGaveUpOn: a job whose context ended (a drain past
// its deadline) returns at the guest's next check; Engine.Close waits for that, so the
// runtime never closes under a guest inside a host function (wazero's WASI file table
// is not safe against it: the race detector reports it).
func TestCloseWaitsForTheJobsItsCallerGaveUpOn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEngine(t)
	// Without a directory granted, it polls path_open every 5 ms until its end.
	m := loadModule(t, e, "wait", testdataModule(t, "abi/wait_file"), host.Manifest{})
	jobCtx, giveUp := context.WithCancel(ctx)
	done := make(chan host.Execution, 1)
	go func() { done <- m.Run(jobCtx, jobOf(m, "never"), nil) }()
	for m.InUse() == 0 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // inside the guest's loop
	giveUp()
	closeCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := e.Close(closeCtx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	// The job's instance is released (InUse falls) before the job counts itself out.
	if n := m.InUse(); n != 0 {
		t.Fatalf("Close returned with %d job still running on the engine", n)
	}
	if x := <-done; x.Outcome != worker.Failed {
		t.Errorf("the job given up on ended %s, want failed", x.Ending())
	}
}

// TestCancelledRunFailsAsCancelled: a run whose context is cancelled with
// worker.ErrCancelled as its cause (an operator's cancel) fails with CauseCancelled and
// the reason "cancelled by an operator", soon after the cancel, whether the guest
// spins, sleeps in WASI or loops in JS; a plain cancel (the host's drain) still fails
// as the host shutting down.
func TestCancelledRunFailsAsCancelled(t *testing.T) {
	t.Parallel()
	e := newEngine(t)
	modules := []struct {
		name    string
		m       *host.Module
		payload string
		within  time.Duration
	}{
		{"wasm spinning", loadFile(t, e, "hostile/loop", `timeout = "1m"`), "", 100 * time.Millisecond},
		{"wasm in a WASI sleep", loadFile(t, e, "hostile/sleep", `timeout = "1m"`), "", 100 * time.Millisecond},
		{"js spinning", loadJS(t, e, jsHostile, `timeout = "1m"`), "loop", 250 * time.Millisecond},
	}
	t.Run("js during its VM's setup", func(t *testing.T) {
		m := loadJS(t, e, jsHostile, `timeout = "1m"`)
		// The first run takes the VM made at load and is cancelled before it starts; the
		// second makes a new VM (hundreds of milliseconds) and is cancelled meanwhile.
		for _, after := range []time.Duration{0, 20 * time.Millisecond} {
			ctx, cancel := context.WithCancelCause(context.Background())
			time.AfterFunc(after, func() { cancel(worker.ErrCancelled) })
			if x := m.Run(ctx, jobOf(m, "loop"), nil); x.Cause != host.CauseCancelled || x.Reason != "cancelled by an operator" {
				t.Fatalf("cancelled after %v: %s %q, want cancelled by an operator", after, x.Ending(), x.Reason)
			}
		}
	})
	for _, mod := range modules {
		for _, c := range []struct {
			name   string
			cause  error
			kind   host.Cause
			reason string
		}{
			{"by an operator", worker.ErrCancelled, host.CauseCancelled, "cancelled by an operator"},
			{"by the drain", nil, host.CauseTimeout, "cancelled: the host is shutting down"},
		} {
			t.Run(mod.name+" "+c.name, func(t *testing.T) {
				if mod.payload == "loop" {
					run(mod.m, "ok") // a warm VM: the cancel comes in the run, not its setup
				}
				ctx, cancel := context.WithCancelCause(context.Background())
				defer cancel(nil)
				var at time.Time
				time.AfterFunc(100*time.Millisecond, func() { at = time.Now(); cancel(c.cause) })
				x := mod.m.Run(ctx, jobOf(mod.m, mod.payload), nil)
				took := time.Since(at)
				if x.Outcome != worker.Failed || x.Cause != c.kind || x.Reason != c.reason {
					t.Fatalf("%s %q, want %s %q", x.Ending(), x.Reason, c.kind, c.reason)
				}
				if took > mod.within {
					t.Errorf("the run ended %v after the cancel, want within %v", took, mod.within)
				}
			})
		}
	}
}
