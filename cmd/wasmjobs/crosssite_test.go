package main

import (
	"strings"
	"testing"
)

// TestCrossSiteRequestsReachNothing runs the real binary on loopback with no token: a
// web page's form POST and a DNS name rebound to 127.0.0.1 are refused, and the CLI's
// own requests go through.
func TestCrossSiteRequestsReachNothing(t *testing.T) {
	t.Parallel()
	h := startEchoHost(t)
	job := `{"queue": "echo", "payload": "x"}`
	for _, tc := range []struct {
		name   string
		status int
		method string
		path   string
		body   string
		header []string
	}{
		{"a cross-site text/plain POST", 403, "POST", "/v1/jobs", job, []string{"Content-Type", "text/plain", "Origin", "http://evil.example", "Sec-Fetch-Site", "cross-site"}},
		{"a cross-site form POST", 403, "POST", "/v1/jobs", "queue=echo", []string{"Content-Type", "application/x-www-form-urlencoded", "Origin", "http://evil.example"}},
		{"a rebound DNS name", 403, "GET", "/v1/queues", "", []string{"Host", "evil.example"}},
		{"a rebound DNS name posting JSON", 403, "POST", "/v1/jobs", job, []string{"Host", "evil.example:8080", "Content-Type", "application/json"}},
	} {
		if status, body := h.send(tc.method, tc.path, tc.body, tc.header...); status != tc.status {
			t.Errorf("%s: %d %s, want %d", tc.name, status, body, tc.status)
		}
	}
	r := wasmjobs(t, "", "enqueue", "echo", "x", "--server", h.url)
	if r.code != 0 || len(strings.Fields(r.stdout)) != 1 {
		t.Fatalf("enqueue through the CLI: %d %q %q", r.code, r.stdout, r.stderr)
	}
	if r := wasmjobs(t, "", "queues", "list", "--server", strings.Replace(h.url, "127.0.0.1", "localhost", 1)); r.code != 0 || !strings.Contains(r.stdout, "echo") {
		t.Fatalf("queues list through localhost: %d %q %q", r.code, r.stdout, r.stderr)
	}
}
