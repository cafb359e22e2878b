package server

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestEveryPartStopsBeforeTheBackendsSlice: each part stopped before the backend
// stops within the close deadline less backendCloseSlice, so that the backend, last,
// keeps a slice of time of its own; the parts' errors come back, each named.
func TestEveryPartStopsBeforeTheBackendsSlice(t *testing.T) {
	t.Parallel()
	deadlines := map[string]time.Time{}
	part := func(name string, err error) component {
		return component{name: name, stop: func(ctx context.Context) error {
			dl, _ := ctx.Deadline()
			deadlines[name] = dl
			return err
		}}
	}
	broken := errors.New("broken")
	s := &Server{parts: []component{part("backend", nil), part("engine", nil), part("fleet follower", broken), part("listener", nil)}}
	end := time.Now().Add(CloseGrace)
	ctx, cancel := context.WithDeadline(context.Background(), end)
	defer cancel()
	err := s.stopParts(ctx)
	if !errors.Is(err, broken) || err.Error() != "server: stopping the fleet follower: broken" {
		t.Errorf("stopParts: %v, want the follower's error, named", err)
	}
	if !deadlines["backend"].Equal(end) {
		t.Errorf("the backend's stop had deadline %v, want the whole %v", deadlines["backend"], end)
	}
	for _, name := range []string{"engine", "fleet follower", "listener"} {
		if want := end.Add(-backendCloseSlice); !deadlines[name].Equal(want) {
			t.Errorf("the %s's stop had deadline %v, want %v (the backend's slice kept)", name, deadlines[name], want)
		}
	}
}
