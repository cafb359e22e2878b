package main

import (
	"strings"
	"testing"
)

// enqueue --unique-key: the first enqueue queues the job and prints its id; the second
// prints the same id, says on standard error that it was a duplicate, and queues
// nothing.
func TestEnqueueUniqueKey(t *testing.T) {
	t.Parallel()
	h := startEchoHost(t)
	args := []string{"enqueue", "echo", "x", "--delay", "1h", "--unique-key", "report-7", "--unique-for", "1h", "--server", h.url}
	first := wasmjobs(t, "", args...)
	if first.code != 0 || len(strings.Fields(first.stdout)) != 1 || first.stderr != "" {
		t.Fatalf("first enqueue: exit %d, stdout %q, stderr %q", first.code, first.stdout, first.stderr)
	}
	second := wasmjobs(t, "", args...)
	if second.code != 0 || second.stdout != first.stdout || !strings.Contains(second.stderr, "duplicate: job "+strings.TrimSpace(first.stdout)+` holds unique key "report-7" of queue echo`) {
		t.Fatalf("second enqueue: exit %d, stdout %q, stderr %q; want the first's id %q and a duplicate note", second.code, second.stdout, second.stderr, first.stdout)
	}
	third := wasmjobs(t, "", append(args, "--count", "3")...)
	if third.code != 0 || strings.Count(third.stdout, strings.TrimSpace(first.stdout)) != 3 || strings.Count(third.stderr, "duplicate") != 3 {
		t.Fatalf("three more of the key in one batch: exit %d, stdout %q, stderr %q", third.code, third.stdout, third.stderr)
	}
}

// enqueue --key sends the concurrency key to the API: two jobs of one key are two jobs
// (a key is not a unique key), and a key past its limit is refused with the API's
// reason.
func TestEnqueueKey(t *testing.T) {
	t.Parallel()
	h := startEchoHost(t)
	args := []string{"enqueue", "echo", "x", "--delay", "1h", "--key", "account-42", "--server", h.url}
	first, second := wasmjobs(t, "", args...), wasmjobs(t, "", args...)
	if first.code != 0 || second.code != 0 || first.stderr != "" || second.stderr != "" ||
		len(strings.Fields(first.stdout)) != 1 || first.stdout == second.stdout {
		t.Fatalf("two enqueues of one key: %+v and %+v, want two jobs", first, second)
	}
	long := wasmjobs(t, "", "enqueue", "echo", "x", "--key", strings.Repeat("k", 513), "--server", h.url)
	if long.code == 0 || !strings.Contains(long.stderr, "key of 513 bytes passes the limit of 512 bytes") {
		t.Fatalf("a key of 513 bytes: exit %d, stderr %q; want the API's refusal", long.code, long.stderr)
	}
}
