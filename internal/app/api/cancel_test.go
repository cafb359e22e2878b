package api_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/memory"
	"github.com/wasmjobs/wasmjobs/backend/pebble"
	"github.com/wasmjobs/wasmjobs/internal/app/inspect/inspecttest"
	"github.com/wasmjobs/wasmjobs/internal/outbound/outboundtest"
	"github.com/wasmjobs/wasmjobs/worker"
)

// cancelModules are guests that keep a job running until its deadline, a minute: one
// that spins, one that stages a child and sleeps in WASI, one blocked in an outbound
// request (its payload is the URL).
var cancelModules = []inspecttest.Module{
	{Name: "spin", Wasm: "hostile/loop", Manifest: `timeout = "1m"`},
	{Name: "nap", Wasm: "abi/enqueue_sleep", Manifest: `timeout = "1m"`},
	{Name: "hang", Wasm: "abi/http_post_retry", Manifest: "timeout = \"1m\"\n[http]\nallow = [\"http://127.0.0.1:1-65535\"]\n"},
}

// TestCancelARunningJob: POST /v1/jobs/{id}/cancel on a running job stops it within
// 100 ms whether it spins, sleeps in WASI or waits in an outbound request to a server
// that never answers, on memory, pebble and a backend that cannot act on a waiting job
// (RabbitMQ's position): 200, the job cancelled at its first attempt and never run
// again, its staged child not published.
func TestCancelARunningJob(t *testing.T) {
	t.Parallel()
	// Each backend, with what counts its queues.
	for name, b := range map[string]func(t *testing.T) (backend.Backend, backend.StatsReader){
		"memory": func(*testing.T) (backend.Backend, backend.StatsReader) {
			m := memory.New(memory.Config{})
			return m, m
		},
		"pebble": func(t *testing.T) (backend.Backend, backend.StatsReader) {
			p := openPebble(t, pebble.Config{})
			return p, p
		},
		"no control": func(*testing.T) (backend.Backend, backend.StatsReader) {
			m := memory.New(memory.Config{})
			return noControl{m}, m
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b, stats := b(t)
			r := newRigOn(t, inspecttest.Options{Backend: b, Modules: cancelModules}, "")
			if err := r.Backend.Declare(context.Background(), backend.QueueConfig{Name: "child"}); err != nil {
				t.Fatal(err)
			}
			ended := make(chan struct{})
			never := outboundtest.NewServer(t, false, func(w http.ResponseWriter, req *http.Request) {
				select {
				case <-req.Context().Done():
				case <-ended:
				}
			})
			t.Cleanup(func() { close(ended) }) // before the server closes: it answers nothing

			for _, tc := range []struct{ queue, payload string }{
				{"spin", ""}, {"nap", "60000"}, {"hang", never.URL + "/"},
			} {
				t.Run(tc.queue, func(t *testing.T) {
					code, out := r.call(t, "POST", "/v1/jobs", fmt.Sprintf(`{"queue":%q,"payload":%q}`, tc.queue, tc.payload))
					if code != 202 {
						t.Fatalf("enqueue: %d %v", code, out)
					}
					id := out["id"].(string)
					r.waitRunning(t, id)
					if tc.queue == "hang" {
						for never.Hits.Load() == 0 {
							time.Sleep(time.Millisecond)
						}
					}
					time.Sleep(50 * time.Millisecond) // well inside the guest
					start := time.Now()
					code, out = r.call(t, "POST", "/v1/jobs/"+id+"/cancel", "")
					if took := time.Since(start); took > 100*time.Millisecond {
						t.Errorf("the cancel took %v, want at most 100ms", took)
					}
					if code != 200 {
						t.Fatalf("cancel of a running job: %d %v, want 200", code, out)
					}
					r.expectCancelled(t, id)
					time.Sleep(200 * time.Millisecond) // a retry would be running by now
					r.expectCancelled(t, id)
				})
			}
			st, err := stats.QueueStats(context.Background(), "child")
			if err != nil || st.Pending != 0 {
				t.Errorf("the child queue after the cancels: %+v, %v; want nothing published", st, err)
			}
		})
	}
}

// waitRunning waits until job id is running.
func (r *apiRig) waitRunning(t *testing.T, id string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, out := r.call(t, "GET", "/v1/jobs/"+id, "")
		if out["state"] == "running" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s is %v, never running", id, out["state"])
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// expectCancelled checks that job id ended cancelled by an operator at its first
// attempt, with that one attempt.
func (r *apiRig) expectCancelled(t *testing.T, id string) {
	t.Helper()
	_, out := r.call(t, "GET", "/v1/jobs/"+id, "")
	attempts, _ := out["attempts"].([]any)
	if out["state"] != "cancelled" || out["reason"] != "cancelled by an operator" || out["attempt"] != 1.0 || len(attempts) != 1 ||
		attempts[0].(map[string]any)["settle"] != "cancelled" {
		t.Fatalf("job after the cancel = %v; want cancelled by an operator, one attempt", out)
	}
}

// A cancel that comes as the job's handler returns loses to its settle: 409 naming it.
func TestCancelLosesToTheSettle(t *testing.T) {
	t.Parallel()
	r := newRigOn(t, inspecttest.Options{}, "", func(c *rigConfig) {
		c.Inspect.CancelRunning = func(ctx context.Context, id string) error {
			return fmt.Errorf("cancelling job %q: %w: it settles as ack", id, worker.ErrSettling)
		}
	})
	code, out := r.call(t, "POST", "/v1/jobs/X/cancel", "")
	if msg, _ := out["error"].(string); code != 409 || !strings.Contains(msg, "settles as ack") {
		t.Fatalf("cancel as the settle wins: %d %v, want 409 naming the ack", code, out)
	}
}
