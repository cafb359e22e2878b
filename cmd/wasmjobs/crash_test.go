package main

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/rabbitmq"
	"github.com/wasmjobs/wasmjobs/internal/rigs/testbroker"
)

// TestCrashLosesNothing runs the real binary on RabbitMQ, enqueues 10,000 jobs whose
// handler records its completion as a child job on a results queue, kills the host with
// SIGKILL in the middle, starts it again, and counts: every job completed at least once,
// and no more duplicates than jobs in flight at the kill (the prefetch, 16).
func TestCrashLosesNothing(t *testing.T) {
	t.Parallel()
	url := brokerURL(t)
	const jobs, concurrency = 10_000, 16
	ctx := context.Background()
	b, dir, work, results := recordSetup(t, url, "crash")
	flags := []string{"--backend", url, "--concurrency", fmt.Sprint(concurrency)}
	h := startHost(t, dir, flags...)

	lines := strings.Repeat("20\n", jobs) // each job takes 20 ms: about 800 a second at concurrency 16
	if r := wasmjobs(t, lines, "enqueue", work, "-", "--lines", "-q", "--header", "results="+results, "--backend", url); r.code != 0 {
		t.Fatalf("enqueue: %d %s", r.code, r.stderr)
	}
	pending := func(queue string) int {
		st, err := b.QueueStats(ctx, queue)
		if err != nil {
			t.Fatal(err)
		}
		return st.Pending
	}
	recorded := func() int { return pending(results) }
	waitFor(t, "a third of the jobs", func() bool { return recorded() >= jobs/3 })
	h.cmd.Process.Signal(syscall.SIGKILL)
	<-h.done
	atKill := recorded()
	h = startHost(t, dir, flags...)
	// The records count duplicates too: the work queue must be empty as well (each job
	// taken), or a job still queued when the host stops would be read as lost.
	waitFor(t, "every job recorded", func() bool { return recorded() >= jobs && pending(work) == 0 })
	// Stop the host: its drain lets every job in flight finish and record, and after
	// its exit nothing more can land, so the count is final.
	h.stopWithin(time.Minute)
	final := recorded()

	// Count the recorded ids.
	ch, msgs := testbroker.Consume(t, url, results)
	seen := make(map[string]int)
	total := 0
	for total < final {
		select {
		case m, ok := <-msgs:
			if !ok {
				t.Fatalf("the results consumer closed after %d records: %v", total, ch.IsClosed())
			}
			seen[string(m.Body)]++
			total++
		case <-time.After(30 * time.Second):
			t.Fatalf("read %d of the %d records", total, final)
		}
	}
	duplicates := total - len(seen)
	t.Logf("SIGKILL after %d of %d jobs recorded; %d records in the end: %d distinct jobs completed, %d recorded twice (bound: %d in flight)",
		atKill, jobs, final, len(seen), duplicates, concurrency)
	if len(seen) != jobs {
		t.Fatalf("%d of %d jobs completed: lost %d", len(seen), jobs, jobs-len(seen))
	}
	if duplicates > concurrency {
		t.Fatalf("%d duplicates, more than the %d jobs that can be in flight", duplicates, concurrency)
	}
}

// recordSetup prepares a run of testdata/abi/record on the broker: a backend for the
// test's own checks (closed with the test), a results queue, and a modules directory
// serving a work queue. Names are unique, so tests can share the broker.
func recordSetup(t *testing.T, url, prefix string) (b *rabbitmq.Backend, dir, work, results string) {
	t.Helper()
	ctx := context.Background()
	suffix := uniqueSuffix()
	work, results = prefix+"-"+suffix, prefix+"-results-"+suffix
	b, err := rabbitmq.Open(ctx, rabbitmq.Config{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close(context.Background()) })
	if err := b.Declare(ctx, backend.QueueConfig{Name: results}); err != nil {
		t.Fatal(err)
	}
	dir = t.TempDir()
	installModule(t, dir, "abi/record", work, "1")
	return b, dir, work, results
}
