package host_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/wasmjobs/wasmjobs/host"
	"github.com/wasmjobs/wasmjobs/worker"
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
		{`rate = "36/h"`, host.RateLimit{PerSecond: 0.01}, ""},
		{`rate = "1/h"`, host.RateLimit{PerSecond: 1.0 / 3600}, ""},
		{`rate = "50/d"`, host.RateLimit{}, `field rate: want a rate such as "50/s"`},
		{`rate = 50`, host.RateLimit{}, `field rate: want a rate such as "50/s" (jobs a second), "600/m" (jobs a minute) or "10/h" (jobs an hour), got 50`},
		{`rate = "1e-9/m"`, host.RateLimit{}, `field rate: rate "1e-9/m" is below the least, one job an hour ("1/h")`},
		{`rate = "0.5/h"`, host.RateLimit{}, "below the least"},
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

// recordingQueues registers queues with a worker and keeps the last registration.
type recordingQueues struct {
	*worker.Worker
	mu   sync.Mutex
	last worker.Queue
}

func (r *recordingQueues) Register(ctx context.Context, q worker.Queue) error {
	r.mu.Lock()
	r.last = q
	r.mu.Unlock()
	return r.Worker.Register(ctx, q)
}

// TestManifestRateReachesTheWorker: the manifest's rate and burst are the queue's
// registration with the worker, and a new manifest registers the new ones.
func TestManifestRateReachesTheWorker(t *testing.T) {
	t.Parallel()
	rig := newRegRig(t, host.RegistryConfig{Rescan: time.Hour}, 4)
	q := &recordingQueues{Worker: rig.w}
	// Immediate: a new manifest is a new version, which a canary would register only
	// once promoted.
	r := rig.registryWith(q)
	rig.write("svc.toml", []byte("rate = \"5/s\"\nburst = 2\n"))
	rig.write("svc.wasm", variant(t, "abi/echo", "1"))
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	check := func(want rate.Limit, burst int) {
		t.Helper()
		q.mu.Lock()
		defer q.mu.Unlock()
		if q.last.Name != "svc" || q.last.Rate != want || q.last.Burst != burst {
			t.Fatalf("registered %s with rate %v, burst %d; want rate %v, burst %d", q.last.Name, q.last.Rate, q.last.Burst, want, burst)
		}
	}
	check(5, 2)
	rig.write("svc.toml", []byte(`rate = "120/m"`))
	r.Sync(context.Background())
	check(2, 0)
}
