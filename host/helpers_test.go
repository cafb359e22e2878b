package host_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/memory"
	"github.com/wasmjobs/wasmjobs/backend/pebble"
	"github.com/wasmjobs/wasmjobs/host"
	"github.com/wasmjobs/wasmjobs/internal/rigs/abitest"
	"github.com/wasmjobs/wasmjobs/worker"
)

// TestMain fails the package if a goroutine outlives its tests: the registry's follow
// loop, a worker's, a module's.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// backendWithQueues returns a memory backend with the queues declared, closed with the
// test.
func backendWithQueues(t testing.TB, queues ...string) *memory.Backend {
	t.Helper()
	b := memory.New(memory.Config{})
	t.Cleanup(func() { b.Close(context.Background()) })
	for _, q := range queues {
		if err := b.Declare(context.Background(), backend.QueueConfig{Name: q}); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

// mustRead returns the file's bytes, failing the test if it cannot read them.
func mustRead(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// testdataModule returns testdata's module rel (without .wasm).
func testdataModule(t testing.TB, rel string) []byte {
	t.Helper()
	return mustRead(t, filepath.Join(abitest.Dir(), rel+".wasm"))
}

// variant returns testdata's module rel with a custom section naming tag appended:
// the same code, different bytes, so a different version.
func variant(t testing.TB, rel, tag string) []byte {
	t.Helper()
	wasm := testdataModule(t, rel)
	name := "wasmjobs-test"
	body := append([]byte{byte(len(name))}, name...)
	body = append(body, tag...)
	return append(append(wasm, 0, byte(len(body))), body...) // section id 0, size < 128
}

// jobOf returns a job of m's queue with payload: the first of three attempts.
func jobOf(m *host.Module, payload string) *worker.Job {
	return &worker.Job{Envelope: backend.NewEnvelope(m.Queue(), []byte(payload)), Attempt: 1, MaxAttempts: 3}
}

// run runs jobOf(m, payload) on m.
func run(m *host.Module, payload string) host.Execution {
	return m.Run(context.Background(), jobOf(m, payload), nil)
}

// logBuffer is an io.Writer for a slog handler that tests read while the registry logs.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// quietQueues serves no queue: for a registry whose modules run no job.
type quietQueues struct{}

func (quietQueues) Register(context.Context, worker.Queue) error { return nil }
func (quietQueues) Unregister(context.Context, string) error     { return nil }

// loadModule loads wasm as the module name with man, failing the test if it cannot;
// the module retires with the test.
func loadModule(t testing.TB, e *host.Engine, name string, wasm []byte, man host.Manifest) *host.Module {
	t.Helper()
	m, err := e.Load(context.Background(), name, wasm, man)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Retire)
	return m
}

// idleWorker returns a worker, never started, on a memory backend closed with the
// test: the Queues of a registry whose modules run no job.
func idleWorker(t testing.TB) *worker.Worker {
	return worker.New(backendWithQueues(t), worker.Config{})
}

// openPebble opens a Pebble store in a temporary directory, closed with the test.
func openPebble(t testing.TB) *pebble.Backend {
	t.Helper()
	b, err := pebble.Open(context.Background(), pebble.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close(context.Background()) })
	return b
}

// serve runs m's queue on a new worker of cfg over b, and returns its stop: the
// drain, within a minute, done once. The test stops it at its end if it has not
// already, failing if the drain fails.
func serve(t testing.TB, b backend.Backend, m *host.Module, cfg worker.Config) (stop func() error) {
	t.Helper()
	w := worker.New(b, cfg)
	if err := w.Register(context.Background(), host.NewHandler(m, nil).Queue()); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	stop = sync.OnceValue(func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		return w.Stop(ctx)
	})
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("worker stop: %v", err)
		}
	})
	return stop
}
