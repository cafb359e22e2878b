package host_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/host"
)

func TestParseManifest(t *testing.T) {
	t.Parallel()
	text := `# a full manifest
queue = "mail"          # the queue it consumes
enqueue = ["audit", "mail.slow"]
max_attempts = 7
max_defers = 3
backoff_base = "2s"
backoff_cap = "10m"
concurrency = 4
key_concurrency = 1
wait_timeout = "48h"
isolation = "fresh"
recycle_after = 1_000
timeout = "1500ms"
memory = "32MiB"
max_payload = "256KiB"
max_output = 4096
max_log_message = "1KiB"
max_log_lines = 50
max_children = 0
max_reason = "200B"
dirs = ["/srv/templates:/templates"]

[env]
TZ = "UTC"
GREETING = "a=b # not a comment"
`
	got, err := host.ParseManifest("mail.toml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	want := host.Manifest{
		Queue: "mail", Enqueue: []string{"audit", "mail.slow"}, MaxAttempts: 7, MaxDefers: 3,
		BackoffBase: 2 * time.Second, BackoffCap: 10 * time.Minute, Concurrency: 4, KeyConcurrency: 1, WaitTimeout: 48 * time.Hour, Isolation: host.Fresh, RecycleAfter: 1000,
		Limits: host.Limits{Timeout: 1500 * time.Millisecond, MemoryPages: 512, MaxPayload: 256 << 10, MaxOutput: 4096,
			MaxLogMessage: 1024, MaxLogLines: 50, MaxChildren: 0, MaxReason: 200},
		Env:  map[string]string{"TZ": "UTC", "GREETING": "a=b # not a comment"},
		Dirs: []host.Mount{{Host: "/srv/templates", Guest: "/templates"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %+v\nwant %+v", got, want)
	}
	empty, err := host.ParseManifest("x.toml", nil)
	if err != nil || !reflect.DeepEqual(empty, host.Manifest{Limits: host.DefaultLimits()}) {
		t.Fatalf("empty manifest = %+v, %v", empty, err)
	}
	if none, err := host.ParseManifest("x.toml", []byte(`enqueue = []`)); err != nil || none.Enqueue == nil || len(none.Enqueue) != 0 {
		t.Fatalf("enqueue = [] gives %#v, %v: want an empty, non-nil list (none allowed)", none.Enqueue, err)
	}
}

// TestManifestsAreTOML: what TOML allows parses (literal strings, multi-line arrays,
// tables, inline tables, escapes) and means what TOML says.
func TestManifestsAreTOML(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, text string
		want       func(*host.Manifest)
	}{
		{"literal string", `queue = 'mail'`, func(m *host.Manifest) { m.Queue = "mail" }},
		{"literal string keeps backslashes", `dirs = ['/srv/a\b:/b']`, func(m *host.Manifest) { m.Dirs = []host.Mount{{Host: `/srv/a\b`, Guest: "/b"}} }},
		{"multi-line array with comments and a trailing comma", "enqueue = [\n  \"a\", # first\n  'b',\n]\n",
			func(m *host.Manifest) { m.Enqueue = []string{"a", "b"} }},
		{"table", "queue = \"q\"\n\n[env]\nTZ = \"UTC\"\n\"QUOTED.NAME\" = ''\n",
			func(m *host.Manifest) { m.Queue, m.Env = "q", map[string]string{"TZ": "UTC", "QUOTED.NAME": ""} }},
		{"inline table", `env = { TZ = "UTC", LANG = "C" }`, func(m *host.Manifest) { m.Env = map[string]string{"TZ": "UTC", "LANG": "C"} }},
		{"dotted key", `env.TZ = "UTC"`, func(m *host.Manifest) { m.Env = map[string]string{"TZ": "UTC"} }},
		{"escapes", `env = { A = "tab\there \u00e9 \"q\"" }`, func(m *host.Manifest) { m.Env = map[string]string{"A": "tab\there \u00e9 \"q\""} }},
		{"multi-line string", "env = { A = \"\"\"\nline1\nline2\"\"\" }", func(m *host.Manifest) { m.Env = map[string]string{"A": "line1\nline2"} }},
		{"integer forms", "max_attempts = 1_0\nmax_output = 0x10\nmax_log_lines = +7", func(m *host.Manifest) {
			m.MaxAttempts, m.Limits.MaxOutput, m.Limits.MaxLogLines = 10, 16, 7
		}},
		{"CRLF line ends", "queue = \"q\"\r\nmax_attempts = 2\r\n", func(m *host.Manifest) { m.Queue, m.MaxAttempts = "q", 2 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			want := host.Manifest{Limits: host.DefaultLimits()}
			tc.want(&want)
			got, err := host.ParseManifest("m.toml", []byte(tc.text))
			if err != nil || !reflect.DeepEqual(got, want) {
				t.Fatalf("ParseManifest(%q) =\n %+v, %v\nwant %+v", tc.text, got, err, want)
			}
		})
	}
}

func TestBadManifestsNameLineAndField(t *testing.T) {
	t.Parallel()
	// The fields as ManifestFields lists them: several helpers add fields at once.
	known := "known: " + strings.Join(host.ManifestFields(), ", ")
	for _, tc := range []struct{ name, text, want string }{
		// What TOML forbids.
		{"unknown escape \\a", `queue = "\a"`, `m.toml:1:10: invalid TOML: invalid escape character U+0061 'a'`},
		{"octal escape \\101", `queue = "\101"`, `m.toml:1:10: invalid TOML: invalid escape character U+0031 '1'`},
		{"double underscore", "max_attempts = 1__0", "m.toml:1:17: invalid TOML: number must have at least one digit between underscores"},
		{"leading zero", "max_attempts = 01", "m.toml:1:16: invalid TOML: integers cannot have leading zeroes"},
		{"bare word", "queue = mail", "m.toml:1:9: invalid TOML: unexpected character U+006D 'm' at start of value"},
		{"no value", "queue =", "m.toml:1:7: invalid TOML: expected value, not end of input"},
		{"unterminated string", "queue = \"unterminated", "m.toml:1:21: invalid TOML: unterminated basic string"},
		{"just words", "just words", "m.toml:1:6: invalid TOML: expected '=' after key"},
		{"set twice", "queue = \"a\"\nqueue = \"b\"", "m.toml:2:1: field queue: invalid TOML: key queue is already defined"},
		{"missing comma", "enqueue = [\"a\" \"b\"]", "m.toml:1:16: invalid TOML: expected ',' or ']' after array value"},
		// Keys that are not fields, with where they are.
		{"unknown field", "\ntimeuot = \"1s\"", "m.toml:2:1: field timeuot: unknown field (" + known + ")"},
		{"unknown table", "queue = \"q\"\n[limits]\ntimeout = \"1s\"", "m.toml:2:2: field limits: unknown field (" + known + ")"},
		{"several unknown", "a = 1\nb = 2", "m.toml:1:1: field a: unknown field (" + known + "); also unknown: b (line 2)"},
		// Our checks on top, with the key's position.
		{"string for a number", "\n\nmax_attempts = \"five\"", `m.toml:3:1: field max_attempts: want a whole number, got "five"`},
		{"float for a number", "max_attempts = 1.5", `m.toml:1:1: field max_attempts: want a whole number, got 1.5`},
		{"out of range", "max_attempts = 0", "m.toml:1:1: field max_attempts: want 1 to 1000000, got 0"},
		{"key_concurrency out of range", "key_concurrency = 0", "m.toml:1:1: field key_concurrency: want 1 to 100000, got 0"},
		{"wait_timeout past 30 days", `wait_timeout = "721h"`, `m.toml:1:1: field wait_timeout: want a duration from 1ms to 720h such as "30s", got "721h"`},
		{"number for a string", "timeout = 5", `m.toml:1:1: field timeout: want a duration from 1ms to 24h such as "30s", got 5`},
		{"bad duration", `timeout = "forever"`, `m.toml:1:1: field timeout: want a duration from 1ms to 24h such as "30s", got "forever"`},
		{"negative duration", `  timeout = '-1s'`, `m.toml:1:3: field timeout: want a duration from 1ms to 24h such as "30s", got '-1s'`},
		{"bad size", `memory = "lots"`, `m.toml:1:1: field memory: want a size such as "64KiB", "1MiB" or a number of bytes, got "lots"`},
		{"size too big", `memory = "8GiB"`, `m.toml:1:1: field memory: want 64KiB to 4GiB, got "8GiB"`},
		{"bad isolation", `isolation = "shared"`, `m.toml:1:1: field isolation: want "pooled" or "fresh", got "shared"`},
		{"bad queue name", `queue = "bad name"`, `m.toml:1:1: field queue: invalid queue name "bad name": want 1 to 200 letters, digits, '-', '_' or '.'`},
		{"string for a list", `enqueue = "a"`, `m.toml:1:1: field enqueue: want an array of strings such as ["a", "b"], got "a"`},
		{"number in a list", "enqueue = [\n  \"a\",\n  1,\n]", "m.toml:1:1: field enqueue: want an array of strings, got 1 in it"},
		{"env as the old list", `env = ["TZ=UTC"]`, `m.toml:1:1: field env: want a table of NAME = "value" entries, such as [env] then TZ = "UTC", got ["TZ=UTC"]`},
		{"env entry not a string", "[env]\nTZ = \"UTC\"\nPORT = 8080", "m.toml:3:1: field env.PORT: want a string, got 8080"},
		{"env name with =", "[env]\n\"A=B\" = \"c\"", `m.toml:2:1: field env.A=B: want a variable name without '=', got "A=B"`},
		{"relative dir", `dirs = ["relative:/x"]`, `m.toml:1:1: field dirs: want "/host/dir:/guest/dir" entries with absolute paths, got "relative:/x"`},
		{"cap below base", "backoff_base = \"1m\"\nbackoff_cap = \"1s\"", "m.toml:2:1: field backoff_cap: 1s is below backoff_base 1m0s"},
		{"a table for a string", "[queue]\nname = \"q\"", "m.toml:1:2: field queue: want a string, got a table"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := host.ParseManifest("m.toml", []byte(tc.text))
			var me *host.ManifestError
			if !errors.As(err, &me) || err.Error() != tc.want {
				t.Errorf("ParseManifest(%q):\n got %v\nwant %s", tc.text, err, tc.want)
			}
		})
	}
}

