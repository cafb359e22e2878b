package wjhttp

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	wasmjobs "github.com/wasmjobs/wasmjobs/guest-sdk/go"
)

// RetryAfterCap is the longest delay RetryAfter stages: a larger Retry-After is
// capped to it.
const RetryAfterCap = 24 * time.Hour

// RetryAfter settles the job after resp, a 429 or 503 answer, the way its Retry-After
// header asks: return wjhttp.RetryAfter(resp) from the handler.
//
// With a Retry-After of delay-seconds, or an HTTP date (the delay until then, at least
// 1 ms, at most RetryAfterCap), the job is deferred by that delay without spending an attempt, with the reason
// "http STATUS: Retry-After VALUE" (the host caps the delay by the queue's limits).
// Without a header it can parse, the job is retried with the queue's backoff, with the
// reason "http STATUS". It does not close resp.Body (the host closes every request
// still open when the handler returns).
func RetryAfter(resp *http.Response) error {
	return retryAfter(resp, time.Now())
}

func retryAfter(resp *http.Response, now time.Time) error {
	reason := fmt.Sprintf("http %d", resp.StatusCode)
	v := strings.TrimSpace(resp.Header.Get("Retry-After"))
	if d, ok := parseRetryAfter(v, now); ok {
		return wasmjobs.Defer(d, reason+": Retry-After "+v)
	}
	return wasmjobs.Retry(reason, 0)
}

// parseRetryAfter reads a Retry-After value (RFC 9110, 10.2.3): delay-seconds or an
// HTTP date, relative to now; a delay of 0, or a date not after now, is 1 ms (a
// deferral needs a positive delay), and one past RetryAfterCap is RetryAfterCap.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.ParseUint(v, 10, 63); err == nil {
		const most = uint64(RetryAfterCap / time.Second)
		return max(time.Duration(min(secs, most))*time.Second, time.Millisecond), true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return min(max(t.Sub(now), time.Millisecond), RetryAfterCap), true
}
