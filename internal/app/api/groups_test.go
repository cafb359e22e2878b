package api_test

import (
	"strings"
	"testing"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/memory"
)

// noGroups is a backend that keeps no workflows or batches, as RabbitMQ.
type noGroups struct{ backend.Backend }

// On a backend that cannot hold a job for others, workflows and batches are 501,
// saying why.
func TestWorkflowsUnavailableAnswer501(t *testing.T) {
	t.Parallel()
	r := newRigOn(t, on(noGroups{memory.New(memory.Config{})}), "")
	for _, req := range [][2]string{{"/v1/workflows", `{"tasks": [{"name": "a", "queue": "echo"}]}`}, {"/v1/batches", `{"jobs": [{"queue": "echo"}]}`},
		{"/v1/workflows/01ABC", ""}, {"/v1/batches/01ABC/cancel", ""}} {
		method := "POST"
		if req[1] == "" && !strings.HasSuffix(req[0], "/cancel") {
			method = "GET"
		}
		status, body := r.call(t, method, req[0], req[1])
		if msg, _ := body["error"].(string); status != 501 || !strings.Contains(msg, "cannot hold a task until the jobs it depends on have ended") {
			t.Fatalf("%s %s: %d %v", method, req[0], status, body)
		}
	}
}
