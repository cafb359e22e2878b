package backoff_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/wasmjobs/wasmjobs/internal/backoff"
)

func TestCeiling(t *testing.T) {
	t.Parallel()
	p := backoff.Policy{Base: 100 * time.Millisecond, Cap: time.Second}
	for _, c := range []struct {
		attempt int
		want    time.Duration
	}{
		{0, 100 * time.Millisecond}, {1, 100 * time.Millisecond}, {2, 200 * time.Millisecond},
		{4, 800 * time.Millisecond}, {5, time.Second}, {63, time.Second}, {1 << 30, time.Second},
	} {
		if got := p.Ceiling(c.attempt); got != c.want {
			t.Errorf("Ceiling(%d) = %v, want %v", c.attempt, got, c.want)
		}
	}
	huge := backoff.Policy{Base: time.Hour, Cap: 1<<63 - 1}
	if got := huge.Ceiling(40); got != huge.Cap {
		t.Errorf("overflowing ceiling = %v, want the cap", got)
	}
	if got := (backoff.Policy{Base: time.Second, Cap: time.Millisecond}).Ceiling(3); got != time.Second {
		t.Errorf("a cap below the base: %v, want the base", got)
	}
}

func TestJitterBounds(t *testing.T) {
	t.Parallel()
	for range 1000 {
		if d := backoff.Full(time.Second); d < 0 || d > time.Second {
			t.Fatalf("Full = %v", d)
		}
		if d := backoff.Equal(time.Second); d < time.Second/2 || d > time.Second {
			t.Fatalf("Equal = %v", d)
		}
	}
	if backoff.Full(0) != 0 || backoff.Equal(0) != 0 {
		t.Fatal("a zero ceiling must give no pause")
	}
}

// TestRetryWaitsTheBackoffInVirtualTime checks the pauses between attempts, exactly, in
// virtual time.
func TestRetryWaitsTheBackoffInVirtualTime(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		p := backoff.Policy{Base: time.Second, Cap: 4 * time.Second, Jitter: func(c time.Duration) time.Duration { return c }}
		start := time.Now()
		var at []time.Duration
		err := backoff.Retry(context.Background(), p, func(ctx context.Context, attempt int) error {
			at = append(at, time.Since(start))
			if attempt == 5 {
				return nil
			}
			return errors.New("not yet")
		})
		if err != nil {
			t.Fatal(err)
		}
		want := []time.Duration{0, time.Second, 3 * time.Second, 7 * time.Second, 11 * time.Second}
		if len(at) != len(want) {
			t.Fatalf("attempts at %v, want %v", at, want)
		}
		for i := range want {
			if at[i] != want[i] {
				t.Fatalf("attempts at %v, want %v", at, want)
			}
		}
	})
}

func TestRetryStopsOnPermanent(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		fatal := errors.New("fatal")
		n := 0
		err := backoff.Retry(context.Background(), backoff.Policy{Base: time.Second}, func(context.Context, int) error {
			n++
			if n == 2 {
				return backoff.Permanent(fatal)
			}
			return errors.New("transient")
		})
		if err != fatal || n != 2 {
			t.Fatalf("err %v after %d attempts, want the permanent error after 2", err, n)
		}
	})
}

// TestRetryEndsWithItsContext: a context that ends during a pause ends Retry at once,
// not at the end of the pause.
func TestRetryEndsWithItsContext(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		start := time.Now()
		last := errors.New("broker unreachable")
		err := backoff.Retry(ctx, backoff.Policy{Base: time.Hour, Jitter: func(c time.Duration) time.Duration { return c }},
			func(context.Context, int) error { return last })
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, last) {
			t.Fatalf("err %v, want the deadline and the last error", err)
		}
		if took := time.Since(start); took != 90*time.Second {
			t.Fatalf("Retry returned after %v, want 90s (the context's deadline)", took)
		}
	})
}

func TestSleep(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		if err := backoff.Sleep(context.Background(), time.Minute); err != nil || time.Since(start) != time.Minute {
			t.Fatalf("Sleep: %v after %v", err, time.Since(start))
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := backoff.Sleep(ctx, time.Minute); !errors.Is(err, context.Canceled) || time.Since(start) != time.Minute {
			t.Fatalf("Sleep on a done context: %v after %v", err, time.Since(start))
		}
	})
}
