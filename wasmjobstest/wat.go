package wasmjobstest

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// wat2wasm is the tool WAT runs, from wabt (the WebAssembly Binary Toolkit).
const wat2wasm = "wat2wasm"

// watTimeout bounds one run of wat2wasm.
const watTimeout = time.Minute

// noWat2wasm is how WAT fails when wat2wasm is not on PATH: it names the package.
const noWat2wasm = "wasmjobstest: WAT needs " + wat2wasm + " on PATH: install wabt, the WebAssembly Binary Toolkit (Debian and Ubuntu: apt-get install wabt; macOS: brew install wabt)"

// WAT returns the module that the WebAssembly text src describes, as wabt's wat2wasm
// on PATH writes it. The test fails when wat2wasm is missing (saying which package
// holds it) or refuses src (with what it said).
func WAT(t testing.TB, src string) []byte {
	t.Helper()
	tool, err := exec.LookPath(wat2wasm)
	if err != nil {
		t.Fatalf("%s (%v)", noWat2wasm, err)
	}
	dir := t.TempDir()
	in, out := filepath.Join(dir, "module.wat"), filepath.Join(dir, "module.wasm")
	if err := os.WriteFile(in, []byte(src), 0o644); err != nil {
		t.Fatalf("wasmjobstest: WAT: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), watTimeout)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, tool, in, "-o", out)
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("wasmjobstest: WAT: %s refused the module (%v):\n%s", wat2wasm, err, bytes.TrimSpace(stderr.Bytes()))
	}
	wasm, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("wasmjobstest: WAT: reading what %s wrote: %v", wat2wasm, err)
	}
	return wasm
}
