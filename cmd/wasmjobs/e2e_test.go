package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/internal/rigs/abitest"
)

// host is a `wasmjobs run` process.
type hostProc struct {
	t    *testing.T
	cmd  *exec.Cmd
	url  string
	dir  string
	mu   sync.Mutex
	logs bytes.Buffer
	done chan error
}

var apiLine = regexp.MustCompile(`msg="wasmjobs serving" api=(https?://\S+)`)

// startHost starts `wasmjobs run` on dir with extra flags and waits until it serves.
func startHost(t *testing.T, dir string, flags ...string) *hostProc {
	t.Helper()
	args := append([]string{"run", "--modules", dir, "--listen", "127.0.0.1:0", "--log-level", "debug"}, flags...)
	h := &hostProc{t: t, cmd: exec.Command(binary, args...), dir: dir, done: make(chan error, 1)}
	// The default backend keeps its data in ./wasmjobs-data: a test's host keeps it in a
	// directory of its own unless its flags name one.
	h.cmd.Env = append(os.Environ(), "WASMJOBS_CACHE_DIR="+t.TempDir(), "WASMJOBS_DATA_DIR="+t.TempDir(), "GORACE=atexit_sleep_ms=0")
	stderr, err := h.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := h.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			h.mu.Lock()
			h.logs.WriteString(line + "\n")
			h.mu.Unlock()
			if m := apiLine.FindStringSubmatch(line); m != nil {
				urls <- m[1]
			}
		}
		h.done <- h.cmd.Wait()
	}()
	t.Cleanup(func() {
		h.cmd.Process.Kill()
		if t.Failed() {
			t.Logf("host log:\n%s", h.log())
		}
	})
	select {
	case h.url = <-urls:
	case err := <-h.done:
		t.Fatalf("wasmjobs run exited: %v\n%s", err, h.log())
	case <-time.After(30 * time.Second):
		t.Fatalf("wasmjobs run did not start:\n%s", h.log())
	}
	return h
}

// startEchoHost starts a host whose modules directory (h.dir) holds testdata's echo
// module, serving the queue echo.
func startEchoHost(t *testing.T, flags ...string) *hostProc {
	t.Helper()
	dir := t.TempDir()
	installModule(t, dir, "abi/echo", "echo", "1")
	return startHost(t, dir, flags...)
}

// metrics returns the host's /metrics page.
func (h *hostProc) metrics() string {
	h.t.Helper()
	_, page := h.send("GET", "/metrics", "")
	return page
}

// send sends a request to the host, with the header's name and value pairs ("Host"
// sets the request's Host), and returns the status and the answer.
func (h *hostProc) send(method, path, body string, header ...string) (int, string) {
	h.t.Helper()
	req, err := http.NewRequest(method, h.url+path, strings.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i] == "Host" {
			req.Host = header[i+1]
		} else {
			req.Header.Set(header[i], header[i+1])
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (h *hostProc) log() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.logs.String()
}

// exited waits up to within for the host's exit and returns its error; the test fails
// if the host still runs then.
func (h *hostProc) exited(within time.Duration) error {
	h.t.Helper()
	select {
	case err := <-h.done:
		return err
	case <-time.After(within):
		h.t.Fatalf("the host did not exit within %v:\n%s", within, h.log())
		return nil
	}
}

// stopWithin drains the host with SIGTERM and waits up to within for its exit, which
// must be clean.
func (h *hostProc) stopWithin(within time.Duration) {
	h.t.Helper()
	h.cmd.Process.Signal(syscall.SIGTERM)
	if err := h.exited(within); err != nil {
		h.t.Fatalf("exit after SIGTERM: %v\n%s", err, h.log())
	}
}

// stop drains a host with SIGTERM and waits for it to exit.
func (h *hostProc) stop() { h.t.Helper(); h.stopWithin(30 * time.Second) }

// post sends a JSON body to the host and returns the status and the answer.
func (h *hostProc) post(path, body string) (int, string) {
	h.t.Helper()
	return h.send("POST", path, body, "Content-Type", "application/json")
}

// stopHost sends sig to the host and waits for its exit, which must be clean.
func stopHost(t *testing.T, h *hostProc, sig syscall.Signal) {
	t.Helper()
	h.cmd.Process.Signal(sig)
	if err := h.exited(time.Minute); err != nil && sig != syscall.SIGKILL {
		t.Fatalf("the host's exit after %v: %v\n%s", sig, err, h.log())
	}
}

// get decodes GET path's JSON answer into out and returns the status.
func (h *hostProc) get(path string, out any) int {
	h.t.Helper()
	status, b := h.send("GET", path, "")
	if out != nil {
		if err := json.Unmarshal([]byte(b), out); err != nil {
			h.t.Fatalf("GET %s: %v: %s", path, err, b)
		}
	}
	return status
}

// waitFor polls cond for up to 30 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// installModule writes testdata's module rel into dir as name.wasm (atomically), with
// a custom section making its bytes unique to tag.
func installModule(t *testing.T, dir, rel, name, tag string) {
	t.Helper()
	wasm, err := os.ReadFile(filepath.Join(abitest.Dir(), rel+".wasm"))
	if err != nil {
		t.Fatal(err)
	}
	sec := append([]byte{4}, "test"...)
	sec = append(sec, tag...)
	wasm = append(append(wasm, 0, byte(len(sec))), sec...)
	tmp := filepath.Join(dir, ".tmp-"+name)
	if err := os.WriteFile(tmp, wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name+".wasm")); err != nil {
		t.Fatal(err)
	}
}

