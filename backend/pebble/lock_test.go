package pebble_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wasmjobs/wasmjobs/backend/internal/rig"
	pebblebackend "github.com/wasmjobs/wasmjobs/backend/pebble"
)

// A second process opening a directory in use fails at once with ErrLocked naming the
// directory (Pebble's own error is a bare EAGAIN). The test runs itself as the second
// process.
func TestSecondProcessOpenFails(t *testing.T) {
	if dir := os.Getenv("WASMJOBS_PEBBLE_LOCK_CHILD"); dir != "" {
		_, err := pebblebackend.Open(context.Background(), pebblebackend.Config{Dir: dir})
		fmt.Printf("locked=%v err=%v\n", errors.Is(err, pebblebackend.ErrLocked), err)
		return
	}
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "data")
	b := open(t, pebblebackend.Config{Dir: dir})
	defer rig.Close(t, b)
	cmd := exec.Command(os.Args[0], "-test.run=^TestSecondProcessOpenFails$", "-test.count=1")
	cmd.Env = append(os.Environ(), "WASMJOBS_PEBBLE_LOCK_CHILD="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("second process: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "locked=true") || !strings.Contains(string(out), dir) {
		t.Fatalf("second process got:\n%s\nwant ErrLocked naming %s", out, dir)
	}
}
