package host_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/wasmjobs/wasmjobs/abi"
	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/host"
	"github.com/wasmjobs/wasmjobs/internal/rigs/abitest"
	"github.com/wasmjobs/wasmjobs/worker"
)

// newEngine returns an engine without the disk cache, closed with the test.
func newEngine(t testing.TB) *host.Engine {
	t.Helper()
	return newEngineWith(t, host.Config{NoCache: true})
}

// newEngineWith returns an engine of cfg, closed with the test.
func newEngineWith(t testing.TB, cfg host.Config) *host.Engine {
	t.Helper()
	e, err := host.NewEngine(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(context.Background()) })
	return e
}

// loadSvc loads wasm as the module svc with man, failing the test if it cannot.
func loadSvc(t testing.TB, e *host.Engine, wasm []byte, man host.Manifest) *host.Module {
	t.Helper()
	m, err := e.Load(context.Background(), "svc", wasm, man)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// load loads a case's module with its manifest.
func load(t testing.TB, e *host.Engine, c abitest.Case) (*host.Module, error) {
	t.Helper()
	wasm := mustRead(t, c.Path())
	man, err := host.ParseManifest(c.ModuleName()+".toml", []byte(c.Manifest))
	if err != nil {
		t.Fatalf("manifest: %v", err)
	}
	return e.Load(context.Background(), c.ModuleName(), wasm, man)
}

// jobFor makes the case's job for m.
func jobFor(c abitest.Case, m *host.Module) *worker.Job {
	env := backend.NewEnvelope(m.Queue(), []byte(c.Payload))
	env.Headers, env.Round = c.Headers, c.Round
	job := &worker.Job{Envelope: env, Attempt: max(c.Attempt, 1), MaxAttempts: c.MaxAttempts, Round: c.Round, Awaited: c.Awaited}
	if job.MaxAttempts == 0 {
		job.MaxAttempts = m.Manifest().MaxAttempts
	}
	if job.MaxAttempts == 0 {
		job.MaxAttempts = abi.DefaultMaxAttempts
	}
	return job
}

var levelNames = map[string]string{"DEBUG": "debug", "INFO": "info", "WARN": "warn", "ERROR": "error"}

// TestConformance drives every module of testdata through the host and checks exactly
// what comes out, twice on each module: in both modes of a host's calls (a module that
// exports wasmjobs_serve served, and called once a job under Config.NoServe), each a
// second time, so that a pooled instance's second job, served by the same loop, is
// checked too. The command's tests run the same table through `wasmjobs invoke`.
func TestConformance(t *testing.T) {
	t.Parallel()
	for _, mode := range []struct {
		name string
		cfg  host.Config
	}{{"served", host.Config{NoCache: true}}, {"called", host.Config{NoCache: true, NoServe: true}}} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			conformance(t, newEngineWith(t, mode.cfg), !mode.cfg.NoServe)
		})
	}
}

// conformance runs the table on e, which serves modules that export wasmjobs_serve or
// does not.
func conformance(t *testing.T, e *host.Engine, serves bool) {
	for _, c := range abitest.Cases() {
		if c.ServeOnly && !serves {
			continue
		}
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			m, err := load(t, e, c)
			if c.Invalid != "" {
				if err == nil || !errors.Is(err, host.ErrInvalidModule) || !contains(err.Error(), c.Invalid) {
					t.Fatalf("Load = %v, want an invalid-module error containing %q", err, c.Invalid)
				}
				return
			}
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			defer m.Retire()
			conformanceRun(t, c, m)
			if !c.Stateful {
				conformanceRun(t, c, m)
			}
		})
	}
}

// conformanceRun runs the case's job on m and checks what comes out.
func conformanceRun(t *testing.T, c abitest.Case, m *host.Module) {
	job := jobFor(c, m)
	x := m.Run(context.Background(), job, nil)
	settle, reason := worker.Decide(job, x.Result(), m.Manifest().MaxDefers)
	if x.Ending() != c.Kind || settle.String() != c.Settle || reason != c.Reason {
		t.Errorf("kind %s, settle %s, reason %q; want %s, %s, %q", x.Ending(), settle, reason, c.Kind, c.Settle, c.Reason)
	}
	if (x.Code == nil) != (c.Code == nil) || (x.Code != nil && *x.Code != *c.Code) {
		t.Errorf("code %v, want %v", deref(x.Code), deref(c.Code))
	}
	var delay *int64
	if x.Delay != nil {
		d := x.Delay.Milliseconds()
		delay = &d
	}
	if (delay == nil) != (c.DelayMs == nil) || (delay != nil && *delay != *c.DelayMs) {
		t.Errorf("delay %v, want %v", deref(delay), deref(c.DelayMs))
	}
	if !c.OutputMatches(string(x.Output), job.Envelope.ID, m.Version(), m.Queue()) {
		t.Errorf("output %q, want %q", shorten(string(x.Output)), shorten(c.Output))
	}
	if len(x.Logs) != len(c.Logs) {
		t.Fatalf("%d log lines, want %d: %v", len(x.Logs), len(c.Logs), x.Logs)
	}
	for i, l := range x.Logs {
		if got := (abitest.Log{Level: levelNames[l.Level.String()], Msg: l.Msg}); got != c.Logs[i] {
			t.Errorf("log %d = %+v, want %+v", i, got, c.Logs[i])
		}
	}
	var children []abitest.Child
	if settle == worker.Ack || settle == worker.Wait {
		for _, ch := range x.Result().Children {
			children = append(children, abitest.Child{Queue: ch.Queue, Payload: string(ch.Payload), DelayMs: ch.Delay.Milliseconds(), Await: ch.Await})
		}
	}
	if len(children) != len(c.Enqueued) {
		t.Fatalf("enqueued %v, want %v", children, c.Enqueued)
	}
	for i := range children {
		if children[i] != c.Enqueued[i] {
			t.Errorf("child %d = %+v, want %+v", i, children[i], c.Enqueued[i])
		}
	}
}

