package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	pebbledb "github.com/cockroachdb/pebble/v2"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/pebble"
)

// stopHost sends sig to the host and waits for its exit, which must be clean.
func stopHost(t *testing.T, h *hostProc, sig syscall.Signal) {
	t.Helper()
	h.cmd.Process.Signal(sig)
	select {
	case err := <-h.done:
		if err != nil && sig != syscall.SIGKILL {
			t.Fatalf("the host's exit after %v: %v\n%s", sig, err, h.log())
		}
	case <-time.After(time.Minute):
		t.Fatalf("the host did not exit within a minute of %v", sig)
	}
}

// A second `run` on a data directory in use fails at once, naming the directory.
func TestSecondRunOnTheDataDirFails(t *testing.T) {
	t.Parallel()
	dir, data := t.TempDir(), t.TempDir()
	installModule(t, dir, "abi/echo", "echo", "1")
	h := startHost(t, dir, "--data-dir", data)
	if !strings.Contains(h.log(), `msg="data directory opened" data_dir=`+data) {
		t.Fatalf("the host does not say where its data is:\n%s", h.log())
	}
	start := time.Now()
	r := wasmjobs(t, "", "run", "--modules", dir, "--listen", "127.0.0.1:0", "--data-dir", data)
	if r.code == 0 || !strings.Contains(r.stderr, data) || !strings.Contains(r.stderr, "in use") {
		t.Fatalf("a second run on %s: exit %d, stderr %q; want a failure naming the directory", data, r.code, r.stderr)
	}
	t.Logf("the second run failed in %v: %s", time.Since(start).Round(time.Millisecond), strings.TrimSpace(r.stderr))
	stopHost(t, h, syscall.SIGTERM)
}

// A damaged data directory is refused at start, with the file and the problem named:
// never an empty queue in place of the real one.
func TestDamagedDataDirRefusesToStart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir, data := t.TempDir(), filepath.Join(t.TempDir(), "data")
	installModule(t, dir, "abi/echo", "echo", "1")
	b, err := pebble.Open(ctx, pebble.Config{Dir: data})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Declare(ctx, backend.QueueConfig{Name: "echo"}); err != nil {
		t.Fatal(err)
	}
	for range 500 {
		if err := b.Publish(ctx, backend.NewEnvelope("echo", []byte(strings.Repeat("payload ", 20))), time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	db, err := pebbledb.Open(data, &pebbledb.Options{}) // into a table, to damage it
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	db.Close()
	tables, _ := filepath.Glob(filepath.Join(data, "*.sst"))
	if len(tables) == 0 {
		t.Fatal("no table to damage")
	}
	raw, err := os.ReadFile(tables[0])
	if err != nil {
		t.Fatal(err)
	}
	for i := 100; i < 110; i++ {
		raw[i] ^= 0xff
	}
	os.WriteFile(tables[0], raw, 0o644)
	r := wasmjobs(t, "", "run", "--modules", dir, "--listen", "127.0.0.1:0", "--data-dir", data)
	if r.code == 0 || !strings.Contains(r.stderr, filepath.Base(tables[0])) || !strings.Contains(r.stderr, "damaged") {
		t.Fatalf("run on a damaged directory: exit %d, stderr %q; want a refusal naming %s", r.code, r.stderr, filepath.Base(tables[0]))
	}
	t.Log(strings.TrimSpace(r.stderr))
}
