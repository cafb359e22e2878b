package outbound_test

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/pelletier/go-toml/v2"

	"github.com/wasmjobs/wasmjobs/internal/outbound"
)

// parse decodes a manifest text's [http] table and parses it, with env as the
// environment.
func parse(t *testing.T, text string, env map[string]string) (*outbound.Grant, error) {
	t.Helper()
	var doc map[string]any
	if err := toml.Unmarshal([]byte(text), &doc); err != nil {
		t.Fatalf("bad TOML in the test: %v", err)
	}
	table, _ := doc["http"].(map[string]any)
	return outbound.ParseGrant(table, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
}

func TestParseGrantDefaultsAndFields(t *testing.T) {
	t.Parallel()
	g, err := parse(t, `
[http]
allow = ["https://api.example.com", "https://*.hooks.example.com:8443", "http://127.0.0.1:9000", "http://10.0.0.0/8:8000-8999", "https://[::1]", "http://localhost:3000", "https://*"]
timeout = "10s"
max_response = "1MiB"
max_requests = 7
idempotency_header = "idempotency-key"
outage_wait = "2h"
breaker_failures = 3
breaker_cooldown = "10s"
[http.headers."https://api.example.com"]
Authorization = "Bearer ${env:KEY}"
[http.limits."https://api.example.com:443"]
rate = "20/s"
burst = 5
concurrency = 4
`, map[string]string{"KEY": "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range g.Allow {
		got = append(got, e.String())
	}
	want := "https://api.example.com:443 https://*.hooks.example.com:8443 http://127.0.0.1:9000 http://10.0.0.0/8:8000-8999 https://[::1]:443 http://localhost:3000 https://*:443"
	if strings.Join(got, " ") != want {
		t.Errorf("entries %s\nwant    %s", strings.Join(got, " "), want)
	}
	if g.Timeout != 10*time.Second || g.MaxResponse != 1<<20 || g.MaxRequests != 7 || g.IdempotencyHeader != "Idempotency-Key" || g.OutageWait != 2*time.Hour ||
		g.BreakerFailures != 3 || g.BreakerCooldown != 10*time.Second {
		t.Errorf("grant %+v", g)
	}
	api := g.Allow[0]
	if api.Header.Get("Authorization") != "Bearer s3cret" {
		t.Errorf("header %q", api.Header.Get("Authorization"))
	}
	if l := api.Limit; l == nil || l.PerSecond != 20 || l.Burst != 5 || l.Concurrency != 4 {
		t.Errorf("limit %+v", api.Limit)
	}

	d, err := parse(t, "[http]\nallow = [\"https://a.example\"]\n", nil)
	if err != nil {
		t.Fatal(err)
	}
	if d.Timeout != 30*time.Second || d.MaxResponse != 10<<20 || d.MaxRequestBody != 10<<20 || d.MaxRequests != 50 || d.OutageWait != time.Hour || d.IdempotencyHeader != "" ||
		d.BreakerFailures != 5 || d.BreakerCooldown != 30*time.Second {
		t.Errorf("defaults %+v", d)
	}
}

func TestParseGrantRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, text string
		key, err   string
	}{
		{"no allow", "[http]\ntimeout = \"1s\"", "allow", "needs allow"},
		{"bare * scheme", `[http]
allow = ["*://api.example.com"]`, "allow", "the scheme must be named"},
		{"ftp", `[http]
allow = ["ftp://api.example.com"]`, "allow", `scheme "ftp" is not http or https`},
		{"path", `[http]
allow = ["https://api.example.com/v1"]`, "allow", "no path"},
		{"path after port", `[http]
allow = ["https://api.example.com:8443/v1"]`, "allow", "no path"},
		{"query", `[http]
allow = ["https://api.example.com?x=1"]`, "allow", "no user, query or fragment"},
		{"no scheme", `[http]
allow = ["api.example.com"]`, "allow", "want \"scheme://host[:port]\""},
		{"bad port", `[http]
allow = ["https://api.example.com:99999"]`, "allow", "port"},
		{"backwards range", `[http]
allow = ["https://api.example.com:9000-8000"]`, "allow", "port"},
		{"mid wildcard", `[http]
allow = ["https://api.*.com"]`, "allow", "a wildcard is only"},
		{"an entry twice", `[http]
allow = ["https://a.example", "https://b.example", "https://A.example:443"]`, "allow", `"https://A.example:443" is https://a.example:443 again (entry 1)`},
		{"unknown key", "[http]\nallow = [\"https://a.example\"]\nretries = 3", "retries", "unknown http setting"},
		{"bad timeout", "[http]\nallow = [\"https://a.example\"]\ntimeout = \"soon\"", "timeout", "want a duration"},
		{"bad size", "[http]\nallow = [\"https://a.example\"]\nmax_response = \"lots\"", "max_response", "want a size"},
		{"bad request body size", "[http]\nallow = [\"https://a.example\"]\nmax_request_body = \"2GiB\"", "max_request_body", "want a size"},
		{"zero breaker failures", "[http]\nallow = [\"https://a.example\"]\nbreaker_failures = 0", "breaker_failures", "want 1 to 1000"},
		{"breaker failures as text", "[http]\nallow = [\"https://a.example\"]\nbreaker_failures = \"5\"", "breaker_failures", "want a whole number"},
		{"bad breaker cooldown", "[http]\nallow = [\"https://a.example\"]\nbreaker_cooldown = \"2d\"", "breaker_cooldown", "want a duration"},
		{"zero requests", "[http]\nallow = [\"https://a.example\"]\nmax_requests = 0", "max_requests", "want 1 to 10000"},
		{"too many requests", "[http]\nallow = [\"https://a.example\"]\nmax_requests = 10001", "max_requests", "want 1 to 10000"},
		{"headers of no entry", `[http]
allow = ["https://a.example"]
[http.headers."https://b.example"]
X = "1"`, "headers.https://b.example", "is not an entry of allow"},
		{"limits of no entry", `[http]
allow = ["https://a.example"]
[http.limits."https://a.example:8443"]
rate = "1/s"`, "limits.https://a.example:8443", "is not an entry of allow"},
		{"unset variable", `[http]
allow = ["https://a.example"]
[http.headers."https://a.example"]
Authorization = "Bearer ${env:NOPE}"`, "headers.https://a.example.Authorization", "environment variable NOPE is not set"},
		{"other substitution", `[http]
allow = ["https://a.example"]
[http.headers."https://a.example"]
Authorization = "${file:/etc/passwd}"`, "headers.https://a.example.Authorization", "want ${env:NAME}"},
		{"CRLF in a value", `[http]
allow = ["https://a.example"]
[http.headers."https://a.example"]
X = "a\r\nEvil: 1"`, "headers.https://a.example.X", "CR, LF or NUL"},
		{"bad header name", `[http]
allow = ["https://a.example"]
[http.headers."https://a.example"]
"X Y" = "1"`, "headers.https://a.example.X Y", "not a header name"},
		{"headers on *", `[http]
allow = ["https://*"]
[http.headers."https://*"]
Authorization = "Bearer k"`, "headers.https://*", "the guest picks the destination"},
		{"unknown limit", `[http]
allow = ["https://a.example"]
[http.limits."https://a.example"]
speed = 3`, "limits.https://a.example.speed", "unknown limit"},
		{"bad rate", `[http]
allow = ["https://a.example"]
[http.limits."https://a.example"]
rate = "fast"`, "limits.https://a.example.rate", "want a rate"},
		{"burst without rate", `[http]
allow = ["https://a.example"]
[http.limits."https://a.example"]
burst = 3`, "limits.https://a.example.burst", "burst is set without rate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parse(t, tc.text, nil)
			var fe *outbound.FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("err %v, want a FieldError", err)
			}
			if strings.Join(fe.Key, ".") != tc.key || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("key %q err %q, want key %q and %q", strings.Join(fe.Key, "."), err, tc.key, tc.err)
			}
		})
	}
}

