package host

// The values of ModuleStatus.Status, as GET /v1/modules shows them.
const (
	// StatusServing is a module a version of which serves its queue.
	StatusServing = "serving"
	// StatusRejected is a module no version of which serves (every one failed to load).
	StatusRejected = "rejected"
)

// Serving reports whether a version of the module serves its queue.
func (m ModuleStatus) Serving() bool { return m.Status == StatusServing }
