package worker

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Chain wraps h in middleware, the first outermost: Chain(h, a, b) runs a, then b,
// then h.
func Chain(h Handler, mw ...Middleware) Handler {
	for i := len(mw) - 1; i >= 0; i-- {
		h = mw[i](h)
	}
	return h
}

// Recover turns a panic in the handler into a Failed result whose reason starts with
// "panic: ". The worker always applies it, outermost.
func Recover(next Handler) Handler {
	return HandlerFunc(func(ctx context.Context, job *Job) (res Result) {
		defer func() {
			if p := recover(); p != nil {
				res = Result{Outcome: Failed, Reason: fmt.Sprintf("panic: %v", p)}
			}
		}()
		return next.Handle(ctx, job)
	})
}

// Deadline gives each job at most d: the handler's context is cancelled after d, and a
// job that does not succeed by then fails with the reason "timeout after d". A
// non-positive d leaves jobs without a deadline.
func Deadline(d time.Duration) Middleware {
	return func(next Handler) Handler {
		if d <= 0 {
			return next
		}
		return HandlerFunc(func(ctx context.Context, job *Job) Result {
			ctx, cancel := context.WithTimeout(ctx, d)
			defer cancel()
			res := next.Handle(ctx, job)
			if res.Outcome != Ack && errors.Is(ctx.Err(), context.DeadlineExceeded) {
				res.Outcome, res.Reason = Failed, fmt.Sprintf("timeout after %v", d)
			}
			return res
		})
	}
}
