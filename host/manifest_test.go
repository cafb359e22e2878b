package host_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
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
env = ["TZ=UTC", "GREETING=a=b # not a comment"]
dirs = ["/srv/templates:/templates"]
`
	got, err := host.ParseManifest("mail.toml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	want := host.Manifest{
		Queue: "mail", Enqueue: []string{"audit", "mail.slow"}, MaxAttempts: 7, MaxDefers: 3,
		BackoffBase: 2 * time.Second, BackoffCap: 10 * time.Minute, Concurrency: 4, Isolation: host.Fresh, RecycleAfter: 1000,
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

func TestBadManifestsNameLineAndField(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ text, want string }{
		{"queue = mail", `m.toml:1: field queue: want a "quoted string", got mail`},
		{"\n\nmax_attempts = \"five\"", `m.toml:3: field max_attempts: want a whole number, got "five"`},
		{"max_attempts = 0", "m.toml:1: field max_attempts: want 1 to 1000000, got 0"},
		{"timeout = \"forever\"", `m.toml:1: field timeout: want a duration from 1ms to 24h such as "30s", got "forever"`},
		{"timeout = \"-1s\"", `m.toml:1: field timeout: want a duration from 1ms to 24h such as "30s", got "-1s"`},
		{"memory = \"lots\"", `m.toml:1: field memory: want a size such as "64KiB", "1MiB" or a number of bytes, got "lots"`},
		{"memory = \"8GiB\"", `m.toml:1: field memory: want 64KiB to 4GiB, got "8GiB"`},
		{"isolation = \"shared\"", `m.toml:1: field isolation: want "pooled" or "fresh", got "shared"`},
		{"timeuot = \"1s\"", "m.toml:1: field timeuot: unknown field (known: backoff_base, backoff_cap, concurrency, dirs, enqueue, env, isolation, max_attempts, max_children, max_defers, max_log_lines, max_log_message, max_output, max_payload, max_reason, memory, queue, recycle_after, timeout)"},
		{"queue = \"a\"\nqueue = \"b\"", "m.toml:2: field queue: set twice (first on line 1)"},
		{"[limits]", "m.toml:1: sections are not supported: every field is at the top level"},
		{"just words", "m.toml:1: want `field = value`, got \"just words\""},
		{"queue =", "m.toml:1: field queue: no value"},
		{"queue = \"bad name\"", `m.toml:1: field queue: invalid queue name "bad name": want 1 to 200 letters, digits, '-', '_' or '.'`},
		{"enqueue = \"a\"", `m.toml:1: field enqueue: want a one-line ["list", "of strings"], got "a"`},
		{"enqueue = [\"a\" \"b\"]", `m.toml:1: field enqueue: want commas between the strings of ["a" "b"]`},
		{"enqueue = [\"a\", b]", `m.toml:1: field enqueue: want a one-line ["list", "of strings"], got ["a", b]`},
		{"enqueue = [\"a]", `m.toml:1: field enqueue: unterminated string in ["a]`},
		{"env = [\"NOEQUALS\"]", `m.toml:1: field env: want "NAME=value" entries, got "NOEQUALS"`},
		{"dirs = [\"relative:/x\"]", `m.toml:1: field dirs: want "/host/dir:/guest/dir" entries with absolute paths, got "relative:/x"`},
		{"backoff_base = \"1m\"\nbackoff_cap = \"1s\"", "m.toml:2: field backoff_cap: 1s is below backoff_base 1m0s"},
		{"queue = \"unterminated", `m.toml:1: field queue: bad string "unterminated: want a "quoted string" with \" and \\ escapes`},
	} {
		_, err := host.ParseManifest("m.toml", []byte(tc.text))
		var me *host.ManifestError
		if !errors.As(err, &me) || err.Error() != tc.want {
			t.Errorf("ParseManifest(%q):\n got %v\nwant %s", tc.text, err, tc.want)
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
