package host_test

import (
	"context"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/host"
	"github.com/wasmjobs/wasmjobs/worker"
)

// TestServeLoop drives the serve loop of a module that exports wasmjobs_serve through
// what a handler can do to it, each step on the module's one pooled instance while it
// lasts: its jobs go to the same call (the output counts them), and whatever ends a job
// badly ends that loop and instance, the next job getting a new one.
func TestServeLoop(t *testing.T) {
	t.Parallel()
	e := newEngine(t)
	type step struct {
		payload string
		ending  string // Execution.Ending
		reason  string
		output  string
	}
	for _, tc := range []struct {
		name, manifest string
		steps          []step
	}{
		{"jobs share one call", "", []step{{"a", "ack", "", "1"}, {"a", "ack", "", "2"}, {"a", "ack", "", "3"}}},
		{"a spin times out", `timeout = "200ms"`, []step{{"a", "ack", "", "1"}, {"s", "timeout", "timeout after 200ms", ""}, {"a", "ack", "", "1"}}},
		{"a sleep times out", `timeout = "200ms"`, []step{{"z", "timeout", "timeout after 200ms", ""}, {"a", "ack", "", "1"}}},
		{"a trap", "", []step{{"a", "ack", "", "1"}, {"t", "trap", "trap: unreachable", ""}, {"a", "ack", "", "1"}}},
		{"a return mid-job", "", []step{{"r", "trap", "wasmjobs_serve returned while it ran a job, without passing its outcome to next_job", ""}, {"a", "ack", "", "1"}}},
		{"an invalid outcome", "", []step{{"b", "invalid_code", "invalid outcome code 9", "1"}, {"a", "ack", "", "1"}}},
		{"recycle_after", "recycle_after = 2", []step{{"a", "ack", "", "1"}, {"a", "ack", "", "2"}, {"a", "ack", "", "1"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := loadModule(t, e, "serve", testdataModule(t, "hostile/serve"), manifestOf(t, tc.manifest))
			for i, s := range tc.steps {
				x := run(m, s.payload)
				if x.Ending() != s.ending || x.Reason != s.reason || string(x.Output) != s.output {
					t.Fatalf("step %d (%s): %s %q output %q; want %s %q output %q", i, s.payload, x.Ending(), x.Reason, x.Output, s.ending, s.reason, s.output)
				}
			}
		})
	}
}

// manifestOf parses a manifest's text, failing the test if it cannot.
func manifestOf(t testing.TB, text string) host.Manifest {
	t.Helper()
	man, err := host.ParseManifest("serve.toml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return man
}

// TestServeLoopNotServed: under Config.NoServe, and for a fresh instance, the host
// calls wasmjobs_handle once a job, which the test module makes return RETRY; no loop
// starts.
func TestServeLoopNotServed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		cfg      host.Config
		manifest string
	}{
		{"NoServe", host.Config{NoCache: true, NoServe: true}, ""},
		{"fresh", host.Config{NoCache: true}, `isolation = "fresh"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEngineWith(t, tc.cfg)
			m := loadModule(t, e, "serve", testdataModule(t, "hostile/serve"), manifestOf(t, tc.manifest))
			if x := run(m, "a"); x.Ending() != "retry" {
				t.Fatalf("ending %s (%s), want retry: wasmjobs_handle was not called", x.Ending(), x.Reason)
			}
			if n := host.ServeLoops(e); n != 0 {
				t.Fatalf("%d serve loops run", n)
			}
		})
	}
}

// TestServeLoopRunOn: a guest that runs host functions on past next_job's 0 (its loop
// ended by a cancel just as it passed its outcome on, or by the engine's close) writes
// into no job, its output, logs and stdout alike: the job's are what it wrote before (run under -race, a write into
// the job's state as the host reads it is a race).
func TestServeLoopRunOn(t *testing.T) {
	t.Parallel()
	e := newEngine(t)
	m := loadModule(t, e, "serve", testdataModule(t, "hostile/serve_run_on"), host.Manifest{})
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(worker.ErrCancelled) // ended before the hand-over: the guest passes ACK into a loop already ended
	x := m.Run(ctx, jobOf(m, ""), nil)
	if x.Ending() != "cancelled" || len(x.Output) != 0 || len(x.Logs) != 0 {
		t.Fatalf("%s %q output of %d bytes, logs %v; want cancelled, none", x.Ending(), x.Reason, len(x.Output), x.Logs)
	}
	if x := run(m, ""); x.Ending() != "ack" || len(x.Output) != 0 || len(x.Logs) != 0 {
		t.Fatalf("the next job: %s %q output of %d bytes, logs %v; want ack, none", x.Ending(), x.Reason, len(x.Output), x.Logs)
	}
}

// TestServeLoopJobDeadline: a job whose context's deadline passes (a worker's
// Config.Deadline) times out, as a call's would, rather than reading as cancelled.
func TestServeLoopJobDeadline(t *testing.T) {
	t.Parallel()
	e := newEngine(t)
	m := loadModule(t, e, "serve", testdataModule(t, "hostile/serve"), host.Manifest{})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if x := m.Run(ctx, jobOf(m, "s"), nil); x.Ending() != "timeout" || x.Reason != "timeout after 30s" {
		t.Fatalf("%s %q; want timeout after 30s (the manifest's)", x.Ending(), x.Reason)
	}
}

// TestServeLoopInitNotCounted: a job's timeout runs from its hand-over, as a call's
// runs from the call: making its instance (here its wasmjobs_init, which sleeps) does
// not count. The module's instances each sleep 700 ms in init, and each of its jobs
// gets a new one (recycle_after = 1) past the first; the job sleeps 400 ms, within its
// 1 s.
func TestServeLoopInitNotCounted(t *testing.T) {
	t.Parallel()
	e := newEngine(t)
	m := loadModule(t, e, "serve", testdataModule(t, "hostile/serve_slow_init"), manifestOf(t, "timeout = \"1s\"\nrecycle_after = 1"))
	for i := range 3 {
		if x := run(m, ""); x.Ending() != "ack" {
			t.Fatalf("job %d: %s %q; want ack", i, x.Ending(), x.Reason)
		}
	}
}

// servedOnEngine returns an engine that the test closes itself, and hostile/serve
// loaded on it.
func servedOnEngine(t *testing.T) (*host.Engine, *host.Module) {
	t.Helper()
	e, err := host.NewEngine(context.Background(), host.Config{NoCache: true})
	if err != nil {
		t.Fatal(err)
	}
	m, err := e.Load(context.Background(), "serve", testdataModule(t, "hostile/serve"), host.Manifest{})
	if err != nil {
		t.Fatal(err)
	}
	return e, m
}

// TestServeLoopAfterClose: a job on a module whose engine has closed (its idle
// instance's loop ended) fails at once instead of waiting for a loop that is gone.
func TestServeLoopAfterClose(t *testing.T) {
	t.Parallel()
	e, m := servedOnEngine(t)
	if err := e.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	done := make(chan host.Execution, 1)
	go func() { done <- run(m, "a") }()
	select {
	case x := <-done:
		if x.Outcome != worker.Failed {
			t.Fatalf("%s %q; want a failure", x.Ending(), x.Reason)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the job did not end")
	}
}

// TestServeLoopTimeoutIsEachJobs: the watchdog's timer, armed by an earlier job, must
// not end a later one before its own timeout has passed.
func TestServeLoopTimeoutIsEachJobs(t *testing.T) {
	t.Parallel()
	e := newEngine(t)
	m := loadModule(t, e, "serve", testdataModule(t, "hostile/serve"), manifestOf(t, `timeout = "400ms"`))
	if x := run(m, "a"); x.Ending() != "ack" {
		t.Fatalf("first job: %s %s", x.Ending(), x.Reason)
	}
	time.Sleep(250 * time.Millisecond) // the timer is armed for the first job's deadline, 150 ms ahead
	start := time.Now()
	x := run(m, "s")
	if took := time.Since(start); x.Ending() != "timeout" || took < 400*time.Millisecond || took > 5*time.Second {
		t.Fatalf("spin: %s %q after %v; want a timeout after 400ms", x.Ending(), x.Reason, took)
	}
}

// TestServeLoopCancel: a job's context ending (an operator's cancel) ends the loop as it
// would a call.
func TestServeLoopCancel(t *testing.T) {
	t.Parallel()
	e := newEngine(t)
	m := loadModule(t, e, "serve", testdataModule(t, "hostile/serve"), host.Manifest{})
	for _, payload := range []string{"s", "z"} {
		ctx, cancel := context.WithCancelCause(context.Background())
		time.AfterFunc(100*time.Millisecond, func() { cancel(worker.ErrCancelled) })
		start := time.Now()
		x := m.Run(ctx, jobOf(m, payload), nil)
		if took := time.Since(start); x.Ending() != "cancelled" || took > 5*time.Second {
			t.Fatalf("%s: %s %q after %v; want cancelled", payload, x.Ending(), x.Reason, took)
		}
		if x := run(m, "a"); x.Ending() != "ack" || string(x.Output) != "1" {
			t.Fatalf("after the cancel: %s %q output %q; want ack on a new instance", x.Ending(), x.Reason, x.Output)
		}
	}
}

// TestServeLoopEnds: a retired module's idle loops end, and so do an engine's when it
// closes, even one whose guest ignores next_job's 0 (TestMain's goleak finds a loop
// left running).
func TestServeLoopEnds(t *testing.T) {
	t.Parallel()
	t.Run("retire", func(t *testing.T) {
		t.Parallel()
		e, m := servedOnEngine(t)
		t.Cleanup(func() { e.Close(context.Background()) })
		if x := run(m, "i"); x.Ending() != "ack" {
			t.Fatalf("%s %s", x.Ending(), x.Reason)
		}
		m.Retire()
		select {
		case <-m.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("the retired module did not close")
		}
		if n := host.ServeLoops(e); n != 0 {
			t.Fatalf("%d serve loops still run after the retire", n)
		}
	})
	t.Run("engine close", func(t *testing.T) {
		t.Parallel()
		e, m := servedOnEngine(t)
		if x := run(m, "i"); x.Ending() != "ack" {
			t.Fatalf("%s %s", x.Ending(), x.Reason)
		}
		done := make(chan error, 1)
		go func() { done <- e.Close(context.Background()) }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Close did not return")
		}
	})
}
