package api

import (
	"net/http"
)

// RollbackRequest is the optional body of POST /v1/modules/{name}/rollback.
type RollbackRequest struct {
	// To is the version to go back to, in full or a unique prefix of 6 or more digits;
	// empty means the end of the canary under way, else the version before.
	To string `json:"to,omitempty"`
}

// The registry's rollout errors answer as inspect.HTTPError maps them: an unknown
// module or version is 404, a call that gave up waiting is 503, and no canary to
// promote or a version that cannot be served (another queue, a registration that
// failed) is 409 with the registry's message.

func (s *server) moduleHistory(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	hist, err := s.in.ModuleHistory(name)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"module": name, "versions": hist})
	return nil
}

func (s *server) moduleRollback(w http.ResponseWriter, r *http.Request) error {
	var req RollbackRequest
	if r.ContentLength != 0 {
		if err := s.decode(w, r, &req); err != nil {
			return err
		}
	}
	pin, err := s.in.Rollback(r.Context(), r.PathValue("name"), req.To)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"module": r.PathValue("name"), "pinned": pin})
	return nil
}

func (s *server) modulePromote(w http.ResponseWriter, r *http.Request) error {
	v, err := s.in.Promote(r.Context(), r.PathValue("name"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"module": r.PathValue("name"), "verdict": v})
	return nil
}
