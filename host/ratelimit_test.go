package host_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/wasmjobs/wasmjobs/host"
)

func TestManifestRateLimit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		text    string
		want    host.RateLimit
		problem string // empty: parses
	}{
		{`rate = "50/s"`, host.RateLimit{PerSecond: 50}, ""},
		{"rate = \"50/s\"\nburst = 10", host.RateLimit{PerSecond: 50, Burst: 10}, ""},
		{`rate = "600/m"`, host.RateLimit{PerSecond: 10}, ""},
		{`rate = "0.5/s"`, host.RateLimit{PerSecond: 0.5}, ""},
		{`rate = " 30 / m "`, host.RateLimit{PerSecond: 0.5}, ""},
		{`rate = "50"`, host.RateLimit{}, `field rate: want a rate such as "50/s"`},
		{`rate = "50/h"`, host.RateLimit{}, `field rate: want a rate such as "50/s"`},
		{`rate = 50`, host.RateLimit{}, `field rate: want a rate such as "50/s" (jobs a second) or "600/m" (jobs a minute), got 50`},
		{`rate = "0/s"`, host.RateLimit{}, "field rate: want a positive number"},
		{`rate = "-3/s"`, host.RateLimit{}, "field rate: want a positive number"},
		{`rate = "NaN/s"`, host.RateLimit{}, "field rate: want a positive number"},
		{`rate = "Inf/s"`, host.RateLimit{}, "field rate: want a positive number"},
		{`rate = "2000000/s"`, host.RateLimit{}, "up to 1000000 a second"},
		{`rate = "many/s"`, host.RateLimit{}, "field rate: want a positive number"},
		{"rate = \"5/s\"\nburst = 0", host.RateLimit{}, "field burst: want 1 to 1000000, got 0"},
		{"rate = \"5/s\"\nburst = \"3\"", host.RateLimit{}, "field burst: want a whole number"},
		{"burst = 3", host.RateLimit{}, "x.toml:1:1: field burst: burst is set without rate"},
	} {
		m, err := host.ParseManifest("x.toml", []byte(tc.text))
		if tc.problem == "" {
			if err != nil || m.RateLimit != tc.want {
				t.Errorf("%q: got %+v, %v; want %+v", tc.text, m.RateLimit, err, tc.want)
			}
			continue
		}
		var me *host.ManifestError
		if !errors.As(err, &me) || !strings.Contains(err.Error(), tc.problem) {
			t.Errorf("%q: error %v, want a ManifestError containing %q", tc.text, err, tc.problem)
		}
	}
}
