package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/backend/rabbitmq"
	"github.com/wasmjobs/wasmjobs/internal/rigs/testbroker"
)

// TestBrokerRestartDuringRun restarts the broker under a running host with jobs in the
// queue and in the delay chain: the host reconnects by itself, every job completes, and
// no delayed job ran before its delay. It runs alone with the other broker-restart tests
// (make test), since a restart cuts every connection.
func TestBrokerRestartDuringRun(t *testing.T) {
	url := testbroker.RestartableURL(t)
	const jobs, delayed = 2000, 20
	ctx := context.Background()
	_, dir, work, results := recordSetup(t, url, "restart")
	h := startHost(t, dir, "--backend", url, "--concurrency", "16")
	r := wasmjobs(t, strings.Repeat("10\n", jobs), "enqueue", work, "-", "--lines", "-q", "--header", "results="+results, "--backend", url)
	if r.code != 0 {
		t.Fatalf("enqueue: %s", r.stderr)
	}
	r = wasmjobs(t, "", "enqueue", work, "0", "--count", "20", "--delay", "4s", "--header", "results="+results, "--server", h.url)
	delayedIDs := strings.Fields(r.stdout)
	if r.code != 0 || len(delayedIDs) != delayed {
		t.Fatalf("enqueue delayed: %d %q %s", r.code, r.stdout, r.stderr)
	}
	_, file, _, _ := runtime.Caller(0)
	if out, err := exec.Command(filepath.Join(filepath.Dir(file), "..", "..", "scripts", "rabbitmq.sh"), "restart").CombinedOutput(); err != nil {
		t.Fatalf("restart: %v\n%s", err, out)
	}
	b2, err := rabbitmq.Open(ctx, rabbitmq.Config{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close(ctx)
	waitForLong(t, "every job recorded after the restart", 120*time.Second, func() bool {
		st, err := b2.QueueStats(ctx, results)
		return err == nil && st.Pending >= jobs+delayed
	})
	for _, id := range delayedIDs {
		var st struct {
			State      string
			EnqueuedAt time.Time `json:"enqueued_at"`
			UpdatedAt  time.Time `json:"updated_at"`
		}
		resp, err := http.Get(h.url + "/v1/jobs/" + id)
		if err != nil {
			t.Fatal(err)
		}
		json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		if st.State != "succeeded" || st.UpdatedAt.Sub(st.EnqueuedAt) < 4*time.Second {
			t.Fatalf("delayed job %s: %s after %v, want succeeded no earlier than 4s", id, st.State, st.UpdatedAt.Sub(st.EnqueuedAt))
		}
	}
	if !strings.Contains(h.log(), "RabbitMQ connection restored") {
		t.Fatalf("the host did not log its reconnection:\n%s", h.log())
	}
	t.Logf("broker restarted under a running host: %d jobs and %d delayed jobs all completed, none early", jobs, delayed)
}

// waitForLong polls cond for up to d.
func waitForLong(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
