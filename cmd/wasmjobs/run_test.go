package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRunRefusesAMissingKeyPair: a --tls-cert that cannot be read stops run at its
// start with an error naming the file, not with a listener that fails unseen and an
// exit status of 0.
func TestRunRefusesAMissingKeyPair(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.pem")
	r := wasmjobs(t, "", "run", "--modules", dir, "--backend", "memory", "--listen", "127.0.0.1:0",
		"--tls-cert", missing, "--tls-key", missing)
	if r.code == 0 || !strings.Contains(r.stderr, missing) {
		t.Fatalf("run with a missing key pair: exit %d, stderr %q; want a failure naming %s", r.code, r.stderr, missing)
	}
}

// TestRunTakesANegativeHistory: --history 0 or less means the default, as it did
// before run was built on the server package (which refuses a negative History).
func TestRunTakesANegativeHistory(t *testing.T) {
	t.Parallel()
	f := &runFlags{modules: t.TempDir(), backend: "memory", concurrency: 1, listen: "127.0.0.1:0",
		drainTimeout: 5 * time.Second, logFormat: "text", logLevel: "info", history: -1}
	sigs := make(chan os.Signal, 1)
	p := serveInProcess(f, t.TempDir(), sigs, func() {})
	p.waitServing(t)
	sigs <- syscall.SIGTERM
	if err := p.result(t, 10*time.Second); err != nil {
		t.Fatalf("run --history -1: %v", err)
	}
}
