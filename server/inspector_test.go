package server_test

import (
	"errors"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/host"
	"github.com/wasmjobs/wasmjobs/server"
	"github.com/wasmjobs/wasmjobs/wasmjobstest"
)

// inspectorHost is a started host serving "echo" (testdata echo) and "dead" (a module
// that dead-letters every job), with its Inspector.
func inspectorHost(t *testing.T) (*wasmjobstest.Host, *server.Inspector) {
	t.Helper()
	h := wasmjobstest.NewHost(t, wasmjobstest.HostConfig{})
	for name, file := range map[string]string{"echo": "echo", "dead": "dead_letter"} {
		wasm, err := os.ReadFile("../testdata/abi/" + file + ".wasm")
		if err != nil {
			t.Fatal(err)
		}
		h.AddModule(name, wasm, "")
	}
	return h, h.Server().Inspector()
}

func TestInspectorReadsJobsAndQueues(t *testing.T) {
	t.Parallel()
	h, in := inspectorHost(t)
	id := h.Enqueue("echo", []byte("hi"))
	h.WaitState(id, "succeeded")

	rec, err := in.Job(t.Context(), id)
	if err != nil || rec.State != backend.JobSucceeded || string(rec.Output) != "hi" || rec.Queue != "echo" {
		t.Fatalf("Job = %+v, %v; want echo's job succeeded with output hi", rec, err)
	}
	if len(rec.Attempts) != 1 || rec.Attempts[0].State != backend.JobSucceeded {
		t.Errorf("Job's attempts = %+v, want one that succeeded", rec.Attempts)
	}
	page, err := in.Jobs(t.Context(), "echo", backend.JobFilter{})
	if err != nil || !slices.ContainsFunc(page.Jobs, func(r backend.JobRecord) bool { return r.ID == id }) {
		t.Errorf("Jobs(echo) = %+v, %v; want it to list %s", page, err, id)
	}
	if _, err := in.Job(t.Context(), "no-such-job"); !errors.Is(err, backend.ErrNotFound) {
		t.Errorf("Job of an unknown id: %v, want backend.ErrNotFound", err)
	}

	qs := in.Queues(t.Context())
	names := []string{}
	for _, q := range qs {
		names = append(names, q.Name+"/"+q.Module)
		if q.QueueStats == nil || q.Error != "" {
			t.Errorf("queue %s: counts %v, error %q; want counts", q.Name, q.QueueStats, q.Error)
		}
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"dead/dead", "echo/echo"}) {
		t.Errorf("Queues = %v, want dead and echo, each served by its module", names)
	}
	if _, err := in.Stats(t.Context(), "echo"); err != nil {
		t.Errorf("Stats(echo): %v", err)
	}
	if s := in.Schedules(); s == nil || len(s) != 0 {
		t.Errorf("Schedules = %#v, want an empty list", s)
	}
}

func TestInspectorActsOnOneJob(t *testing.T) {
	t.Parallel()
	h, in := inspectorHost(t)
	ctx := t.Context()
	res, err := h.Server().Enqueue(ctx, server.Job{Queue: "echo", Payload: []byte("later"), Delay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	id := res.IDs[0]
	h.WaitState(id, "deferred") // the host's memory calls a job waiting out its delay deferred

	if err := in.Cancel(ctx, id); err != nil {
		t.Fatalf("Cancel of a delayed job: %v", err)
	}
	if rec, err := in.Job(ctx, id); err != nil || rec.State != backend.JobCancelled {
		t.Fatalf("after Cancel, Job = %+v, %v; want cancelled", rec, err)
	}
	if err := in.Cancel(ctx, id); !errors.Is(err, backend.ErrJobState) && !errors.Is(err, backend.ErrNotFound) {
		t.Errorf("a second Cancel: %v, want backend.ErrJobState or ErrNotFound", err)
	}
	if err := in.Delete(ctx, id); err != nil {
		t.Fatalf("Delete of a cancelled job: %v", err)
	}
	if _, err := in.Job(ctx, id); !errors.Is(err, backend.ErrNotFound) {
		t.Errorf("after Delete, Job: %v, want backend.ErrNotFound", err)
	}

	res, err = h.Server().Enqueue(ctx, server.Job{Queue: "echo", Payload: []byte("now"), Delay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	h.WaitState(res.IDs[0], "deferred")
	if err := in.Retry(ctx, res.IDs[0]); err != nil {
		t.Fatalf("Retry of a delayed job: %v", err)
	}
	h.WaitState(res.IDs[0], "succeeded")
}

func TestInspectorReplaysAndPurgesDeadLetters(t *testing.T) {
	t.Parallel()
	h, in := inspectorHost(t)
	ctx := t.Context()
	id := h.Enqueue("dead", []byte("doomed"))
	h.WaitState(id, "dead")

	dead, err := in.DeadLetters(ctx, "dead", 0)
	if err != nil || len(dead) != 1 || dead[0].Envelope.ID != id || string(dead[0].Envelope.Payload) != "doomed" {
		t.Fatalf("DeadLetters = %+v, %v; want job %s with its payload", dead, err, id)
	}
	// A replay into a queue that does not hold it fails and changes nothing.
	if _, err := in.ReplayDeadLetter(ctx, id, "echo"); !errors.Is(err, backend.ErrNotFound) {
		t.Errorf("replaying into a queue without the dead letter: %v, want backend.ErrNotFound", err)
	}
	if rec, err := in.Job(ctx, id); err != nil || rec.State != backend.JobDead {
		t.Errorf("after the failed replay, Job = %+v, %v; want the job still dead", rec, err)
	}
	q, err := in.ReplayDeadLetter(ctx, id, "")
	if err != nil || q != "dead" {
		t.Fatalf("ReplayDeadLetter = %q, %v; want it found in queue dead", q, err)
	}
	if _, err := in.ReplayDeadLetter(ctx, "no-such-letter", "dead"); !errors.Is(err, backend.ErrNotFound) {
		t.Errorf("replaying an unknown dead letter: %v, want backend.ErrNotFound", err)
	}
	// The replayed job runs again and is dead-lettered again.
	waitFor(t, "the replayed job dead-lettered again", func() bool {
		d, err := in.DeadLetters(ctx, "dead", 0)
		return err == nil && len(d) == 1
	})
	if n, err := in.PurgeDeadLetters(ctx, "dead"); err != nil || n != 1 {
		t.Errorf("PurgeDeadLetters = %d, %v; want 1", n, err)
	}
	if d, err := in.DeadLetters(ctx, "dead", 0); err != nil || len(d) != 0 {
		t.Errorf("after the purge DeadLetters = %+v, %v; want none", d, err)
	}
}

func TestInspectorModules(t *testing.T) {
	t.Parallel()
	_, in := inspectorHost(t)
	ctx := t.Context()
	mods := in.Modules()
	if len(mods) != 2 || !slices.ContainsFunc(mods, func(m host.ModuleStatus) bool { return m.Name == "echo" && m.Serving() }) {
		t.Errorf("Modules = %+v, want echo and dead, echo serving", mods)
	}
	if hist, err := in.ModuleHistory("echo"); err != nil || len(hist) != 1 {
		t.Errorf("ModuleHistory(echo) = %+v, %v; want its one version", hist, err)
	}
	if _, err := in.Promote(ctx, "echo"); !errors.Is(err, server.ErrConflict) {
		t.Errorf("Promote without a canary: %v, want ErrConflict", err)
	}
	if _, err := in.Rollback(ctx, "nope", ""); !errors.Is(err, host.ErrUnknownModule) {
		t.Errorf("Rollback of an unknown module: %v, want host.ErrUnknownModule", err)
	}
}
