// Package backoff is the one retry pause of wasmjobs: exponential with jitter, bounded,
// and cut short by a context. The worker's job retries, its resubscriptions, and the
// RabbitMQ backend's reconnections and stream resubscriptions all use it, so that they
// grow, cap and stop the same way.
//
// It waits with timers only (no polling), so that tests run it under testing/synctest
// in virtual time.
package backoff

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"
)

// Policy is exponential backoff: before attempt n+1 the caller waits Jitter(ceiling),
// where ceiling = min(Cap, Base * 2^(n-1)).
type Policy struct {
	// Base is the ceiling of the first pause; it must be positive.
	Base time.Duration
	// Cap bounds every ceiling; below Base it counts as Base.
	Cap time.Duration
	// Jitter picks the pause given its ceiling. Nil means Full: uniform in [0, ceiling].
	Jitter func(ceiling time.Duration) time.Duration
}

// Full is full jitter: a pause uniform in [0, ceiling]. It spreads the retries of many
// clients the most.
func Full(ceiling time.Duration) time.Duration {
	if ceiling <= 0 {
		return 0
	}
	return rand.N(ceiling + 1)
}

// Equal is equal jitter: a pause uniform in [ceiling/2, ceiling]. It never retries at
// once, which suits reconnections to a broker that just went away.
func Equal(ceiling time.Duration) time.Duration {
	if ceiling <= 0 {
		return 0
	}
	return ceiling/2 + rand.N(ceiling-ceiling/2+1)
}

// Ceiling returns the ceiling of the pause after attempt (1 for the first), without
// overflow however large attempt is.
func (p Policy) Ceiling(attempt int) time.Duration {
	limit := max(p.Cap, p.Base)
	shift := max(attempt-1, 0)
	if shift >= 62 {
		return limit
	}
	c := p.Base << shift
	if c <= 0 || c>>shift != p.Base || c > limit {
		return limit
	}
	return c
}

// Delay returns the pause after attempt: the jittered ceiling.
func (p Policy) Delay(attempt int) time.Duration {
	j := p.Jitter
	if j == nil {
		j = Full
	}
	return j(p.Ceiling(attempt))
}

// Sleep waits d, or until ctx is done and then returns its error.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// permanent marks an error that retrying cannot cure.
type permanent struct{ err error }

func (e *permanent) Error() string { return e.err.Error() }
func (e *permanent) Unwrap() error { return e.err }

// Permanent wraps err so that Retry returns it at once instead of trying again. The
// wrapper is transparent to errors.Is and errors.As; Retry returns err itself.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanent{err}
}

// Retry calls op until it succeeds, returns a Permanent error, or ctx is done; between
// calls it waits p.Delay(attempt). op is told the attempt (1 for the first). It returns
// nil on success, the permanent error unwrapped, or, when ctx ends first, ctx's error
// joined with op's last error.
func Retry(ctx context.Context, p Policy, op func(ctx context.Context, attempt int) error) error {
	for attempt := 1; ; attempt++ {
		err := op(ctx, attempt)
		if err == nil {
			return nil
		}
		if pe, ok := errors.AsType[*permanent](err); ok {
			return pe.err
		}
		if ctx.Err() != nil {
			return errors.Join(ctx.Err(), err)
		}
		if serr := Sleep(ctx, p.Delay(attempt)); serr != nil {
			return errors.Join(serr, err)
		}
	}
}
