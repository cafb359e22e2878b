// Package rig is the test rig the backends' own tests and benchmarks share: failing on
// an error, a stream of a freshly declared queue, a backend closed under a deadline.
// It knows only the backend contract, so that a backend's internal tests can use it
// too.
package rig

import (
	"context"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
)

// CloseTimeout bounds Close.
const CloseTimeout = 30 * time.Second

// Must fails tb at once when err is not nil.
func Must(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}

// Consume declares q on b and starts a stream of it, failing tb on an error. The
// stream is dropped when tb ends.
func Consume(tb testing.TB, b backend.Backend, q backend.QueueConfig) backend.Stream {
	tb.Helper()
	ctx := context.Background()
	if err := b.Declare(ctx, q); err != nil {
		tb.Fatalf("Declare(%s): %v", q.Name, err)
	}
	s, err := b.Consume(ctx, q)
	if err != nil {
		tb.Fatalf("Consume(%s): %v", q.Name, err)
	}
	tb.Cleanup(s.Drop)
	return s
}

// Close closes b within CloseTimeout, reporting an error to tb without stopping it.
func Close(tb testing.TB, b backend.Backend) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), CloseTimeout)
	defer cancel()
	if err := b.Close(ctx); err != nil {
		tb.Errorf("Close: %v", err)
	}
}
