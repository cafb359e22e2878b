package worker

import (
	"time"

	"golang.org/x/time/rate"
)

// UntilToken is how long the dispatcher waits, at now, for the first token of a fresh
// queue limited to r and burst once its bucket is empty.
func UntilToken(r rate.Limit, burst int, now time.Time) time.Duration {
	qs := &queueState{}
	pol := &policy{spec: Queue{Rate: r, Burst: burst}}
	qs.untilToken(pol, now)
	qs.limiter.ReserveN(now, burst)
	return qs.untilToken(pol, now)
}
