package host

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/internal/outbound"
)

// TestBreakerStateIsShownAsOutboundsIs: a module's breakers in /v1/modules are host's
// own BreakerState, converted from the outbound package's; a conversion ignores struct
// tags, so this pins that the JSON is byte for byte what the outbound type gives.
func TestBreakerStateIsShownAsOutboundsIs(t *testing.T) {
	for _, st := range []outbound.BreakerState{
		{Destination: "https://api.example.com:443", State: "open", ConsecutiveFailures: 5, Until: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)},
		{Destination: "http://127.0.0.1:9000", State: "closed"},
	} {
		want, err := json.Marshal(st)
		if err != nil {
			t.Fatal(err)
		}
		got, err := json.Marshal(BreakerState(st))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("host's breaker %s, want the outbound package's %s", got, want)
		}
	}
}
