package inflight_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/wasmjobs/wasmjobs/internal/inflight"
)

// TestWaitLeavesNothingBehind: the RabbitMQ backend's Close waits for its streams with
// Wait; when its context ends first, nothing may be left waiting (a goroutine on a
// WaitGroup was). Not parallel: goleak must see this test's goroutines only.
func TestWaitLeavesNothingBehind(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var c inflight.Counter
	c.Add() // a stream that does not end
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait: %v, want the context's error", err)
	}
	idle := make(chan error, 1)
	go func() { idle <- c.Wait(context.Background()) }()
	c.Done()
	if err := <-idle; err != nil {
		t.Fatalf("Wait: %v", err)
	}
	c.Add() // busy again: the waiter that gave up above must not be around
}

// Wait returns at once on a zero count, waits for the last Done otherwise (every
// waiter of the round, and again after the count rose anew), and gives up with its
// context's error when that ends first.
func TestWaitForZero(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var c inflight.Counter
		if err := c.Wait(context.Background()); err != nil {
			t.Fatalf("Wait on zero: %v", err)
		}
		for round := range 2 {
			c.Add()
			c.Add()
			if n := c.Count(); n != 2 {
				t.Fatalf("round %d: Count = %d, want 2", round, n)
			}
			errs := make(chan error, 2)
			var released [2]time.Time
			for i := range 2 {
				go func() {
					err := c.Wait(context.Background())
					released[i] = time.Now()
					errs <- err
				}()
			}
			start := time.Now()
			time.Sleep(time.Second)
			c.Done()
			time.Sleep(time.Second)
			c.Done()
			for range 2 {
				if err := <-errs; err != nil {
					t.Fatalf("round %d: Wait: %v", round, err)
				}
			}
			for i, at := range released {
				if got := at.Sub(start); got != 2*time.Second {
					t.Errorf("round %d: waiter %d released after %v, want 2s (at the last Done)", round, i, got)
				}
			}
		}

		c.Add()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := c.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Wait past its deadline = %v, want DeadlineExceeded", err)
		}
		if n := c.Count(); n != 1 {
			t.Fatalf("Count after a wait that gave up = %d, want 1", n)
		}
		c.Done()
		if err := c.Wait(context.Background()); err != nil {
			t.Fatalf("Wait after the last Done: %v", err)
		}
	})
}
