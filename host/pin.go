package host

import (
	"context"
	"fmt"
	"time"
)

// setPin sets (nil: clears) the module's pin, in the entry and the history.
func (r *Registry) setPin(e *entry, name string, p *Pin) {
	r.mu.Lock()
	e.pin = p
	r.mu.Unlock()
	if err := r.hist.setPin(name, p); err != nil {
		r.log.Warn("keeping a module's pin", "module", name, "error", err)
	}
}

// Rollback puts the module back on an earlier version and pins it there until its
// files change (the files are never edited): to is a version of its history (in full,
// or a unique prefix of 6 or more digits); empty means the canary's end if one is
// under way, else the version that served before the current one.
func (r *Registry) Rollback(ctx context.Context, name, to string) (Pin, error) {
	if err := r.lockSync(ctx); err != nil {
		return Pin{}, err
	}
	defer r.unlockSync()
	e, h := r.lookup(name)
	if h == nil {
		return Pin{}, fmt.Errorf("%w: %q (or it serves no version)", ErrUnknownModule, name)
	}
	const reason = "rolled back by an operator"
	if to == "" {
		if v, ok := h.rollBackCanary(reason); ok {
			r.applyVerdict(ctx, name, v)
			p := &Pin{Version: v.Current, FileVersion: v.Version, Reason: v.Reason, At: v.At}
			r.setPin(e, name, p)
			r.emit(RegistryEvent{Kind: "pinned", Module: name, File: e.file, Version: v.Current, At: time.Now()})
			return *p, nil
		}
		r.mu.Lock()
		last, pin := e.last, e.pin
		r.mu.Unlock()
		if last != nil && last.Kind == VerdictRolledBack && pin != nil && pin.FileVersion == last.Version &&
			pin.Version == last.Current && h.Module().Version() == pin.Version {
			// The files' canary was rolled back already (by itself, maybe an instant
			// before the call): that rollback's pin is the answer, not one version more
			// (an explicit version goes further back).
			return *pin, nil
		}
		var latest time.Time
		for _, he := range r.hist.list(name) {
			if he.State == HistoryPrevious && he.EndedAt.After(latest) {
				to, latest = he.Version, he.EndedAt
			}
		}
		if to == "" {
			return Pin{}, fmt.Errorf("%w: %s has no earlier version kept", ErrUnknownVersion, name)
		}
	} else {
		var err error
		if to, err = r.hist.resolve(name, to); err != nil {
			return Pin{}, err
		}
	}
	// The target is loaded, checked and its queue registered first: a rollback that
	// fails changes nothing (the canary, if one runs, runs on).
	cur := h.Module()
	var m *Module
	if to != cur.Version() {
		var err error
		if m, err = r.loadKept(ctx, name, e.file, to); err != nil {
			return Pin{}, fmt.Errorf("rolling %s back to %s: %w", name, to, err)
		}
		if m.Queue() != cur.Queue() {
			m.Retire()
			return Pin{}, fmt.Errorf("rolling %s back to %s: that version consumes queue %q, the module serves %q; move it back by changing its files",
				name, to, m.Queue(), cur.Queue())
		}
		if err := r.cfg.Queues.Register(ctx, h.queueFor(m)); err != nil {
			m.Retire()
			return Pin{}, fmt.Errorf("rolling %s back to %s: serving queue %q: %w", name, to, m.Queue(), err)
		}
	}
	if v, ok := h.endNow(VerdictRolledBack, reason+" to "+to); ok {
		r.applyVerdict(ctx, name, v)
	}
	if m != nil {
		h.Swap(m)
		r.markHistory(name, to, HistoryCurrent, "")
		r.markHistory(name, cur.Version(), HistoryRolledBack, reason+" to "+to)
	}
	r.mu.Lock()
	fileVersion := e.fileVersion
	r.mu.Unlock()
	p := &Pin{Version: to, FileVersion: fileVersion, Reason: reason, At: time.Now()}
	r.setPin(e, name, p)
	r.log.Warn("module rolled back by an operator and pinned until its files change", "module", name, "version", to, "previous_version", cur.Version(), "file_version", fileVersion)
	r.emit(RegistryEvent{Kind: "pinned", Module: name, File: e.file, Version: to, At: time.Now()})
	return *p, nil
}
