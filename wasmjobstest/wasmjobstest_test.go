package wasmjobstest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/memory"
	"github.com/wasmjobs/wasmjobs/server"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testdata reads a module of the repository's testdata.
func testdata(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("../testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// captureTB is the test's testing.TB, but for its failures, which it records: a Fatal
// ends the goroutine that called it, as it ends a test's. It keeps the cleanups the
// rigs register, for the test to run when it chooses (runCleanups).
type captureTB struct {
	testing.TB
	mu       sync.Mutex
	failures []string
	cleanups []func()
}

func (c *captureTB) record(msg string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failures = append(c.failures, msg)
}

func (c *captureTB) Errorf(format string, args ...any) { c.record(fmt.Sprintf(format, args...)) }
func (c *captureTB) Error(args ...any)                 { c.record(fmt.Sprint(args...)) }
func (c *captureTB) Fail()                             { c.record("Fail") }
func (c *captureTB) FailNow()                          { c.record("FailNow"); runtime.Goexit() }
func (c *captureTB) Fatal(args ...any)                 { c.record(fmt.Sprint(args...)); runtime.Goexit() }
func (c *captureTB) Fatalf(format string, args ...any) {
	c.record(fmt.Sprintf(format, args...))
	runtime.Goexit()
}

func (c *captureTB) Failed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.failures) > 0
}

func (c *captureTB) Cleanup(f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cleanups = append(c.cleanups, f)
}

// run calls f with c in a goroutine of its own (a Fatal ends it) and waits for it.
func (c *captureTB) run(f func(tb testing.TB)) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(c)
	}()
	<-done
}

// runCleanups runs the recorded cleanups, the last registered first.
func (c *captureTB) runCleanups() {
	c.mu.Lock()
	fs := c.cleanups
	c.cleanups = nil
	c.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}

// failure returns the one failure recorded; the test fails unless there is exactly one
// and it holds every one of want.
func (c *captureTB) failure(t *testing.T, want ...string) string {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.failures) != 1 {
		t.Fatalf("failures %q, want one", c.failures)
	}
	for _, w := range want {
		if !strings.Contains(c.failures[0], w) {
			t.Errorf("the failure %q does not say %q", c.failures[0], w)
		}
	}
	return c.failures[0]
}

// capture runs f with a captureTB of t and returns it, its cleanups run.
func capture(t *testing.T, f func(tb testing.TB)) *captureTB {
	t.Helper()
	c := &captureTB{TB: t}
	c.run(f)
	c.runCleanups()
	return c
}

// TestHostRunsAJob: a module added to a started host serves at once (AddModule waits),
// a job enqueued on it succeeds, and WaitState returns it with its output.
func TestHostRunsAJob(t *testing.T) {
	t.Parallel()
	h := NewHost(t, HostConfig{})
	h.AddModule("echo", testdata(t, "abi/echo.wasm"), "")
	id := h.Enqueue("echo", []byte("hello"))
	job := h.WaitState(id, "succeeded")
	if job.ID != id || job.Queue != "echo" || job.Output != "hello" || job.Attempt != 1 {
		t.Errorf("the job: %+v, want id %s on echo, output hello, attempt 1", job, id)
	}
	if got := h.Job(id); got != job {
		t.Errorf("Job after WaitState: %+v, want %+v", got, job)
	}
	if !strings.Contains(h.Log(), `msg="job settled"`) {
		t.Errorf("the host's log does not say the job settled:\n%s", h.Log())
	}
}

// TestTokenIsSent: on a host with a token, the rig's requests carry it, and a request
// without it is refused.
func TestTokenIsSent(t *testing.T) {
	t.Parallel()
	h := NewHost(t, HostConfig{Server: server.Config{Token: "s3cret"}})
	h.AddModule("echo", testdata(t, "abi/echo.wasm"), "")
	h.WaitState(h.Enqueue("echo", []byte("x")), "succeeded")
	resp, err := http.Get(h.URL() + "/v1/queues")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a request without the token: %d, want 401", resp.StatusCode)
	}
}