// writeManifest writes text as the manifest of the module name in dir.
func writeManifest(t *testing.T, dir, name, text string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name+".toml"), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

type jobState struct {
	ID, Queue, State, Reason, Output string
	Attempt                          int
	Module                           struct{ Name, Version string }
}

// TestEndToEnd runs the real binary: enqueue through the CLI, follow jobs to succeeded
// through the API, read the metrics, swap the module live, and drain on SIGTERM.
func TestEndToEnd(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	installModule(t, dir, "abi/sleep_ms", "work", "v1")
	writeManifest(t, dir, "work", "# e2e\nmax_attempts = 3\n")
	h := startHost(t, dir, "--concurrency", "4", "--drain-timeout", "20s")
	if code := h.get("/readyz", nil); code != 200 {
		t.Fatalf("readyz %d", code)
	}

	// Enqueue through the CLI and follow the jobs to succeeded.
	r := wasmjobs(t, "", "enqueue", "work", "5", "--count", "3", "--server", h.url)
	ids := strings.Fields(r.stdout)
	if r.code != 0 || len(ids) != 3 {
		t.Fatalf("enqueue: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	var modules struct {
		Modules []struct{ Name, Version, Status, Queue string }
	}
	h.get("/v1/modules", &modules)
	if len(modules.Modules) != 1 || modules.Modules[0].Status != "serving" {
		t.Fatalf("modules %+v", modules)
	}
	v1 := modules.Modules[0].Version
	for _, id := range ids {
		var st jobState
		waitFor(t, "job "+id+" to succeed", func() bool { h.get("/v1/jobs/"+id, &st); return st.State == "succeeded" })
		if st.Output != "slept" || st.Module.Name != "work" || st.Module.Version != v1 || st.Attempt != 1 || st.Queue != "work" {
			t.Fatalf("job %+v", st)
		}
	}
	if r := wasmjobs(t, "", "jobs", "get", ids[0], "--server", h.url); r.code != 0 || !strings.Contains(r.stdout, `"state": "succeeded"`) {
		t.Fatalf("jobs get: %d %q %q", r.code, r.stdout, r.stderr)
	}

	// The metrics count them.
	metrics := h.metrics()
	for _, want := range []string{`wasmjobs_jobs_total{module="work",queue="work",settle="ack"} 3`,
		fmt.Sprintf(`wasmjobs_module_info{module="work",role="current",version="%s"} 1`, v1), `wasmjobs_module_events_total{kind="loaded",module="work"} 1`} {
		if !strings.Contains(metrics, want) {
			t.Fatalf("metrics lack %q:\n%s", want, metrics)
		}
	}

	// Swap the module: the new version goes on trial; promote it from the CLI and see it
	// serve.
	installModule(t, dir, "abi/sleep_ms", "work", "v2")
	var trial struct {
		Modules []struct{ Canary *struct{ Version string } }
	}
	waitFor(t, "the canary", func() bool { h.get("/v1/modules", &trial); return trial.Modules[0].Canary != nil })
	if r := wasmjobs(t, "", "modules", "promote", "work", "--server", h.url); r.code != 0 || !strings.Contains(r.stdout, "promoted by an operator") {
		t.Fatalf("modules promote: %d %q %q", r.code, r.stdout, r.stderr)
	}
	waitFor(t, "the swap", func() bool {
		h.get("/v1/modules", &modules)
		return modules.Modules[0].Version != v1
	})
	v2 := modules.Modules[0].Version
	r = wasmjobs(t, "", "enqueue", "work", "1", "--server", h.url)
	id := strings.TrimSpace(r.stdout)
	var st jobState
	waitFor(t, "a job on the new version", func() bool { h.get("/v1/jobs/"+id, &st); return st.State == "succeeded" })
	if st.Module.Version != v2 {
		t.Fatalf("after the swap the job ran on %s, want %s", st.Module.Version, v2)
	}

	// SIGTERM during load: running jobs finish and settle, and the host says so.
	const n = 200
	r = wasmjobs(t, "", "enqueue", "work", "40", "--count", fmt.Sprint(n), "-q", "--server", h.url)
	if r.code != 0 {
		t.Fatalf("enqueue: %d %s", r.code, r.stderr)
	}
	waitFor(t, "jobs running", func() bool { return strings.Count(h.log(), `msg="job settled"`) >= 4+10 })
	h.stopWithin(20 * time.Second)
	log := h.log()
	settled := strings.Count(log, `msg="job settled"`) - 4 // the 4 jobs before
	queued := 0
	if m := regexp.MustCompile(`queued jobs are (?:dropped at exit|kept for the next start)" queued=(\d+)`).FindStringSubmatch(log); m != nil {
		fmt.Sscan(m[1], &queued)
	}
	for _, bad := range []string{"abandoned", "settle failed", "drain timeout", "level=ERROR"} {
		if strings.Contains(log, bad) {
			t.Fatalf("the drain logged %q", bad)
		}
	}
	if !strings.Contains(log, `msg="drained: every running job finished and settled" running=0`) || settled+queued != n || settled < 10 || queued == 0 {
		t.Fatalf("after SIGTERM: %d settled + %d reported queued, want %d in all, some of each", settled, queued, n)
	}
	t.Logf("SIGTERM during load: %d jobs settled, %d still queued and reported, none running or abandoned", settled, queued)
}
