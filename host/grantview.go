package host

import (
	"slices"
	"time"

	"github.com/wasmjobs/wasmjobs/internal/outbound"
)

// HTTPGrant is a module's [http] grant as /v1/modules and the modules page show it.
// The headers the host adds are named, never their values (they hold credentials).
type HTTPGrant struct {
	// Allow are the allow entries, in the manifest's order.
	Allow []HTTPEntry `json:"allow"`
	// Timeout bounds one request, as a Go duration ("30s").
	Timeout string `json:"timeout"`
	// MaxResponse, MaxRequestBody (bytes) and MaxRequests (per run) are the grant's
	// bounds.
	MaxResponse    int64 `json:"max_response"`
	MaxRequestBody int64 `json:"max_request_body"`
	MaxRequests    int   `json:"max_requests"`
	// IdempotencyHeader is the header of idempotency keys; empty for none.
	IdempotencyHeader string `json:"idempotency_header,omitempty"`
	// BreakerFailures is how many consecutive failures open a destination's circuit
	// breaker; BreakerCooldown how long it stays open, as a Go duration.
	BreakerFailures int    `json:"breaker_failures"`
	BreakerCooldown string `json:"breaker_cooldown"`
	// OutageWait bounds how long an outage may defer a job, as a Go duration.
	OutageWait string `json:"outage_wait"`
}

// HTTPEntry is one allow entry of an HTTPGrant, with its [http.headers] names and its
// [http.limits].
type HTTPEntry struct {
	// Entry is the entry in its canonical form, scheme://host:port.
	Entry string `json:"entry"`
	// Headers are the names of the headers the host adds to its requests, sorted.
	Headers []string `json:"headers,omitempty"`
	// Rate (per second), Burst and Concurrency are its limits; zero for none.
	Rate        float64 `json:"rate,omitempty"`
	Burst       int     `json:"burst,omitempty"`
	Concurrency int     `json:"concurrency,omitempty"`
}

// BreakerState is one circuit breaker of a module's outbound HTTP, as /v1/modules and
// the modules page show it.
type BreakerState struct {
	// Destination is scheme://host:port.
	Destination string `json:"destination"`
	// State is "closed", "open" or "half-open".
	State string `json:"state"`
	// ConsecutiveFailures counts the failures in a row since the last success (in
	// the closed state).
	ConsecutiveFailures uint32 `json:"consecutive_failures"`
	// Until is when an open breaker lets a call through again; zero unless open.
	Until time.Time `json:"until,omitzero"`
}

// grantView returns g as it is shown; nil for no grant.
func grantView(g *outbound.Grant) *HTTPGrant {
	if g == nil {
		return nil
	}
	v := &HTTPGrant{Allow: make([]HTTPEntry, 0, len(g.Allow)), Timeout: g.Timeout.String(), MaxResponse: g.MaxResponse,
		MaxRequestBody: g.MaxRequestBody, MaxRequests: g.MaxRequests, IdempotencyHeader: g.IdempotencyHeader,
		BreakerFailures: g.BreakerFailures, BreakerCooldown: g.BreakerCooldown.String(), OutageWait: g.OutageWait.String()}
	for _, e := range g.Allow {
		he := HTTPEntry{Entry: e.String()}
		for name := range e.Header {
			he.Headers = append(he.Headers, name)
		}
		slices.Sort(he.Headers)
		if l := e.Limit; l != nil {
			he.Rate, he.Burst, he.Concurrency = l.PerSecond, l.Burst, l.Concurrency
		}
		v.Allow = append(v.Allow, he)
	}
	return v
}
