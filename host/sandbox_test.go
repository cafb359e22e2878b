package host_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/internal/rigs/abitest"
	"github.com/wasmjobs/wasmjobs/worker"
)

// TestSandbox has a guest try to open host files, escape a granted directory, list a
// directory, read the environment and accept on a socket: it gets nothing unless the
// manifest grants exactly that (WASI errno 8 is EBADF, 63 EPERM).
func TestSandbox(t *testing.T) { // not parallel: it sets an environment variable
	e := newEngine(t)
	root := t.TempDir()
	granted := filepath.Join(root, "granted")
	os.Mkdir(granted, 0o755)
	os.WriteFile(filepath.Join(granted, "secret.txt"), []byte("top secret"), 0o644)
	os.WriteFile(filepath.Join(root, "outside.txt"), []byte("outside"), 0o644)
	t.Setenv("WASMJOBS_TEST_HOST_SECRET", "the host's") // never visible to a guest
	for _, tc := range []struct {
		name, manifest string
		want           map[string]string
	}{
		{"nothing granted", "", map[string]string{
			"o": "open=8", "x": "escape=63", "l": "ls=8", "e": "env=0", "s": "sock=8"}},
		{"a directory and two variables granted", fmt.Sprintf("dirs = [%q]\n\n[env]\nA = \"1\"\nB = \"2\"", granted+":/data"), map[string]string{
			"o": "open=0 data=top secret", "x": "escape=63", "l": "ls=0", "e": "env=2", "s": "sock=8"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := load(t, e, abitest.Case{Module: "hostile/sandbox", Manifest: tc.manifest})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Retire()
			for payload, want := range tc.want {
				x := m.Run(context.Background(), &worker.Job{Envelope: backend.NewEnvelope("q", []byte(payload)), Attempt: 1, MaxAttempts: 1}, nil)
				if x.Outcome != worker.Ack || string(x.Output) != want {
					t.Errorf("%s: %s %q, output %q; want %q", payload, x.Ending(), x.Reason, x.Output, want)
				}
			}
		})
	}
}
