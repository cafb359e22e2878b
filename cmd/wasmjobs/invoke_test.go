package main

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/wasmjobs/wasmjobs/internal/rigs/abitest"
)

// installCase copies a case's module into a fresh directory with its manifest and
// returns the module's path there.
func installCase(t *testing.T, c abitest.Case) string {
	t.Helper()
	wasm, err := os.ReadFile(c.Path())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, c.ModuleName()+".wasm")
	if err := os.WriteFile(path, wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	if c.Manifest != "" {
		writeManifest(t, dir, c.ModuleName(), c.Manifest)
	}
	return path
}

// TestInvokeConformance runs every conformance case through `wasmjobs invoke --json`.
func TestInvokeConformance(t *testing.T) {
	t.Parallel()
	for _, c := range abitest.Cases() {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			if c.Round > 0 {
				t.Skip("a resumed run: invoke runs first runs only")
			}
			args := []string{"invoke", installCase(t, c), "--json", "--payload", c.Payload}
			if c.Attempt > 0 {
				args = append(args, "--attempt", strconv.Itoa(c.Attempt))
			}
			if c.MaxAttempts > 0 {
				args = append(args, "--max-attempts", strconv.Itoa(c.MaxAttempts))
			}
			for k, v := range c.Headers {
				args = append(args, "--header", k+"="+v)
			}
			r := wasmjobs(t, "", args...)
			if c.Invalid != "" {
				lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
				if r.code != 2 || r.stdout != "" || len(lines) != 1 || !strings.Contains(lines[0], c.Invalid) {
					t.Fatalf("exit %d, stdout %q, stderr %q; want exit 2, nothing on stdout, one line naming %q", r.code, r.stdout, r.stderr, c.Invalid)
				}
				return
			}
			if r.code != 0 || r.stderr != "" {
				t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
			}
			if n := strings.Count(strings.TrimSpace(r.stdout), "\n"); n != 0 {
				t.Fatalf("stdout has %d lines, want one JSON object", n+1)
			}
			var got invokeReport
			dec := json.NewDecoder(strings.NewReader(r.stdout))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&got); err != nil {
				t.Fatalf("decoding %q: %v", r.stdout, err)
			}
			if got.Result != c.Kind || got.Settle != c.Settle || got.Reason != c.Reason {
				t.Errorf("result %s, settle %s, reason %q; want %s, %s, %q", got.Result, got.Settle, got.Reason, c.Kind, c.Settle, c.Reason)
			}
			if (got.Code == nil) != (c.Code == nil) || (got.Code != nil && *got.Code != *c.Code) {
				t.Errorf("code %v, want %v", got.Code, c.Code)
			}
			if (got.DelayMs == nil) != (c.DelayMs == nil) || (got.DelayMs != nil && *got.DelayMs != *c.DelayMs) {
				t.Errorf("delay_ms %v, want %v", got.DelayMs, c.DelayMs)
			}
			output, err := base64.StdEncoding.DecodeString(got.OutputBase64)
			if err != nil {
				t.Fatal(err)
			}
			// meta's output holds the job id, which invoke makes: take it from the output.
			id := ""
			if c.Module == "abi/meta" {
				id, _, _ = strings.Cut(string(output), "\n")
				if !abitest.ValidID(id) {
					t.Errorf("job id %q is not a job id", id)
				}
			}
			if !c.OutputMatches(string(output), id, got.Module.Version, queueOf(c)) || got.Output != strings.ToValidUTF8(string(output), "\uFFFD") {
				t.Errorf("output %q, want %q", shorten(got.Output), shorten(c.Output))
			}
			if got.Module.Name != c.ModuleName() || len(got.Module.Version) != 64 {
				t.Errorf("module %+v", got.Module)
			}
			if len(got.Logs) != len(c.Logs) {
				t.Fatalf("%d log lines, want %d", len(got.Logs), len(c.Logs))
			}
			for i, l := range got.Logs {
				if (abitest.Log{Level: l.Level, Msg: l.Msg}) != c.Logs[i] {
					t.Errorf("log %d = %+v, want %+v", i, l, c.Logs[i])
				}
			}
			if len(got.Enqueued) != len(c.Enqueued) {
				t.Fatalf("enqueued %+v, want %+v", got.Enqueued, c.Enqueued)
			}
			for i, j := range got.Enqueued {
				if (abitest.Child{Queue: j.Queue, Payload: j.Payload, DelayMs: j.DelayMs, Await: j.Await}) != c.Enqueued[i] {
					t.Errorf("enqueued %d = %+v, want %+v", i, j, c.Enqueued[i])
				}
			}
			if got.DurationMs < 0 {
				t.Errorf("duration_ms %v", got.DurationMs)
			}
		})
	}
}

// queueOf is the queue a case's module consumes: its manifest's, else its name.
func queueOf(c abitest.Case) string {
	for _, line := range strings.Split(c.Manifest, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "queue = "); ok {
			q, _ := strconv.Unquote(v)
			return q
		}
	}
	return c.ModuleName()
}

func shorten(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}
