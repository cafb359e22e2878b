package host

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// ModuleStatus describes a module of the directory.
type ModuleStatus struct {
	Name  string `json:"name"`
	File  string `json:"file"`
	Queue string `json:"queue,omitempty"`
	// Version is the sha256 of the serving bytes; empty while none serves.
	Version  string    `json:"version,omitempty"`
	LoadedAt time.Time `json:"loaded_at,omitzero"`
	// Status is "serving" or "rejected" (no version serves).
	Status string `json:"status"`
	// Error is why the last change was rejected, if it was; a serving module keeps
	// serving its previous version.
	Error string `json:"error,omitempty"`
	// InFlight counts jobs running on the serving version.
	InFlight int `json:"in_flight"`
	// Canary is the new version on trial, if one is.
	Canary *CanaryStatus `json:"canary,omitempty"`
	// LastRollout is how the last canary ended: promoted or rolled back, why, with the
	// two failure rates.
	LastRollout *Verdict `json:"last_rollout,omitempty"`
	// Pinned is the version a rollback pinned, serving until the files change.
	Pinned *Pin `json:"pinned,omitempty"`
	// Breakers are the circuit breakers of the module's outbound HTTP on this host,
	// one per destination it called, a bounded number (past the bound the least
	// recently used closed breaker is dropped).
	Breakers []BreakerState `json:"breakers,omitempty"`
	// HTTP is the serving version's outbound HTTP grant; nil without one.
	HTTP *HTTPGrant `json:"http,omitempty"`
}

// Modules describes every module of the directory, sorted by name.
func (r *Registry) Modules() []ModuleStatus {
	out := r.modules()
	// The breakers are read outside r.mu: they are another package's, under locks
	// of their own.
	for i := range out {
		if m := r.Handler(out[i].Name); m != nil && out[i].Serving() {
			out[i].Breakers = m.Module().Breakers()
		}
	}
	return out
}

func (r *Registry) modules() []ModuleStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]ModuleStatus, 0, len(r.entries))
	for name, e := range r.entries {
		st := ModuleStatus{Name: name, File: e.file, Status: StatusRejected}
		if e.handler != nil {
			m := e.handler.Module()
			st.Status, st.Queue, st.Version, st.LoadedAt, st.InFlight = StatusServing, m.Queue(), m.Version(), m.LoadedAt(), m.InUse()
			st.Canary = e.handler.canaryStatus()
			st.HTTP = m.Manifest().HTTP()
		}
		st.LastRollout, st.Pinned = e.last, e.pin
		if e.err != nil {
			st.Error = e.err.Error()
		}
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b ModuleStatus) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Handler returns the handler serving the module name, or nil.
func (r *Registry) Handler(name string) *Handler {
	_, h := r.lookup(name)
	return h
}

// lookup returns the entry of the module name and the handler serving it, each nil
// when there is none.
func (r *Registry) lookup(name string) (*entry, *Handler) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e := r.entries[name]; e != nil {
		return e, e.handler
	}
	return nil, nil
}

// History returns the versions of the module name kept for a rollback, newest first.
// Only a module of the directory has one: any other name (a path, an unknown module)
// is ErrUnknownModule, and neither reads the disk nor stays in memory.
func (r *Registry) History(name string) ([]HistoryEntry, error) {
	if !validModuleName(name) {
		return nil, fmt.Errorf("%w: %q is not a module name", ErrUnknownModule, name)
	}
	r.mu.Lock()
	_, known := r.entries[name]
	r.mu.Unlock()
	if !known {
		return nil, fmt.Errorf("%w: %q", ErrUnknownModule, name)
	}
	return r.hist.list(name), nil
}

// validModuleName reports whether name can be a module's (a file's base name less
// .wasm): not empty, no path separator, no leading dot, so that it never names a path
// outside the history's directory.
func validModuleName(name string) bool {
	return name != "" && !strings.ContainsAny(name, `/\`) && !strings.HasPrefix(name, ".") && !strings.ContainsRune(name, 0)
}

// The values of ModuleStatus.Status, as GET /v1/modules shows them.
const (
	// StatusServing is a module a version of which serves its queue.
	StatusServing = "serving"
	// StatusRejected is a module no version of which serves (every one failed to load).
	StatusRejected = "rejected"
)

// Serving reports whether a version of the module serves its queue.
func (m ModuleStatus) Serving() bool { return m.Status == StatusServing }
