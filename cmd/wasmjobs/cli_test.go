package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wasmjobs/wasmjobs/internal/abitest"
)

func TestInvokeBadUsage(t *testing.T) {
	t.Parallel()
	echo := filepath.Join(abitest.Dir(), "abi", "echo.wasm")
	dir := t.TempDir()
	badManifest := filepath.Join(dir, "echo.wasm")
	wasm, _ := os.ReadFile(echo)
	os.WriteFile(badManifest, wasm, 0o644)
	os.WriteFile(filepath.Join(dir, "echo.toml"), []byte("# ok\nqueue = \"mail\"\ntimeout = \"soon\"\n"), 0o644)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no module", []string{"invoke"}, "want invoke MODULE [-], got 0 arguments"},
		{"two payloads", []string{"invoke", echo, "--payload", "a", "--payload-file", echo}, "give the payload one way"},
		{"payload flag and stdin", []string{"invoke", echo, "--payload", "a", "-"}, "give the payload one way"},
		{"stray argument", []string{"invoke", echo, "extra"}, `unexpected argument "extra"`},
		{"missing payload file", []string{"invoke", echo, "--payload-file", "/nope/x.json"}, "--payload-file: open /nope/x.json: no such file or directory"},
		{"bad header", []string{"invoke", echo, "--header", "novalue"}, `--header "novalue": want key=value`},
		{"attempt zero", []string{"invoke", echo, "--attempt", "0"}, "--attempt must be 1 or more"},
		{"unknown flag", []string{"invoke", echo, "--bogus"}, "unknown flag: --bogus"},
		{"bad flag value", []string{"invoke", echo, "--attempt", "two"}, `invalid argument "two" for "--attempt"`},
		{"missing module", []string{"invoke", "/nope/m.wasm"}, "open /nope/m.wasm: no such file or directory"},
		{"bad manifest", []string{"invoke", badManifest}, `echo.toml:3: field timeout: want a duration from 1ms to 24h such as "30s", got "soon"`},
		{"validate without paths", []string{"modules", "validate"}, "want validate PATH..., got 0 arguments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := wasmjobs(t, "", tc.args...)
			lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
			if r.code != 2 || r.stdout != "" || len(lines) != 1 || !strings.Contains(lines[0], tc.want) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit 2 and one line containing %q", r.code, r.stdout, r.stderr, tc.want)
			}
		})
	}
}

func TestInvokeReadsStdinAndPrintsForPeople(t *testing.T) {
	t.Parallel()
	echo := filepath.Join(abitest.Dir(), "abi", "echo.wasm")
	r := wasmjobs(t, "from stdin\n", "invoke", echo, "-")
	for _, want := range []string{"module    echo (version 0a8f75abd433)", "on queue echo, attempt 1 of 25", "result    ack (code 0)", "settle    ack", "output    (11 bytes)\n  from stdin\n"} {
		if !strings.Contains(r.stdout, want) || r.code != 0 {
			t.Errorf("exit %d, output lacks %q:\n%s", r.code, want, r.stdout)
		}
	}
	retry := filepath.Join(abitest.Dir(), "abi", "retry.wasm")
	r = wasmjobs(t, "", "invoke", retry, "--attempt", "3", "--max-attempts", "3")
	for _, want := range []string{"result    retry (code 1)", "settle    dead_letter", "reason    max attempts (3) exceeded: try later", "delay     1.5s"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, r.stdout)
		}
	}
	enq := filepath.Join(abitest.Dir(), "abi", "enqueue.wasm")
	r = wasmjobs(t, "", "invoke", enq)
	for _, want := range []string{"enqueued  (100 jobs)", "  child after 250ms: payload-2", "  ... and 80 more"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, r.stdout)
		}
	}
}

func TestModulesValidate(t *testing.T) {
	t.Parallel()
	good := filepath.Join(abitest.Dir(), "abi", "ack.wasm")
	bad := filepath.Join(abitest.Dir(), "hostile", "wrong_handle.wasm")
	notWasm := filepath.Join(abitest.Dir(), "hostile", "not_wasm.wasm")
	r := wasmjobs(t, "", "modules", "validate", good, bad, notWasm)
	want := good + ": OK version c3db20f759180f9dc9fcc98d3ccb027e5b6237b63b26578b22d8c3eaf86175bf queue ack\n" +
		bad + `: invalid module wrong_handle: export "wasmjobs_handle" has type (i32) -> (i32), want () -> (i32)` + "\n" +
		notWasm + ": invalid module not_wasm: not a wasm module (no \\0asm header)\n"
	if r.code != 1 || r.stdout != want || r.stderr != "" {
		t.Fatalf("exit %d\nstdout:\n%s\nwant:\n%s\nstderr: %s", r.code, r.stdout, want, r.stderr)
	}
	if r := wasmjobs(t, "", "modules", "validate", good); r.code != 0 {
		t.Fatalf("valid module: exit %d", r.code)
	}
}
