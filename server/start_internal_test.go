package server

import (
	"context"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/backend/memory"
)

// TestStartNeverReturnsNilWithTheRunEnded: a Start whose context ends just as it
// finishes either fails or leaves the host's run going; it never says the host
// serves while its run (the schedules, the fleet follower) has ended with ctx. The
// timeouts are spread around how long a Start takes, to land in its last moments.
func TestStartNeverReturnsNilWithTheRunEnded(t *testing.T) {
	t.Parallel()
	modules, cache := t.TempDir(), t.TempDir()
	// start builds a server and starts it with timeout, and says how long Start took.
	start := func(timeout time.Duration) (*Server, time.Duration, error) {
		s, err := New(memory.New(memory.Config{}), Config{Modules: modules, CacheDir: cache})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		t0 := time.Now()
		err = s.Start(ctx)
		return s, time.Since(t0), err
	}
	// How long a warm Start takes here: the shortest of a few.
	took := time.Hour
	for range 5 {
		s, d, err := start(time.Minute)
		took = min(took, d)
		if err != nil {
			t.Fatal(err)
		}
		s.Stop(context.Background())
	}

	succeeded := 0
	for i := range 400 {
		s, _, err := start(took * time.Duration(i%40) / 20) // 0 to 2x took
		if err == nil {
			succeeded++
			if s.runCtx.Err() != nil {
				t.Errorf("Start returned nil with the host's run ended (%v)", s.runCtx.Err())
			}
		}
		s.Stop(context.Background())
	}
	t.Logf("a Start takes %v; %d of 400 succeeded", took, succeeded)
}