func TestGrantMatch(t *testing.T) {
	t.Parallel()
	g, err := parse(t, `[http]
allow = ["https://api.example.com", "https://*.hooks.example.com:8443", "http://127.0.0.1:9000", "http://10.0.0.0/8:8000-8999", "http://localhost:3000"]`, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		url, entry string // entry "" means denied
	}{
		{"https://api.example.com/v1/x?y", "https://api.example.com:443"},
		{"https://API.example.com.:443/", "https://api.example.com:443"},
		{"http://api.example.com/", ""},       // scheme
		{"https://api.example.com:8443/", ""}, // port
		{"https://evil.example.com/", ""},     // host
		{"https://a.hooks.example.com:8443/", "https://*.hooks.example.com:8443"},
		{"https://a.b.hooks.example.com:8443/", "https://*.hooks.example.com:8443"},
		{"https://hooks.example.com:8443/", ""}, // subdomains only
		{"https://xhooks.example.com:8443/", ""},
		{"http://127.0.0.1:9000/", "http://127.0.0.1:9000"},
		{"http://[::ffff:127.0.0.1]:9000/", "http://127.0.0.1:9000"},
		{"http://127.0.0.2:9000/", ""},
		{"http://10.1.2.3:8500/", "http://10.0.0.0/8:8000-8999"},
		{"http://10.1.2.3:9000/", ""},
		{"http://localhost:3000/", "http://localhost:3000"},
		{"http://127.0.0.1:3000/", ""}, // localhost grants the name, not the address
		{"https://user@api.example.com/", ""},
	} {
		u, err := url.Parse(tc.url)
		if err != nil {
			t.Fatal(err)
		}
		e, err := g.Match(u)
		switch {
		case tc.entry == "" && err == nil:
			t.Errorf("%s matched %s, want denied", tc.url, e)
		case tc.entry == "" && !isKind(err, outbound.KindDenied):
			t.Errorf("%s: %v, want denied", tc.url, err)
		case tc.entry != "" && (err != nil || e.String() != tc.entry):
			t.Errorf("%s: %v %v, want %s", tc.url, e, err, tc.entry)
		}
	}
	// Of two entries of one host, the narrower port range wins, wherever it is
	// listed: its headers and limits apply to its port.
	g, _ = parse(t, `[http]
allow = ["http://127.0.0.1:1-65535", "http://127.0.0.1:9000", "http://10.0.0.0/8:1-9999", "http://10.0.0.0/8:8000"]`, nil)
	for u, want := range map[string]string{"http://127.0.0.1:9000/": "http://127.0.0.1:9000", "http://127.0.0.1:9001/": "http://127.0.0.1:1-65535",
		"http://10.1.1.1:8000/": "http://10.0.0.0/8:8000", "http://10.1.1.1:80/": "http://10.0.0.0/8:1-9999"} {
		pu, _ := url.Parse(u)
		if e, err := g.Match(pu); err != nil || e.String() != want {
			t.Errorf("%s: %v %v, want %s", u, e, err, want)
		}
	}
	// * takes any name and IP literal, but an exact entry wins (its headers apply).
	g, _ = parse(t, `[http]
allow = ["https://*", "https://api.example.com"]`, nil)
	for u, want := range map[string]string{"https://api.example.com/": "https://api.example.com:443", "https://x.example/": "https://*:443", "https://1.2.3.4/": "https://*:443"} {
		pu, _ := url.Parse(u)
		if e, err := g.Match(pu); err != nil || e.String() != want {
			t.Errorf("%s: %v %v, want %s", u, e, err, want)
		}
	}
}

func isKind(err error, k outbound.Kind) bool {
	var e *outbound.Error
	return errors.As(err, &e) && e.Kind == k
}