// TestStartServesWhatWasAdded: on a host not started, AddModule only writes; Start
// returns once the modules serve, a manifest's queue and a replaced manifest
// included.
func TestStartServesWhatWasAdded(t *testing.T) {
	t.Parallel()
	h := NewHost(t, HostConfig{NoStart: true})
	echo := testdata(t, "abi/echo.wasm")
	h.AddModule("echo", echo, "queue = \"first\"\n")
	h.AddModule("echo", echo, "queue = \"greetings\"\n") // before the start: nothing waits
	h.Start()
	h.WaitState(h.Enqueue("greetings", []byte("hi")), "succeeded")
	h.AddModule("echo", echo, "") // the manifest removed: the queue is echo again
	h.WaitState(h.Enqueue("echo", []byte("hi")), "succeeded")
}

// TestAddModuleAfterTheServersOwnStart: a host the test started through its Server,
// not Host.Start, is a started host to AddModule too: it waits until the module serves.
func TestAddModuleAfterTheServersOwnStart(t *testing.T) {
	t.Parallel()
	h := NewHost(t, HostConfig{NoStart: true})
	if err := h.Server().Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	h.AddModule("echo", testdata(t, "abi/echo.wasm"), "")
	h.WaitState(h.Enqueue("echo", []byte("hi")), "succeeded")
}

// TestAddModuleSaysWhyItWasRejected: a module the host refuses fails the test at the
// end of the wait with the host's reason, whether AddModule waited (a started host)
// or Start did.
func TestAddModuleSaysWhyItWasRejected(t *testing.T) {
	t.Parallel()
	for _, noStart := range []bool{false, true} {
		c := capture(t, func(tb testing.TB) {
			h := NewHost(tb, HostConfig{Wait: time.Second, NoStart: noStart})
			h.AddModule("bad", testdata(t, "hostile/no_marker.wasm"), "")
			if noStart {
				h.Start()
			}
			tb.Error("the host started with a module that cannot serve")
		})
		c.failure(t, "module bad version", "did not serve within 1s", "the host last said: rejected", "wasmjobs_abi_v1")
	}
}

// TestWaitStateSaysWhatItLastSaw: a job that never ends fails the wait with the
// state it is in; a job that finished in another state fails it at once, with its
// reason.
func TestWaitStateSaysWhatItLastSaw(t *testing.T) {
	t.Parallel()
	c := capture(t, func(tb testing.TB) {
		h := NewHost(tb, HostConfig{Wait: 500 * time.Millisecond, Server: server.Config{DrainTimeout: 100 * time.Millisecond}})
		h.AddModule("wait", testdata(t, "abi/wait_file.wasm"), "") // no directory: it waits for the drain
		id := h.Enqueue("wait", []byte("never"))
		h.WaitState(id, "succeeded")
		tb.Error("WaitState returned for a job still running")
	})
	c.failure(t, "not succeeded within 500ms", `last seen: state "running", attempt 1`)

	c = capture(t, func(tb testing.TB) {
		h := NewHost(tb, HostConfig{})
		h.AddModule("dead", testdata(t, "abi/dead_letter.wasm"), "")
		start := time.Now()
		defer func() {
			if took := time.Since(start); took > 10*time.Second {
				t.Errorf("WaitState took %v on a dead job: it waited for the end of the wait", took)
			}
		}()
		h.WaitState(h.Enqueue("dead", nil), "succeeded")
		tb.Error("WaitState returned for a dead job")
	})
	c.failure(t, "finished dead, want succeeded", `state "dead", attempt 1, reason`)
}

// TestEnqueueSaysWhatTheHostAnswered: a job the host refuses fails the test with the
// host's error.
func TestEnqueueSaysWhatTheHostAnswered(t *testing.T) {
	t.Parallel()
	c := capture(t, func(tb testing.TB) {
		h := NewHost(tb, HostConfig{})
		h.Enqueue("nowhere", []byte("x"))
		tb.Error("Enqueue returned for a queue nothing serves")
	})
	c.failure(t, `enqueue on queue "nowhere": `, "unknown queue")
}

