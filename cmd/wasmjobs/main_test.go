package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// binary is the wasmjobs command built for the tests that run it as a process.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "wasmjobs-test-")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "wasmjobs")
	build := exec.Command("go", "build", "-race", "-o", binary, ".")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		panic("building wasmjobs: " + err.Error())
	}
	code := m.Run()
	os.RemoveAll(dir)
	// Tests keep their data in temporary directories, never in the default one.
	if _, err := os.Stat(defaultDataDir); err == nil {
		os.Stderr.WriteString("FAIL: a test left the default data directory " + defaultDataDir + " in the package directory\n")
		code = 1
	}
	os.Exit(code)
}

// result is what a run of the command printed and its exit status.
type result struct {
	stdout, stderr string
	code           int
}

// wasmjobs runs the built command with args and optional stdin, with its compilation
// cache in a temporary directory.
func wasmjobs(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	return wasmjobsEnv(t, nil, stdin, args...)
}

// wasmjobsEnv is wasmjobs with extra environment variables.
func wasmjobsEnv(t *testing.T, env []string, stdin string, args ...string) result {
	t.Helper()
	cmd := exec.Command(binary, args...)
	// The race detector sleeps a second at exit unless told not to.
	cmd.Env = append(os.Environ(), "WASMJOBS_CACHE_DIR="+t.TempDir(), "GORACE=atexit_sleep_ms=0")
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdin = bytes.NewBufferString(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("running wasmjobs: %v", err)
	}
	return result{out.String(), errb.String(), code}
}