func deref[T any](p *T) any {
	if p == nil {
		return "none"
	}
	return *p
}

func contains(s, sub string) bool { return len(sub) == 0 || indexOf(s, sub) >= 0 }

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

func shorten(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}

// TestNoWaitRefusesWaitImports: a host whose backend keeps no waiting jobs refuses, at
// load, a module that imports any function of fan-out and fan-in, naming the import and
// the backend; a module that imports none of them loads there as anywhere.
func TestNoWaitRefusesWaitImports(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		backend, want string
	}{
		{"rabbitmq (amqp://broker)", "imports wasmjobs.enqueue_awaited (fan-out and fan-in), which this host cannot serve: backend rabbitmq (amqp://broker) keeps no waiting jobs"},
		{"", "which this host cannot serve: the host's backend keeps no waiting jobs, so a WAIT could never resume"},
	} {
		e := newEngineWith(t, host.Config{NoCache: true, NoWait: true, Backend: tc.backend})
		for _, module := range []string{"abi/wait", "hostile/oob_wait"} {
			c := abitest.Case{Module: module}
			_, err := load(t, e, c)
			if err == nil || !errors.Is(err, host.ErrInvalidModule) || !contains(err.Error(), tc.want) {
				t.Errorf("backend %q: Load(%s) = %v, want an invalid-module error containing %q", tc.backend, module, err, tc.want)
			}
		}
		for _, module := range []string{"abi/enqueue", "hostile/oob"} {
			m, err := load(t, e, abitest.Case{Module: module})
			if err != nil {
				t.Fatalf("backend %q: %s, without the wait imports: %v", tc.backend, module, err)
			}
			m.Retire()
		}
	}
	// The load check asks abi.IsWaitFunc of each import: it must count all four wait
	// imports as such and no other import. (No module importing only round, children_len
	// or child_read is loaded here; this checks the predicate, not a load.)
	for _, fn := range []string{abi.FuncEnqueueAwaited, abi.FuncRound, abi.FuncChildrenLen, abi.FuncChildRead} {
		if !abi.IsWaitFunc(fn) {
			t.Errorf("abi.IsWaitFunc(%q) = false", fn)
		}
	}
	for _, fn := range []string{abi.FuncEnqueue, abi.FuncAttempt, "wait"} {
		if abi.IsWaitFunc(fn) {
			t.Errorf("abi.IsWaitFunc(%q) = true", fn)
		}
	}
}

// TestNoWaitFailsAWait: on a host that cannot serve waits, a module that returns WAIT
// without importing enqueue_awaited fails with a reason that names the backend.
func TestNoWaitFailsAWait(t *testing.T) {
	t.Parallel()
	e := newEngineWith(t, host.Config{NoCache: true, NoWait: true, Backend: "rabbitmq"})
	m := loadSvc(t, e, mustRead(t, filepath.Join(abitest.Dir(), "hostile", "wait_code.wasm")), host.Manifest{})
	defer m.Retire()
	x := m.Run(context.Background(), jobFor(abitest.Case{}, m), nil)
	if x.Ending() != string(host.CauseNoWait) || x.Reason != "wait: backend rabbitmq keeps no waiting jobs, so a WAIT could never resume" {
		t.Fatalf("ending %s reason %q", x.Ending(), x.Reason)
	}
}

// TestAwaitOutputCapMatches: the cap of an awaited child's output is the same in the
// ABI and in the backend contract.
func TestAwaitOutputCapMatches(t *testing.T) {
	t.Parallel()
	if abi.MaxChildOutput != backend.MaxAwaitOutput {
		t.Fatalf("abi.MaxChildOutput %d, backend.MaxAwaitOutput %d", abi.MaxChildOutput, backend.MaxAwaitOutput)
	}
}
