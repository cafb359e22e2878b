package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// createGroup posts body to path (/v1/workflows or /v1/batches) and returns the id.
func (h *hostProc) createGroup(path, body string) string {
	h.t.Helper()
	code, out := h.post(path, body)
	if code != http.StatusAccepted {
		h.t.Fatalf("POST %s: %d %s", path, code, out)
	}
	var r struct{ ID string }
	json.Unmarshal([]byte(out), &r)
	return r.ID
}

// TestDashboardShowsWorkflowsAndBatches drives the workflow and batch pages of a real
// `wasmjobs run` (the default backend) in headless Chromium: a workflow's graph draws
// each task with its state and each dependency as an edge, and follows the run live;
// its cancel button cancels what has not run; a batch's page shows its counts, its
// progress bar and its callbacks' states, live; the lists link to them; no page logs
// an error.
func TestDashboardShowsWorkflowsAndBatches(t *testing.T) {
	dir := t.TempDir()
	installModule(t, dir, "abi/echo", "echo", "v1")
	installModule(t, dir, "abi/dead_letter", "dead", "v1")
	h := startHost(t, dir)
	ctx := browser(t, false)
	ui := strings.Replace(h.url, "127.0.0.1", "localhost", 1) + "/ui/"

	wf := h.createGroup("/v1/workflows", `{"tasks": [
		{"name": "fetch", "queue": "echo", "payload": "f", "delay": "1500ms"},
		{"name": "render", "queue": "echo", "payload": "r", "depends_on": ["fetch"]},
		{"name": "later", "queue": "echo", "delay": "1h"},
		{"name": "then", "queue": "echo", "depends_on": ["later", "render"]}]}`)
	do(t, ctx, "workflow page", chromedp.Navigate(ui+"workflows/"+wf), chromedp.WaitVisible(`#dag`))
	drawn := value(t, ctx, "the drawn graph", chromedp.Evaluate[map[string]any](`(() => ({
		nodes: Object.fromEntries([...document.querySelectorAll('#dag g.node')].map(g => [g.dataset.task, g.dataset.state])),
		edges: document.querySelectorAll('#dag line').length }))()`))
	nodes, _ := drawn["nodes"].(map[string]any)
	if len(nodes) != 4 || drawn["edges"] != 3.0 || nodes["then"] != "waiting" || nodes["render"] != "waiting" {
		t.Fatalf("the workflow's graph: %v; want 4 tasks, 3 edges, then and render waiting", drawn)
	}
	// The page follows the run without a reload: fetch is due in 1.5 s, render after it.
	do(t, ctx, "the graph follows the run", chromedp.WaitVisible(`#dag g.node[data-task="render"][data-state="succeeded"]`))
	// "then" waits for "later", due in an hour: the queue page counts it.
	do(t, ctx, "waiting jobs on the queue page", chromedp.Navigate(ui+"queues/echo"), chromedp.WaitVisible(`#waiting`))
	if n := value(t, ctx, "waiting", chromedp.Text(`#waiting`)); n != "1" {
		t.Fatalf("the queue page counts %s jobs waiting for others, want 1", n)
	}
	if m := h.metrics(); !strings.Contains(m, `wasmjobs_queue_jobs{queue="echo",state="waiting"} 1`) {
		t.Fatalf("/metrics does not count the waiting job:\n%s", m)
	}
	do(t, ctx, "back to the workflow", chromedp.Navigate(ui+"workflows/"+wf), chromedp.WaitVisible(`#dag`))
	do(t, ctx, "cancel the workflow", chromedp.Click(`#cancel`), chromedp.WaitVisible(`p.flash`), chromedp.WaitVisible(`#state.cancelled`))
	var got struct {
		State string
		Tasks []struct{ Name, State string }
	}
	h.get("/v1/workflows/"+wf, &got)
	states := map[string]string{}
	for _, task := range got.Tasks {
		states[task.Name] = task.State
	}
	if got.State != "cancelled" || states["later"] != "cancelled" || states["then"] != "cancelled" || states["fetch"] != "succeeded" {
		t.Fatalf("the workflow after the page's cancel: %+v", got)
	}

	batch := h.createGroup("/v1/batches", `{"jobs": [{"queue": "echo", "payload": "1"}, {"queue": "echo", "payload": "2", "delay": "1500ms"},
		{"queue": "dead", "payload": "3"}], "on_complete": {"queue": "echo"}, "on_success": {"queue": "echo"}}`)
	do(t, ctx, "batch page", chromedp.Navigate(ui+"batches/"+batch), chromedp.WaitVisible(`#bar`))
	if s := value(t, ctx, "state", chromedp.Text(`#state`)); s != "running" {
		t.Fatalf("a batch with a job due in 1.5 s reads %q, want running", s)
	}
	do(t, ctx, "the batch page follows the run", chromedp.WaitVisible(`#state.failed`),
		chromedp.WaitVisible(`[data-callback="on_complete"].succeeded`), chromedp.WaitVisible(`[data-callback="on_success"].cancelled`))
	counts := value(t, ctx, "counts", chromedp.Evaluate[map[string]string](`(() => Object.fromEntries(['total','succeeded','dead','cancelled','pending'].map(k => [k, document.getElementById(k).textContent])))()`))
	if counts["total"] != "3" || counts["succeeded"] != "2" || counts["dead"] != "1" || counts["pending"] != "0" {
		t.Fatalf("the batch's counts: %v", counts)
	}
	if n := value(t, ctx, "bar", chromedp.Evaluate[float64](`document.querySelectorAll('#bar rect').length`)); n != 2 {
		t.Fatalf("the progress bar has %v parts, want 2 (succeeded, dead)", n)
	}
	do(t, ctx, "batch list", chromedp.Navigate(ui+"batches"), chromedp.WaitVisible(`#groups a[href$="`+batch+`"]`))
	do(t, ctx, "workflow list", chromedp.Navigate(ui+"workflows"), chromedp.WaitVisible(`#groups a[href$="`+wf+`"]`))
}
