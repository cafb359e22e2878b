package inspect

import (
	"context"

	"github.com/wasmjobs/wasmjobs/host"
	"github.com/wasmjobs/wasmjobs/internal/schedule"
)

// Modules returns every module of the registry's directory with its status.
func (in *Inspector) Modules() []host.ModuleStatus { return in.modules() }

// RefusedPushes lists the module pushes this host refused (Config.RefusedPushes), nil
// when there are none to show.
func (in *Inspector) RefusedPushes() any {
	if in.cfg.RefusedPushes == nil {
		return nil
	}
	return in.cfg.RefusedPushes()
}

// registry is the registry, or an error of host.ErrUnknownModule without one.
func (in *Inspector) registry(name string) (*host.Registry, error) {
	if in.cfg.Registry == nil {
		return nil, errorf(host.ErrUnknownModule, "no such module: %q", name)
	}
	return in.cfg.Registry, nil
}

// ModuleHistory returns the versions of module name kept for a rollback, newest first.
// An error wraps host.ErrUnknownModule, or ErrConflict.
func (in *Inspector) ModuleHistory(name string) ([]host.HistoryEntry, error) {
	reg, err := in.registry(name)
	if err != nil {
		return nil, err
	}
	hist, err := reg.History(name)
	return hist, asConflict(err)
}

// Promote ends module name's canary now, promoting it. An error wraps
// host.ErrUnknownModule, a context error (it gave up waiting for a reconcile under
// way: nothing changed) or ErrConflict (no canary, a version that cannot serve).
func (in *Inspector) Promote(ctx context.Context, name string) (host.Verdict, error) {
	reg, err := in.registry(name)
	if err != nil {
		return host.Verdict{}, err
	}
	v, err := reg.Promote(ctx, name)
	return v, asConflict(err)
}

// Rollback pins module name to version to (in full or a unique prefix of 6 or more
// digits; empty: the end of the canary under way, else the version before). Its
// errors are Promote's, and host.ErrUnknownVersion.
func (in *Inspector) Rollback(ctx context.Context, name, to string) (host.Pin, error) {
	reg, err := in.registry(name)
	if err != nil {
		return host.Pin{}, err
	}
	pin, err := reg.Rollback(ctx, name, to)
	return pin, asConflict(err)
}

// Schedules lists the modules' periodic schedules with their next tick and the last
// fired one this host knows of; never nil.
func (in *Inspector) Schedules() []schedule.Status {
	out := []schedule.Status{}
	if in.cfg.Schedules != nil {
		out = append(out, in.cfg.Schedules()...)
	}
	return out
}

// Rates returns the recent rates of every served queue.
func (in *Inspector) Rates() []RateSeries {
	out := []RateSeries{}
	for _, q := range in.ServedQueues() {
		out = append(out, in.cfg.Rates.Series(q))
	}
	return out
}

// QueueRates returns queue's recent rates (zeros for one with no settles).
func (in *Inspector) QueueRates(queue string) RateSeries { return in.cfg.Rates.Series(queue) }
