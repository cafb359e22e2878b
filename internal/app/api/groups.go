package api

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/internal/app/inspect"
	"github.com/wasmjobs/wasmjobs/internal/jobspec"
)

// TaskRequest is one task of POST /v1/workflows: a job (every field of POST /v1/jobs),
// its name, the tasks it runs after, and what a dependency that did not succeed does
// to it ("cancel", the default, or "run").
type TaskRequest struct {
	Name string `json:"name"`
	EnqueueRequest
	DependsOn           []string `json:"depends_on,omitempty"`
	OnDependencyFailure string   `json:"on_dependency_failure,omitempty"`
}

// WorkflowRequest is the body of POST /v1/workflows.
type WorkflowRequest struct {
	Tasks []TaskRequest `json:"tasks"`
}

// NewBatchRequest is the body of POST /v1/batches: the jobs, and the callbacks that
// wait for all of them.
type NewBatchRequest struct {
	Jobs       []EnqueueRequest `json:"jobs"`
	OnComplete *EnqueueRequest  `json:"on_complete,omitempty"`
	OnSuccess  *EnqueueRequest  `json:"on_success,omitempty"`
}

// routeGroups adds the workflow and batch endpoints to mux.
func (s *server) routeGroups(mux *http.ServeMux) {
	mux.Handle("POST /v1/workflows", handler(s.createWorkflow))
	mux.Handle("GET /v1/workflows", s.listGroups(backend.GroupWorkflow))
	mux.Handle("GET /v1/workflows/{id}", s.getGroup(backend.GroupWorkflow, false))
	mux.Handle("POST /v1/workflows/{id}/cancel", s.getGroup(backend.GroupWorkflow, true))
	mux.Handle("POST /v1/batches", handler(s.createBatch))
	mux.Handle("GET /v1/batches", s.listGroups(backend.GroupBatch))
	mux.Handle("GET /v1/batches/{id}", s.getGroup(backend.GroupBatch, false))
	mux.Handle("POST /v1/batches/{id}/cancel", s.getGroup(backend.GroupBatch, true))
}

func (s *server) createWorkflow(w http.ResponseWriter, r *http.Request) error {
	var req WorkflowRequest
	if err := s.read(w, r, &req); err != nil {
		return err
	}
	if len(req.Tasks) == 0 || len(req.Tasks) > inspect.MaxGroupJobs {
		return badRequest("tasks: want 1 to %d tasks, got %d", inspect.MaxGroupJobs, len(req.Tasks))
	}
	tasks := make([]inspect.TaskSpec, len(req.Tasks))
	for i, t := range req.Tasks {
		spec, err := s.spec(t.EnqueueRequest)
		if err != nil {
			return fmt.Errorf("tasks[%d] (%s): %w", i, t.Name, err)
		}
		tasks[i] = inspect.TaskSpec{Name: t.Name, Job: spec, DependsOn: t.DependsOn, OnDependencyFailure: backend.OnFailure(t.OnDependencyFailure)}
	}
	g, err := s.in.CreateWorkflow(r.Context(), tasks)
	if err != nil {
		return err
	}
	ids := make(map[string]string, len(g.Members))
	for _, m := range g.Members {
		ids[m.Name] = m.ID
	}
	writeJSON(w, http.StatusAccepted, map[string]any{"id": g.ID, "tasks": ids})
	return nil
}

func (s *server) createBatch(w http.ResponseWriter, r *http.Request) error {
	var req NewBatchRequest
	if err := s.read(w, r, &req); err != nil {
		return err
	}
	if len(req.Jobs) == 0 || len(req.Jobs) > inspect.MaxGroupJobs {
		return badRequest("jobs: want 1 to %d jobs, got %d", inspect.MaxGroupJobs, len(req.Jobs))
	}
	var b inspect.BatchSpec
	b.Jobs = make([]jobspec.Spec, len(req.Jobs))
	for i, j := range req.Jobs {
		var err error
		if b.Jobs[i], err = s.spec(j); err != nil {
			return fmt.Errorf("jobs[%d]: %w", i, err)
		}
	}
	for _, cb := range []struct {
		name string
		req  *EnqueueRequest
		dst  **jobspec.Spec
	}{{backend.RoleOnComplete, req.OnComplete, &b.OnComplete}, {backend.RoleOnSuccess, req.OnSuccess, &b.OnSuccess}} {
		if cb.req == nil {
			continue
		}
		spec, err := s.spec(*cb.req)
		if err != nil {
			return fmt.Errorf("%s: %w", cb.name, err)
		}
		*cb.dst = &spec
	}
	g, err := s.in.CreateBatch(r.Context(), b)
	if err != nil {
		return err
	}
	v := inspect.ViewBatch(g)
	writeJSON(w, http.StatusAccepted, map[string]any{"id": g.ID, "ids": v.IDs, "callbacks": v.Callbacks})
	return nil
}

// groupView is g as its kind shows it.
func groupView(g backend.GroupRecord) any {
	if g.Kind == backend.GroupBatch {
		return inspect.ViewBatch(g)
	}
	return inspect.ViewWorkflow(g)
}

// getGroup answers GET (and, with cancel, POST .../cancel) of one group of kind.
func (s *server) getGroup(kind backend.GroupKind, cancel bool) http.Handler {
	return handler(func(w http.ResponseWriter, r *http.Request) error {
		get := s.in.Group
		if cancel {
			get = s.in.CancelGroup
		}
		g, err := get(r.Context(), kind, r.PathValue("id"))
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, groupView(g))
		return nil
	})
}

// maxGroupPage bounds a page of workflows or batches: each is read with every
// member's state.
const maxGroupPage = 100

// listGroups answers GET /v1/workflows and GET /v1/batches: ?cursor= and ?limit=.
func (s *server) listGroups(kind backend.GroupKind) http.Handler {
	return handler(func(w http.ResponseWriter, r *http.Request) error {
		limit := 0
		if l := r.URL.Query().Get("limit"); l != "" {
			n, err := strconv.Atoi(l)
			if err != nil || n < 1 || n > maxGroupPage {
				return badRequest("limit: want a whole number from 1 to %d, got %q", maxGroupPage, l)
			}
			limit = n
		}
		page, err := s.in.Groups(r.Context(), kind, r.URL.Query().Get("cursor"), limit)
		if err != nil {
			return err
		}
		views := make([]any, len(page.Groups))
		for i, g := range page.Groups {
			views[i] = groupView(g)
		}
		writeJSON(w, http.StatusOK, map[string]any{kind.Plural(): views, "next": page.Next})
		return nil
	})
}
