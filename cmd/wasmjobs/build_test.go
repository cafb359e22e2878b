package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBuildTypeScriptInProcess builds a TypeScript handler with `wasmjobs build` (esbuild's
// Go API, the engine from node_modules, tsc from there too) and runs it; without the
// engine it fails with the npm command that installs it.
func TestBuildTypeScriptInProcess(t *testing.T) {
	t.Parallel()
	sdk, err := filepath.Abs(filepath.Join("..", "..", "guest-sdk", "javascript"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(sdk, "node_modules", "quickjs-wasi", "quickjs.wasm")); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("guest-sdk/javascript/node_modules is missing: CI runs make guests first")
		}
		t.Skip("run npm ci in guest-sdk/javascript (make guests)")
	}
	dir := t.TempDir()
	for _, f := range []string{"wasmjobs.js", "wasmjobs.d.ts"} {
		b, err := os.ReadFile(filepath.Join(sdk, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	entry := filepath.Join(dir, "handler.ts")
	src := `import { type Job, deadLetter } from "./wasmjobs.js";
export default async function handle(job: Job): Promise<void> {
  const order = job.json<{ id?: number }>();
  if (order.id === undefined) throw deadLetter("no id");
  job.output("order " + order.id);
}
`
	if err := os.WriteFile(entry, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}

	r := wasmjobs(t, "", "build", entry)
	if r.code != exitUsage || !strings.Contains(r.stderr, "npm install quickjs-wasi@3.7.0") {
		t.Fatalf("without node_modules: %d %q", r.code, r.stderr)
	}

	if err := os.Symlink(filepath.Join(sdk, "node_modules"), filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "orders.wasm")
	if r := wasmjobs(t, "", "build", entry, "-o", out); r.code != 0 || strings.Contains(r.stdout, "types not checked") {
		t.Fatalf("build: %d %q %q", r.code, r.stdout, r.stderr)
	}
	if r := wasmjobs(t, "", "invoke", out, "--payload", `{"id":7}`, "--json"); r.code != 0 || !strings.Contains(r.stdout, `"output":"order 7"`) {
		t.Fatalf("invoke: %d %q %q", r.code, r.stdout, r.stderr)
	}

	// A type error stops the build.
	if err := os.WriteFile(entry, []byte(strings.Replace(src, "order.id === undefined", "order.id === \"x\"", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := wasmjobs(t, "", "build", entry, "-o", out); r.code == 0 || !strings.Contains(r.stderr, "type errors") {
		t.Fatalf("build with a type error: %d %q", r.code, r.stderr)
	}
}