// TestRepositoryManifestsParse: every manifest the repository ships parses.
func TestRepositoryManifestsParse(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join("..", "examples", "*", "*.toml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no example manifests: %v", err)
	}
	files = append(files, filepath.Join("..", "internal", "tools", "scaffold", "templates", "manifest.toml.tmpl"))
	for _, f := range files {
		if filepath.Base(f) == "Cargo.toml" {
			continue
		}
		data := mustRead(t, f)
		data = bytes.ReplaceAll(data, []byte("{{.Name}}"), []byte("hello"))
		if _, err := host.ParseManifest(f, data); err != nil {
			t.Errorf("%v", err)
		}
	}
}

func TestReadManifestBesideTheModule(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	wasm := filepath.Join(dir, "resize.wasm")
	if m, err := host.ReadManifest(wasm); err != nil || m.Queue != "" || m.Limits != host.DefaultLimits() {
		t.Fatalf("without a manifest: %+v, %v", m, err)
	}
	os.WriteFile(filepath.Join(dir, "resize.toml"), []byte(`queue = "images"`), 0o644)
	if m, err := host.ReadManifest(wasm); err != nil || m.Queue != "images" {
		t.Fatalf("with a manifest: %+v, %v", m, err)
	}
	os.Mkdir(filepath.Join(dir, "dir.toml"), 0o755)
	if _, err := host.ReadManifest(filepath.Join(dir, "dir.wasm")); err == nil {
		t.Fatal("a manifest that cannot be read must fail")
	}
	if host.ManifestPath("/m/a.b.wasm") != "/m/a.b.toml" {
		t.Fatal(host.ManifestPath("/m/a.b.wasm"))
	}
}

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