// TestCleanupStopsTheHost: the test's cleanup stops the host: the backend is closed
// and the API no longer answers; a host stopped by the test is no failure.
func TestCleanupStopsTheHost(t *testing.T) {
	t.Parallel()
	for _, stopFirst := range []bool{false, true} {
		var h *Host
		c := capture(t, func(tb testing.TB) {
			h = NewHost(tb, HostConfig{})
			if stopFirst {
				if err := h.Server().Stop(context.Background()); err != nil {
					tb.Errorf("Stop: %v", err)
				}
			}
		})
		if c.Failed() {
			t.Fatalf("stopped by the test %v: %q", stopFirst, c.failures)
		}
		err := h.Backend().Publish(context.Background(), backend.NewEnvelope("q", nil), 0)
		if !errors.Is(err, backend.ErrShutDown) {
			t.Errorf("stopped by the test %v: Publish after the cleanup: %v, want ErrShutDown", stopFirst, err)
		}
		if status := h.Call("GET", "/readyz", "", nil); status != 0 {
			t.Errorf("stopped by the test %v: the API answers after the cleanup: %d", stopFirst, status)
		}
	}
}

// brokenStore is a memory backend whose store reports itself broken.
type brokenStore struct {
	*memory.Backend
	broken atomic.Bool
}

func (b *brokenStore) Err() error {
	if b.broken.Load() {
		return errors.New("the disk is full")
	}
	return nil
}

// TestCleanupReportsAFailedStop: when the host's Stop fails (its store broke), the
// cleanup fails the test with Stop's error.
func TestCleanupReportsAFailedStop(t *testing.T) {
	t.Parallel()
	b := &brokenStore{Backend: memory.New(memory.Config{})}
	c := capture(t, func(tb testing.TB) {
		h := NewHost(tb, HostConfig{Backend: b})
		b.broken.Store(true)
		select {
		case <-h.Server().Done():
		case <-time.After(10 * time.Second):
			tb.Fatal("the host did not see its store fail")
		}
	})
	c.failure(t, "wasmjobstest: stopping the host", "the disk is full")
}

// haveWat2wasm skips the test when wat2wasm is missing, except under CI (CI=true),
// which installs it: there its absence fails the test.
func haveWat2wasm(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath(wat2wasm); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not on PATH under CI, which installs wabt", wat2wasm)
		}
		t.Skipf("%s is not on PATH (install wabt)", wat2wasm)
	}
}

// TestWAT: WAT makes the module of the text, which a host serves.
func TestWAT(t *testing.T) {
	t.Parallel()
	haveWat2wasm(t)
	wasm := WAT(t, string(testdata(t, "abi/echo.wat")))
	if !bytes.HasPrefix(wasm, []byte("\x00asm")) {
		t.Fatalf("WAT returned %q, not a module", wasm)
	}
	h := NewHost(t, HostConfig{})
	h.AddModule("echo", wasm, "")
	if job := h.WaitState(h.Enqueue("echo", []byte("from WAT")), "succeeded"); job.Output != "from WAT" {
		t.Errorf("output %q, want from WAT", job.Output)
	}
}

// TestWATSaysWhatWat2wasmSaid: text wat2wasm refuses fails the test with what it said.
func TestWATSaysWhatWat2wasmSaid(t *testing.T) {
	t.Parallel()
	haveWat2wasm(t)
	c := capture(t, func(tb testing.TB) {
		WAT(tb, "(module (func (export \"f\") (i32.nonsense)))")
		tb.Error("WAT returned for text that is no module")
	})
	c.failure(t, "wasmjobstest: WAT: wat2wasm refused the module", "nonsense")
}

// TestWATNamesThePackageWhenTheToolIsMissing: without wat2wasm on PATH, WAT fails the
// test with the tool's name and the package that holds it. Not parallel: it empties
// PATH.
func TestWATNamesThePackageWhenTheToolIsMissing(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	c := capture(t, func(tb testing.TB) {
		WAT(tb, "(module)")
		tb.Error("WAT returned without wat2wasm")
	})
	c.failure(t, "wat2wasm", "wabt", "apt-get install wabt")
}
