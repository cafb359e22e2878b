// Package inspecttest is the one rig of the API's and the dashboard's tests: an
// inspect.Inspector over a backend (a fresh memory backend unless one is given) with a
// registry of the repository's test modules (testdata, built from WAT), and, when
// asked, a started worker that runs their jobs. Everything it starts stops with the
// test.
package inspecttest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/memory"
	"github.com/wasmjobs/wasmjobs/host"
	"github.com/wasmjobs/wasmjobs/internal/app/inspect"
	"github.com/wasmjobs/wasmjobs/internal/app/metrics"
	"github.com/wasmjobs/wasmjobs/internal/rigs/abitest"
	"github.com/wasmjobs/wasmjobs/worker"
)

// Module is a module of the rig's directory.
type Module struct {
	// Name is the module's name, and its queue's unless Manifest names another.
	Name string
	// Wasm is the module's file under testdata, without ".wasm", such as "abi/echo".
	Wasm string
	// Manifest is the module's manifest (its .toml); none when empty.
	Manifest string
}

// Echo is the module "echo", which acknowledges each job with its payload.
var Echo = Module{Name: "echo", Wasm: "abi/echo"}

// Options say what a rig holds. The zero Options are a memory backend, the module
// Echo, no worker, and a memory of 100 jobs.
type Options struct {
	// Backend is the backend, closed with the test; nil means a fresh memory backend.
	Backend backend.Backend
	// Modules are the registry's modules; nil means Echo alone.
	Modules []Module
	// Run starts a worker that takes the modules' queues and runs their jobs. Without
	// it nothing consumes: each module's queue is declared on the backend and jobs
	// stay where they are put.
	Run bool
	// Records is the host's memory of jobs where the backend keeps no job records;
	// nil means a fresh one of 100 jobs.
	Records *inspect.Records
	// NoRecords keeps no memory of jobs (as a host whose backend keeps records).
	NoRecords bool
	// Inspect changes the Inspector's configuration before it is made.
	Inspect func(*inspect.Config)
}

// Rig is what New built.
type Rig struct {
	Backend  backend.Backend
	Registry *host.Registry
	// Worker runs the jobs (Options.Run); nil without.
	Worker *worker.Worker
	// Records is the host's memory of jobs the Inspector reads; nil on a backend with
	// job records of its own, or with Options.NoRecords.
	Records *inspect.Records
	// Metrics observes the worker and the registry.
	Metrics   *metrics.Metrics
	Inspector *inspect.Inspector
}

// noQueues serves no queue: nothing consumes.
type noQueues struct{}

func (noQueues) Register(context.Context, worker.Queue) error { return nil }
func (noQueues) Unregister(context.Context, string) error     { return nil }

// New builds a rig for t.
func New(t testing.TB, o Options) *Rig {
	t.Helper()
	ctx := context.Background()
	r := &Rig{Backend: o.Backend, Metrics: metrics.New()}
	if r.Backend == nil {
		r.Backend = memory.New(memory.Config{})
	}
	if r.Records = inspect.RecordsFor(r.Backend, 100); r.Records != nil && o.Records != nil {
		r.Records = o.Records
	}
	if o.NoRecords {
		r.Records = nil
	}
	dir := t.TempDir()
	mods := o.Modules
	if mods == nil {
		mods = []Module{Echo}
	}
	for _, m := range mods {
		wasm, err := os.ReadFile(filepath.Join(abitest.Dir(), filepath.FromSlash(m.Wasm)+".wasm"))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, m.Name+".wasm"), wasm, 0o644)
		if m.Manifest != "" {
			os.WriteFile(filepath.Join(dir, m.Name+".toml"), []byte(m.Manifest), 0o644)
		}
	}
	e, err := host.NewEngine(ctx, host.Config{NoCache: true})
	if err != nil {
		t.Fatal(err)
	}
	var queues host.Queues = noQueues{}
	if o.Run {
		r.Worker = worker.New(r.Backend, worker.Config{Observer: worker.Observers(r.Records, r.Metrics)})
		queues = r.Worker
	}
	r.Registry, err = host.NewRegistry(host.RegistryConfig{Dir: dir, Engine: e, Queues: queues, Rescan: time.Hour, OnEvent: r.Metrics.ModuleEvent})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.Registry.Close()
		if r.Worker != nil {
			r.Worker.Stop(ctx)
		}
		r.Registry.Retire()
		r.Backend.Close(ctx)
		e.Close(ctx)
	})
	if o.Run {
		if err := r.Registry.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if err := r.Worker.Start(ctx); err != nil {
			t.Fatal(err)
		}
	} else {
		r.Registry.Sync(ctx)
		for _, m := range mods {
			if err := r.Backend.Declare(ctx, backend.QueueConfig{Name: m.Name}); err != nil {
				t.Fatal(err)
			}
		}
	}
	cfg := inspect.Config{Backend: r.Backend, Registry: r.Registry, Records: r.Records}
	if r.Worker != nil {
		cfg.Running, cfg.CancelRunning = r.Worker.Running, r.Worker.Cancel
	}
	if o.Inspect != nil {
		o.Inspect(&cfg)
	}
	r.Inspector = inspect.New(cfg)
	return r
}

// CallDown returns a call that runs the module "caller" (Caller) of r once, as the
// worker would run a job, against a server that answers 503, and that server's
// address, its circuit breakers' destination: each call is one failure there.
func (r *Rig) CallDown(t testing.TB) (dest string, call func()) {
	t.Helper()
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) }))
	t.Cleanup(down.Close)
	h := r.Registry.Handler("caller")
	if h == nil {
		t.Fatalf("caller not served: %+v", r.Registry.Modules())
	}
	return "http://" + down.Listener.Addr().String(), func() {
		h.Handle(context.Background(), &worker.Job{Envelope: backend.NewEnvelope("caller", []byte(down.URL+"/")), Attempt: 1, MaxAttempts: 3})
	}
}

// Caller is the module "caller", which posts its payload (a URL) and retries the job
// when the answer is not 2xx, allowed to call any port of 127.0.0.1, with more of the
// [http] table (such as "breaker_failures = 2\n").
func Caller(http string) Module {
	return Module{Name: "caller", Wasm: "abi/http_post_retry", Manifest: "[http]\nallow = [\"http://127.0.0.1:1-65535\"]\n" + http}
}

// Refusal is an inspect.Config.Refusal that refuses with inspect.ErrDraining while
// accepting reports false, as a host that is not started or drains does.
func Refusal(accepting func() bool) func() error {
	return func() error {
		if accepting() {
			return nil
		}
		return inspect.ErrDraining
	}
}
