package api

import (
	"net/http"

	"github.com/wasmjobs/wasmjobs/internal/schedule"
)

// SchedulesResponse is GET /v1/schedules' answer.
type SchedulesResponse struct {
	Schedules []schedule.Status `json:"schedules"`
}

// schedules lists the schedules of the serving modules with their next tick and the
// last fired one this host knows of.
func (s *server) schedules(w http.ResponseWriter, r *http.Request) {
	out := SchedulesResponse{Schedules: []schedule.Status{}}
	if s.cfg.Schedules != nil {
		out.Schedules = append(out.Schedules, s.cfg.Schedules()...)
	}
	writeJSON(w, http.StatusOK, out)
}
