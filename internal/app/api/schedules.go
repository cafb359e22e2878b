package api

import (
	"github.com/wasmjobs/wasmjobs/internal/schedule"
)

// SchedulesResponse is GET /v1/schedules' answer.
type SchedulesResponse struct {
	Schedules []schedule.Status `json:"schedules"`
}
