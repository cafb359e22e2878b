package host_test

import (
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/host"
)

// TestHTTPManifest reads the [http] grant, and refuses a bad one with the line of the
// key at fault, like every manifest error.
func TestHTTPManifest(t *testing.T) {
	t.Setenv("WASMJOBS_TEST_API_KEY", "k")
	m, err := host.ParseManifest("m.toml", []byte(`queue = "q"
[http]
allow = ["https://api.example.com", "http://127.0.0.1:9000"]
timeout = "10s"
[http.headers."https://api.example.com"]
Authorization = "Bearer ${env:WASMJOBS_TEST_API_KEY}"
`))
	if err != nil {
		t.Fatal(err)
	}
	if g := host.GrantOf(m); g == nil || len(g.Allow) != 2 || g.Timeout != 10*time.Second || g.Allow[0].Header.Get("Authorization") != "Bearer k" {
		t.Fatalf("grant %+v", g)
	}
	if g := m.HTTP(); g == nil || len(g.Allow) != 2 || g.Timeout != "10s" || g.Allow[0].Entry != "https://api.example.com:443" || g.Allow[0].Headers[0] != "Authorization" {
		t.Fatalf("the grant as shown: %+v", g)
	}
	if m, err := host.ParseManifest("m.toml", []byte(`queue = "q"`)); err != nil || host.GrantOf(m) != nil || m.HTTP() != nil {
		t.Fatalf("no [http]: grant %+v, %v; want none", host.GrantOf(m), err)
	}
	for _, tc := range []struct{ name, text, err string }{
		{"bare * scheme", "queue = \"q\"\n[http]\nallow = [\"*://x.example\"]",
			`m.toml:3:1: field http.allow: "*://x.example": the scheme must be named (http or https), not *`},
		{"unknown key", "[http]\nallow = [\"https://x.example\"]\n\nretry = 3",
			"m.toml:4:1: field http.retry: unknown http setting (known: allow, breaker_cooldown, breaker_failures, headers, idempotency_header, limits, max_request_body, max_requests, max_response, outage_wait, timeout)"},
		{"unset variable", "[http]\nallow = [\"https://x.example\"]\n[http.headers.\"https://x.example\"]\nX-Key = \"${env:WASMJOBS_TEST_UNSET}\"",
			"m.toml:4:1: field http.headers.https://x.example.X-Key: environment variable WASMJOBS_TEST_UNSET is not set (referenced as ${env:WASMJOBS_TEST_UNSET})"},
		{"headers of no entry", "[http]\nallow = [\"https://x.example\"]\n[http.headers.\"https://y.example\"]\nX = \"1\"",
			`m.toml:3:2: field http.headers.https://y.example: "https://y.example" is not an entry of allow (https://x.example:443)`},
		{"an entry twice", "queue = \"q\"\n[http]\nallow = [\"https://x.example\", \"https://x.example:443\"]",
			`m.toml:3:1: field http.allow: "https://x.example:443" is https://x.example:443 again (entry 1): list each entry once`},
		{"bad breaker failures", "queue = \"q\"\n[http]\nallow = [\"https://x.example\"]\nbreaker_failures = -1",
			"m.toml:4:1: field http.breaker_failures: want 1 to 1000, got -1"},
		{"bad breaker cooldown", "queue = \"q\"\n[http]\nallow = [\"https://x.example\"]\n\nbreaker_cooldown = \"0s\"",
			`m.toml:5:1: field http.breaker_cooldown: want a duration from 1ms to 24h such as "30s", got "0s"`},
		{"not a table", "http = \"yes\"", `m.toml:1:1: field http: want a table such as [http] then allow = ["https://api.example.com"], got "yes"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := host.ParseManifest("m.toml", []byte(tc.text)); err == nil || err.Error() != tc.err {
				t.Fatalf("err  %v\nwant %s", err, tc.err)
			}
		})
	}
}
