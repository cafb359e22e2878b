package rabbitmq

import (
	"context"
	"errors"
	"testing"

	"go.uber.org/goleak"
)

// TestGroupWaitLeavesNothingBehind: Close waits for its streams with group.wait; when
// its context ends first, nothing may be left waiting (a goroutine on a WaitGroup was).
// Not parallel: goleak must see this test's goroutines only.
func TestGroupWaitLeavesNothingBehind(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var g group
	g.add() // a stream that does not end
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := g.wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("wait: %v, want the context's error", err)
	}
	idle := make(chan error, 1)
	go func() { idle <- g.wait(context.Background()) }()
	g.done()
	if err := <-idle; err != nil {
		t.Fatalf("wait: %v", err)
	}
	g.add() // busy again: the waiter that gave up above must not be around
}
