package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// toolchain reports whether lang's toolchain is here; under CI it must be.
func toolchain(t *testing.T, lang string) {
	t.Helper()
	need := map[string]string{"go": "go", "c": "clang", "rust": "/usr/bin/rustc", "assemblyscript": "npm", "javascript": "npm", "typescript": "npm"}[lang]
	if _, err := exec.LookPath(need); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s not found: CI installs every guest toolchain", need)
		}
		t.Skipf("%s not found: the %s toolchain is not installed", need, lang)
	}
}

// TestNewBuildsAndValidates makes a project in each language, builds it with its one
// command, and validates and runs the module.
func TestNewBuildsAndValidates(t *testing.T) {
	t.Parallel()
	for _, lang := range []string{"go", "c", "rust", "assemblyscript", "javascript", "typescript"} {
		t.Run(lang, func(t *testing.T) {
			t.Parallel()
			toolchain(t, lang)
			dir := t.TempDir()
			name := "hello-" + lang
			r := wasmjobs(t, "", "new", "--lang", lang, "--dir", dir, name)
			if r.code != 0 || !strings.Contains(r.stdout, "made "+filepath.Join(dir, name)) {
				t.Fatalf("new: %d %q %q", r.code, r.stdout, r.stderr)
			}
			build := exec.Command("./build.sh")
			build.Dir = filepath.Join(dir, name)
			build.Env = os.Environ()
			if lang == "rust" {
				build.Env = append(build.Env, "RUSTC=/usr/bin/rustc") // Debian's has the wasm32 standard library
			}
			if out, err := build.CombinedOutput(); err != nil {
				t.Fatalf("build.sh: %v\n%s", err, out)
			}
			wasm := filepath.Join(dir, name, name+".wasm")
			if r := wasmjobs(t, "", "modules", "validate", wasm); r.code != 0 || !strings.Contains(r.stdout, "OK version") {
				t.Fatalf("validate: %d %q", r.code, r.stdout)
			}
			r = wasmjobs(t, "", "invoke", wasm, "--payload", "Ada", "--json")
			if r.code != 0 || !strings.Contains(r.stdout, `"output":"Hello, Ada!"`) || !strings.Contains(r.stdout, `"msg":"greeted Ada on attempt 1"`) {
				t.Fatalf("invoke: %d %q %q", r.code, r.stdout, r.stderr)
			}
		})
	}
}

func TestNewRefusesBadInput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "taken"), 0o755)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"new", "x"}, "--lang is required: one of go, rust, c, assemblyscript, javascript, typescript"},
		{[]string{"new", "--lang", "cobol", "x"}, `unknown language "cobol"`},
		{[]string{"new", "--lang", "go", "Bad_Name"}, `invalid name "Bad_Name"`},
		{[]string{"new", "--lang", "go", "--dir", dir, "taken"}, "already exists"},
	} {
		r := wasmjobs(t, "", tc.args...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q, want %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
}
