package api

import (
	"context"
	"errors"
	"net/http"

	"github.com/wasmjobs/wasmjobs/host"
)

// RollbackRequest is the optional body of POST /v1/modules/{name}/rollback.
type RollbackRequest struct {
	// To is the version to go back to, in full or a unique prefix of 6 or more digits;
	// empty means the end of the canary under way, else the version before.
	To string `json:"to,omitempty"`
}

// rolloutError answers the registry's rollout errors: an unknown module or version is
// 404, no canary to promote is 409, a call that gave up waiting is 503, and a version that cannot be served (another
// queue, a registration that failed) is 409 with the registry's message.
func rolloutError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, host.ErrUnknownModule), errors.Is(err, host.ErrUnknownVersion):
		writeError(w, http.StatusNotFound, "%v", err)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		// The call gave up waiting for a reconcile under way: nothing changed.
		writeError(w, http.StatusServiceUnavailable, "%v", err)
	default:
		writeError(w, http.StatusConflict, "%v", err)
	}
}

func (s *server) moduleHistory(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	hist, err := s.cfg.Registry.History(name)
	if err != nil {
		rolloutError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"module": name, "versions": hist})
}

func (s *server) moduleRollback(w http.ResponseWriter, r *http.Request) {
	var req RollbackRequest
	if r.ContentLength != 0 {
		if err := s.decode(w, r, &req); err != nil {
			fail(w, err)
			return
		}
	}
	pin, err := s.cfg.Registry.Rollback(r.Context(), r.PathValue("name"), req.To)
	if err != nil {
		rolloutError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"module": r.PathValue("name"), "pinned": pin})
}

func (s *server) modulePromote(w http.ResponseWriter, r *http.Request) {
	v, err := s.cfg.Registry.Promote(r.Context(), r.PathValue("name"))
	if err != nil {
		rolloutError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"module": r.PathValue("name"), "verdict": v})
}
