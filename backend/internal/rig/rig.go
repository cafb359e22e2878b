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

// ReadIsNotPending publishes rounds jobs to a fresh queue q of b (a backend.StatsReader)
// one at a time and, for each, receives it and reads its Envelope: from then on the
// queue's stats must count it unacknowledged, never still pending. A delivery's time on
// offer ends in two places (the stream's send and the consumer's read); a count taken
// between the two would tell a waiter that a job is still to come that never does.
func ReadIsNotPending(tb testing.TB, b backend.Backend, q string, rounds int) {
	tb.Helper()
	ctx := context.Background()
	sr, ok := b.(backend.StatsReader)
	if !ok {
		tb.Fatalf("%T does not implement backend.StatsReader", b)
	}
	s := Consume(tb, b, backend.QueueConfig{Name: q, Prefetch: rounds})
	for i := range rounds {
		Must(tb, b.Publish(ctx, backend.NewEnvelope(q, nil), 0))
		d := <-s.Deliveries()
		_, err := d.Envelope()
		Must(tb, err)
		if st, err := sr.QueueStats(ctx, q); err != nil || st.Pending != 0 || st.Unacked != i+1 {
			tb.Fatalf("delivery %d read: QueueStats = %+v, %v; want 0 pending, %d unacked", i+1, st, err, i+1)
		}
	}
}
