package main

import (
	"path/filepath"
	"strings"
	"testing"
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
