package ui

import (
	"sync"
	"time"

	"github.com/wasmjobs/wasmjobs/host"
)

// MaxVersionEvents bounds the version history kept per module.
const MaxVersionEvents = 50

// VersionEvent is one change of a module: a version loaded or swapped in, the module
// removed, or a candidate rejected with the error.
type VersionEvent struct {
	Kind    string    `json:"kind"`
	Version string    `json:"version,omitempty"`
	File    string    `json:"file"`
	Error   string    `json:"error,omitempty"`
	At      time.Time `json:"at"`
}

// Versions keeps each module's recent version history, newest first, from the
// registry's events (host.RegistryConfig.OnEvent). It lives as long as the process.
type Versions struct {
	mu sync.Mutex
	m  map[string][]VersionEvent
}

// NewVersions returns an empty history.
func NewVersions() *Versions { return &Versions{m: map[string][]VersionEvent{}} }

// Record adds a registry event to its module's history.
func (v *Versions) Record(ev host.RegistryEvent) {
	if v == nil {
		return
	}
	e := VersionEvent{Kind: ev.Kind, Version: ev.Version, File: ev.File, At: ev.At}
	if e.At.IsZero() {
		e.At = time.Now()
	}
	if ev.Err != nil {
		e.Error = ev.Err.Error()
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	h := append([]VersionEvent{e}, v.m[ev.Module]...)
	if len(h) > MaxVersionEvents {
		h = h[:MaxVersionEvents]
	}
	v.m[ev.Module] = h
}

// Of returns module's history, newest first.
func (v *Versions) Of(module string) []VersionEvent {
	if v == nil {
		return nil
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]VersionEvent(nil), v.m[module]...)
}
