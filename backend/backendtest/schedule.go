package backendtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
)

// ticks reads the store's ticks.
func (h *harness) ticks(t *testing.T, st backend.ScheduleStore) map[string]time.Time {
	t.Helper()
	ticks, err := st.ScheduleTicks(h.ctx())
	if err != nil {
		t.Fatalf("ScheduleTicks: %v", err)
	}
	return ticks
}

// expectTicks checks that the store's ticks are want, by schedule, at the same
// instants.
func (h *harness) expectTicks(t *testing.T, st backend.ScheduleStore, when string, want map[string]time.Time) {
	t.Helper()
	got := h.ticks(t, st)
	if len(got) != len(want) {
		t.Fatalf("%s: ticks %v, want %v", when, got, want)
	}
	for name, tick := range want {
		if !got[name].Equal(tick) {
			t.Fatalf("%s: tick of %q is %v, want %v (all: %v)", when, name, got[name], tick, got)
		}
	}
}

// tick is an instant of a schedule: whole seconds in UTC, as the scheduler fires.
func tick(n int) time.Time { return time.Unix(1_700_000_000+int64(n)*60, 0).UTC() }

// testScheduleTicks: a store knows no tick before the first; PublishTick publishes the
// job, with no delay and exactly as given, and records the tick as its schedule's last,
// each schedule apart; a later tick replaces the earlier one; ScheduleTicks returns a
// copy, which the caller may change.
func testScheduleTicks(t *testing.T, h *harness) {
	st := implements[backend.ScheduleStore](t, h)
	h.expectTicks(t, st, "before any tick", map[string]time.Time{})
	q := h.declare(t, 8, 0)
	s := h.consume(t, q)
	fire := func(schedule string, n int) {
		t.Helper()
		env := job(q, schedule+"-tick")
		env.Headers = map[string]string{"schedule": schedule}
		if err := st.PublishTick(h.ctx(), schedule, tick(n), env); err != nil {
			t.Fatalf("PublishTick(%s, %v): %v", schedule, tick(n), err)
		}
		d, got := h.receive(t, s)
		if got.ID != env.ID || string(got.Payload) != string(env.Payload) || got.Headers["schedule"] != schedule {
			t.Fatalf("the tick of %s published %+v, want %+v", schedule, got, env)
		}
		mustSettle(t, "Ack", d.Ack(h.ctx()))
	}
	fire("hourly", 1)
	fire("daily", 2)
	h.expectTicks(t, st, "after two schedules fired", map[string]time.Time{"hourly": tick(1), "daily": tick(2)})
	fire("hourly", 3)
	want := map[string]time.Time{"hourly": tick(3), "daily": tick(2)}
	h.expectTicks(t, st, "after hourly fired again", want)
	ticks := h.ticks(t, st)
	delete(ticks, "daily")
	ticks["hourly"] = tick(99)
	h.expectTicks(t, st, "after the caller changed what ScheduleTicks returned", want)
	h.expectNothing(t, q, s)
}

// testScheduleTickRepeat: a tick fired again with the id of a job the backend still
// holds (its first firing is not settled) publishes nothing more, and its tick is
// recorded all the same.
func testScheduleTickRepeat(t *testing.T, h *harness) {
	st := implements[backend.ScheduleStore](t, h)
	q := h.declare(t, 8, 0)
	env := job(q, "tick")
	if err := st.PublishTick(h.ctx(), "every", tick(1), env); err != nil {
		t.Fatalf("PublishTick: %v", err)
	}
	s := h.consume(t, q)
	d, got := h.receive(t, s)
	if got.ID != env.ID {
		t.Fatalf("got %s, want %s", got.ID, env.ID)
	}
	if err := st.PublishTick(h.ctx(), "every", tick(2), env); err != nil {
		t.Fatalf("PublishTick of a held id: %v", err)
	}
	h.expectTicks(t, st, "after the repeat", map[string]time.Time{"every": tick(2)})
	mustSettle(t, "Ack", d.Ack(h.ctx()))
	h.expectNothing(t, q, s)
}

// testScheduleTickFails: a tick whose job cannot be published (its queue was never
// declared) fails, and its tick is not recorded: the tick is not lost, it fires again.
func testScheduleTickFails(t *testing.T, h *harness) {
	st := implements[backend.ScheduleStore](t, h)
	q := h.declare(t, 8, 0)
	if err := st.PublishTick(h.ctx(), "kept", tick(1), job(q, "kept")); err != nil {
		t.Fatalf("PublishTick: %v", err)
	}
	env := job(backend.QueueConfig{Name: h.prefix + "-never-declared"}, "lost")
	if err := st.PublishTick(h.ctx(), "broken", tick(2), env); !errors.Is(err, backend.ErrUnknownQueue) {
		t.Fatalf("PublishTick to an undeclared queue = %v, want ErrUnknownQueue", err)
	}
	h.expectTicks(t, st, "after a failed tick", map[string]time.Time{"kept": tick(1)})
}

// testScheduleClosed: after Close, both methods fail with ErrShutDown.
func testScheduleClosed(t *testing.T, h *harness) {
	st := implements[backend.ScheduleStore](t, h)
	q := h.declare(t, 8, 0)
	ctx, cancel := context.WithTimeout(h.ctx(), h.o.Timeout)
	defer cancel()
	if err := h.b.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := st.ScheduleTicks(h.ctx()); !errors.Is(err, backend.ErrShutDown) {
		t.Errorf("ScheduleTicks after Close = %v, want ErrShutDown", err)
	}
	if err := st.PublishTick(h.ctx(), "late", tick(1), job(q, "late")); !errors.Is(err, backend.ErrShutDown) {
		t.Errorf("PublishTick after Close = %v, want ErrShutDown", err)
	}
}
