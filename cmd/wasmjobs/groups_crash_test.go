package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// groupTask is a task of a workflow as GET /v1/workflows/{id} shows it.
type groupTask struct {
	Name, ID, State string
	DependsOn       []string `json:"depends_on"`
}

// timed is a job's record's timestamps.
type timed struct {
	State      string
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`
}

var anySettleLine = regexp.MustCompile(`msg="job settled" job=(\S+) `)

// TestCrashMidWorkflowAndBatchOnPebble runs the real binary on the default backend,
// creates workflows (a chain with a join) and batches (with both callbacks) through
// the CLI, SIGKILLs the host while they run and starts it again on the same data
// directory. Every task and job runs to success; each task started after every task it
// depends on had finished, and each callback after the last job of its batch (by their
// records' timestamps); and no callback settled twice, but one the kill caught running.
func TestCrashMidWorkflowAndBatchOnPebble(t *testing.T) {
	t.Parallel()
	const workflows, batches, perBatch = 30, 15, 20
	dir, data := t.TempDir(), t.TempDir()
	installModule(t, dir, "abi/sleep_ms", "work", "1")
	flags := []string{"--data-dir", data, "--concurrency", "2"}
	h := startHost(t, dir, flags...)

	create := func(kind, body string) string {
		t.Helper()
		r := wasmjobs(t, body, kind, "create", "-", "--server", h.url)
		if r.code != 0 {
			t.Fatalf("%s create: %d %s", kind, r.code, r.stderr)
		}
		return strings.TrimSpace(r.stdout)
	}
	var wfIDs, batchIDs []string
	for i := range workflows {
		wfIDs = append(wfIDs, create("workflows", `{"tasks": [
			{"name": "a", "queue": "work", "payload": "60"},
			{"name": "b", "queue": "work", "payload": "60", "depends_on": ["a"]},
			{"name": "c", "queue": "work", "payload": "60", "depends_on": ["b"]},
			{"name": "d", "queue": "work", "payload": "5", "depends_on": ["a", "c"]}]}`))
		if i < batches {
			jobs := strings.TrimSuffix(strings.Repeat(`{"queue": "work", "payload": "30"},`, perBatch), ",")
			batchIDs = append(batchIDs, create("batches", `{"jobs": [`+jobs+`],
				"on_complete": {"queue": "work", "payload": "1"}, "on_success": {"queue": "work", "payload": "1"}}`))
		}
	}
	total := workflows*4 + batches*(perBatch+2)
	waitFor(t, "a third of the jobs", func() bool { return len(anySettleLine.FindAllString(h.log(), -1)) >= total/3 })
	stopHost(t, h, syscall.SIGKILL)
	before := h.log()
	atKill := len(anySettleLine.FindAllString(before, -1))

	h = startHost(t, dir, flags...)
	t.Logf("SIGKILL after %d of %d jobs settled", atKill, total)
	rec := func(id string) timed {
		var r timed
		if code := h.get("/v1/jobs/"+id, &r); code != 200 {
			t.Fatalf("GET /v1/jobs/%s: %d", id, code)
		}
		return r
	}
	state := func(path string) string {
		var g struct{ State string }
		if code := h.get(path, &g); code != 200 {
			t.Fatalf("GET %s: %d", path, code)
		}
		return g.State
	}
	for _, id := range wfIDs {
		waitFor(t, "workflow "+id+" to end", func() bool { return state("/v1/workflows/"+id) != "running" })
		r := wasmjobs(t, "", "workflows", "get", id, "--server", h.url, "--json")
		var wf struct {
			State string
			Tasks []groupTask
		}
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &wf) != nil {
			t.Fatalf("workflows get %s: %d %s %s", id, r.code, r.stdout, r.stderr)
		}
		if wf.State != "succeeded" {
			t.Fatalf("workflow %s after the restart: %+v", id, wf)
		}
		byName := map[string]groupTask{}
		for _, task := range wf.Tasks {
			byName[task.Name] = task
		}
		for _, task := range wf.Tasks {
			started := rec(task.ID).StartedAt
			for _, dep := range task.DependsOn {
				if finished := rec(byName[dep].ID).FinishedAt; !started.After(finished) {
					t.Errorf("workflow %s: %s started at %v, before %s finished at %v", id, task.Name, started, dep, finished)
				}
			}
		}
	}
	callbacks := map[string]bool{}
	for _, id := range batchIDs {
		waitFor(t, "batch "+id+" to end", func() bool { return state("/v1/batches/"+id) != "running" })
		var b struct {
			State            string
			Total, Succeeded int
			IDs              []string
			Callbacks        map[string]string
			CallbackStates   map[string]string `json:"callback_states"`
		}
		h.get("/v1/batches/"+id, &b)
		if b.State != "succeeded" || b.Succeeded != perBatch || len(b.Callbacks) != 2 {
			t.Fatalf("batch %s after the restart: %+v", id, b)
		}
		var last time.Time
		for _, job := range b.IDs {
			if f := rec(job).FinishedAt; f.After(last) {
				last = f
			}
		}
		for role, cb := range b.Callbacks {
			callbacks[cb] = true
			waitFor(t, role+" of batch "+id, func() bool { return rec(cb).State == "succeeded" })
			if started := rec(cb).StartedAt; !started.After(last) {
				t.Errorf("batch %s: %s started at %v, before its last job finished at %v", id, role, started, last)
			}
		}
	}
	settles := func(log string) map[string]int {
		n := map[string]int{}
		for _, m := range anySettleLine.FindAllStringSubmatch(log, -1) {
			n[m[1]]++
		}
		return n
	}
	// A callback runs again only when the kill caught it running (or its settle had
	// not reached the disk): never twice on one side of the kill.
	pre, post := settles(before), settles(h.log())
	for cb := range callbacks {
		if pre[cb] > 1 || post[cb] > 1 {
			t.Errorf("callback %s settled %d times before the kill and %d after", cb, pre[cb], post[cb])
		}
	}
	stopHost(t, h, syscall.SIGTERM)
}
