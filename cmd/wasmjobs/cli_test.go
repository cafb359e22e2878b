package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/wasmjobs/wasmjobs/internal/rigs/abitest"
	"github.com/wasmjobs/wasmjobs/internal/tools/bench"
)

func TestInvokeBadUsage(t *testing.T) {
	t.Parallel()
	echo := filepath.Join(abitest.Dir(), "abi", "echo.wasm")
	dir := t.TempDir()
	badManifest := filepath.Join(dir, "echo.wasm")
	wasm, _ := os.ReadFile(echo)
	os.WriteFile(badManifest, wasm, 0o644)
	writeManifest(t, dir, "echo", "# ok\nqueue = \"mail\"\ntimeout = \"soon\"\n")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no module", []string{"invoke"}, "want invoke MODULE [-], got 0 arguments"},
		{"two payloads", []string{"invoke", echo, "--payload", "a", "--payload-file", echo}, "give the payload one way"},
		{"payload flag and stdin", []string{"invoke", echo, "--payload", "a", "-"}, "give the payload one way"},
		{"stray argument", []string{"invoke", echo, "extra"}, `unexpected argument "extra"`},
		{"missing payload file", []string{"invoke", echo, "--payload-file", "/nope/x.json"}, "--payload-file: open /nope/x.json: no such file or directory"},
		{"bad header", []string{"invoke", echo, "--header", "novalue"}, `--header "novalue": want key=value`},
		{"attempt zero", []string{"invoke", echo, "--attempt", "0"}, "--attempt must be 1 or more"},
		{"unknown flag", []string{"invoke", echo, "--bogus"}, "unknown flag: --bogus"},
		{"bad flag value", []string{"invoke", echo, "--attempt", "two"}, `invalid argument "two" for "--attempt"`},
		{"missing module", []string{"invoke", "/nope/m.wasm"}, "open /nope/m.wasm: no such file or directory"},
		{"bad manifest", []string{"invoke", badManifest}, `echo.toml:3:1: field timeout: want a duration from 1ms to 24h such as "30s", got "soon"`},
		{"validate without paths", []string{"modules", "validate"}, "want validate PATH..., got 0 arguments"},
		{"data-dir on memory", []string{"run", "--modules", dir, "--backend", "memory", "--data-dir", dir}, "--data-dir is for --backend pebble"},
		{"records on amqp", []string{"run", "--modules", dir, "--backend", "amqp://u:secret@127.0.0.1:1/", "--records-max", "5"}, "--records-max is for --backend pebble or a postgres:// URL; --backend amqp://u:xxxxx@127.0.0.1:1/ keeps no job records"},
		{"backup-dir on memory", []string{"run", "--modules", dir, "--backend", "memory", "--backup-dir", dir}, "--backup-dir is for --backend pebble"},
		{"backup-dir in data-dir", []string{"run", "--modules", dir, "--data-dir", dir, "--backup-dir", filepath.Join(dir, "b")}, "is inside --data-dir"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := wasmjobs(t, "", tc.args...)
			lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
			if r.code != 2 || r.stdout != "" || len(lines) != 1 || !strings.Contains(lines[0], tc.want) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit 2 and one line containing %q", r.code, r.stdout, r.stderr, tc.want)
			}
		})
	}
}

func TestInvokeReadsStdinAndPrintsForPeople(t *testing.T) {
	t.Parallel()
	echo := filepath.Join(abitest.Dir(), "abi", "echo.wasm")
	r := wasmjobs(t, "from stdin\n", "invoke", echo, "-")
	for _, want := range []string{"module    echo (version 0a8f75abd433)", "on queue echo, attempt 1 of 25", "result    ack (code 0)", "settle    ack", "output    (11 bytes)\n  from stdin\n"} {
		if !strings.Contains(r.stdout, want) || r.code != 0 {
			t.Errorf("exit %d, output lacks %q:\n%s", r.code, want, r.stdout)
		}
	}
	retry := filepath.Join(abitest.Dir(), "abi", "retry.wasm")
	r = wasmjobs(t, "", "invoke", retry, "--attempt", "3", "--max-attempts", "3")
	for _, want := range []string{"result    retry (code 1)", "settle    dead_letter", "reason    max attempts (3) exceeded: try later", "delay     1.5s"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, r.stdout)
		}
	}
	enq := filepath.Join(abitest.Dir(), "abi", "enqueue.wasm")
	r = wasmjobs(t, "", "invoke", enq)
	for _, want := range []string{"enqueued  (100 jobs)", "  child after 250ms: payload-2", "  ... and 80 more"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, r.stdout)
		}
	}
}

func TestModulesValidate(t *testing.T) {
	t.Parallel()
	good := filepath.Join(abitest.Dir(), "abi", "ack.wasm")
	bad := filepath.Join(abitest.Dir(), "hostile", "wrong_handle.wasm")
	notWasm := filepath.Join(abitest.Dir(), "hostile", "not_wasm.wasm")
	r := wasmjobs(t, "", "modules", "validate", good, bad, notWasm)
	want := good + ": OK version c3db20f759180f9dc9fcc98d3ccb027e5b6237b63b26578b22d8c3eaf86175bf queue ack\n" +
		bad + `: invalid module wrong_handle: export "wasmjobs_handle" has type (i32) -> (i32), want () -> (i32)` + "\n" +
		notWasm + ": invalid module not_wasm: not a wasm module (no \\0asm header)\n"
	if r.code != 1 || r.stdout != want || r.stderr != "" {
		t.Fatalf("exit %d\nstdout:\n%s\nwant:\n%s\nstderr: %s", r.code, r.stdout, want, r.stderr)
	}
	if r := wasmjobs(t, "", "modules", "validate", good); r.code != 0 {
		t.Fatalf("valid module: exit %d", r.code)
	}
}

func TestRunAndClientBadUsage(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	os.WriteFile(file, nil, 0o644)
	big := filepath.Join(dir, "big")
	os.WriteFile(big, make([]byte, 1<<20+1), 0o644)
	lines := filepath.Join(dir, "lines")
	os.WriteFile(lines, []byte("a\nb\n"), 0o644)
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"run without modules", nil, []string{"run"}, "--modules is required"},
		{"run on a file", nil, []string{"run", "--modules", file}, "--modules " + file + ": not a directory"},
		{"run with zero concurrency", nil, []string{"run", "--modules", dir, "--concurrency", "0"}, "--concurrency 0: want 1 or more"},
		{"run beyond loopback without token", nil, []string{"run", "--modules", dir, "--listen", "0.0.0.0:0"}, "--listen 0.0.0.0:0 is beyond loopback: set --token"},
		{"run beyond loopback over plain HTTP", nil, []string{"run", "--modules", dir, "--listen", "0.0.0.0:0", "--token", "t"}, "--listen 0.0.0.0:0 is beyond loopback: give --tls-cert and --tls-key so that the token does not cross the network in clear, or --insecure-http"},
		{"run with a certificate and no key", nil, []string{"run", "--modules", dir, "--tls-cert", file}, "--tls-cert and --tls-key go together"},
		{"run with an HTTP CA file without a certificate", nil, []string{"run", "--modules", dir, "--http-ca", file}, "--http-ca " + file + ": no PEM certificate in it"},
		{"run with a missing HTTP CA file", nil, []string{"run", "--modules", dir, "--http-ca", "/nope/ca.pem"}, "--http-ca: open /nope/ca.pem: no such file or directory"},
		{"run with a bad log format", nil, []string{"run", "--modules", dir, "--listen", "127.0.0.1:0", "--log-format", "xml"}, `--log-format "xml": want text or json`},
		{"run with a bad log level", nil, []string{"run", "--modules", dir, "--listen", "127.0.0.1:0", "--log-level", "loud"}, `--log-level "loud": want debug, info, warn or error`},
		{"run with a bad backend", nil, []string{"run", "--modules", dir, "--listen", "127.0.0.1:0", "--backend", "redis://x"}, `--backend "redis://x": want pebble, memory, an amqp:// URL or a postgres:// URL`},
		{"run with a bad queue type", nil, []string{"run", "--modules", dir, "--backend", "amqp://127.0.0.1:9/", "--queue-type", "stream"}, `--queue-type: queue type "stream": want classic or quorum`},
		{"run with a queue type off RabbitMQ", nil, []string{"run", "--modules", dir, "--backend", "memory", "--queue-type", "quorum"}, `--queue-type is for a RabbitMQ --backend (amqp://...), not "memory"`},
		{"run with a schema off PostgreSQL", nil, []string{"run", "--modules", dir, "--backend", "memory", "--pg-schema", "jobs"}, `--pg-schema is for a PostgreSQL --backend (postgres://...), not "memory"`},
		{"run with a lease off PostgreSQL", nil, []string{"run", "--modules", dir, "--pg-lease", "5s"}, `--pg-lease is for a PostgreSQL --backend (postgres://...), not "pebble"`},
		{"run with a bad PostgreSQL schema", nil, []string{"run", "--modules", dir, "--listen", "127.0.0.1:0", "--backend", "postgres://u:secret@127.0.0.1:9/db", "--pg-schema", "Jobs"}, `--pg-schema: postgres: schema "Jobs": want a lowercase identifier`},
		{"enqueue with a queue type through the API", nil, []string{"enqueue", "q", "x", "--queue-type", "quorum"}, `--queue-type is for a RabbitMQ --backend (amqp://...), not ""`},
		{"run with a bad environment variable", []string{"WASMJOBS_CONCURRENCY=many"}, []string{"run", "--modules", dir}, `WASMJOBS_CONCURRENCY="many"`},
		{"run with negative records", nil, []string{"run", "--modules", dir, "--records-max", "-1"}, "--records-max -1, --records-max-age 168h0m0s: want 0 or more"},
		{"bench with a data dir off pebble", nil, []string{"bench", "--native", "--data-dir", dir}, "--data-dir is for --backend pebble"},
		{"run with a bad drain timeout", nil, []string{"run", "--modules", dir, "--drain-timeout", "0s"}, "--drain-timeout 0s: want a positive duration"},
		{"enqueue without a queue", nil, []string{"enqueue"}, "want enqueue QUEUE [PAYLOAD | --file F | -], got 0 arguments"},
		{"enqueue with two payloads", nil, []string{"enqueue", "q", "x", "--file", file}, "give the payload one way"},
		{"enqueue from a missing file", nil, []string{"enqueue", "q", "--file", "/nope/job.json"}, "--file: open /nope/job.json: no such file or directory"},
		{"enqueue zero times", nil, []string{"enqueue", "q", "x", "--count", "0"}, "--count 0: want 1 or more"},
		{"enqueue a bad header", nil, []string{"enqueue", "q", "x", "--header", "k"}, `--header "k": want key=value`},
		{"enqueue with a bad server", nil, []string{"enqueue", "q", "x", "--server", "ftp://x"}, `--server "ftp://x": want a URL such as http://127.0.0.1:8080`},
		{"enqueue unique_for without a key", nil, []string{"enqueue", "q", "x", "--unique-for", "1h"}, "--unique-for 1h0m0s without --unique-key"},
		{"enqueue --backend with a unique key", nil, []string{"enqueue", "q", "x", "--backend", "amqp://127.0.0.1:9/", "--unique-key", "k"}, "RabbitMQ cannot keep unique keys"},
		{"enqueue lines of nothing", nil, []string{"enqueue", "q", "--lines", "--file", file}, "--lines: the input has no lines"},
		// Straight to a broker the jobs are checked as the API checks them, before any
		// connection (nothing listens on port 9).
		{"enqueue --backend with a reserved header", nil, []string{"enqueue", "q", "x", "--backend", "amqp://127.0.0.1:9/", "--header", "wasmjobs-priority=2"}, `headers: "wasmjobs-priority": the prefix wasmjobs- is reserved`},
		{"enqueue --backend in the deferred lane", nil, []string{"enqueue", "q", "x", "--backend", "amqp://127.0.0.1:9/", "--priority", "2"}, "priority 2: want 0 to 1"},
		{"enqueue --backend over the payload limit", nil, []string{"enqueue", "q", "--file", big, "--backend", "amqp://127.0.0.1:9/"}, "payload of 1048577 bytes passes queue q's limit of 1048576 bytes"},
		{"enqueue --backend to a bad queue name", nil, []string{"enqueue", "q/x", "x", "--backend", "amqp://127.0.0.1:9/"}, `invalid queue name "q/x"`},
		{"enqueue --backend to a dead-letter queue", nil, []string{"enqueue", "q.dead", "x", "--backend", "amqp://127.0.0.1:9/"}, "the suffix .dead is reserved"},
		{"enqueue --backend a bad line", nil, []string{"enqueue", "q", "--lines", "--file", lines, "--backend", "amqp://127.0.0.1:9/", "--max-attempts", "-1"}, "line 1: max_attempts -1: want 0 (the queue's) or more"},
		{"dlq replay without ids", nil, []string{"dlq", "replay", "q"}, "want replay QUEUE ID..., got 1 arguments"},
		{"jobs get without id", nil, []string{"jobs", "get"}, "want get ID, got 0 arguments"},
		{"bench without a handler", nil, []string{"bench"}, "give either --module M.wasm or --native"},
		{"bench with two handlers", nil, []string{"bench", "--native", "--module", "x.wasm"}, "give either --module M.wasm or --native"},
		{"bench with a bad isolation", nil, []string{"bench", "--native", "--isolation", "shared"}, `--isolation "shared": want pooled or fresh`},
		{"bench raw amqp on memory", nil, []string{"bench", "--native", "--compare-raw-amqp"}, "--compare-raw-amqp needs --backend amqp://..."},
		{"bench on a bad backend", nil, []string{"bench", "--native", "--backend", "redis://x"}, `--backend "redis://x": want memory, pebble, an amqp:// URL or a postgres:// URL`},
		{"bench swaps with jobs", nil, []string{"bench", "--module", "x.wasm", "--swaps", "5", "--jobs", "9"}, "--swaps takes only --module and --json, not --jobs"},
		{"bench rounds without a baseline", nil, []string{"bench", "--native", "--rounds", "3"}, "--rounds: want 1 or more, and more than 1 only with --compare-native, --compare-raw-amqp or --compare-untraced"},
		{"bench untraced baseline without tracing", nil, []string{"bench", "--native", "--compare-untraced"}, "--compare-untraced goes with --trace"},
		{"bench no rounds", nil, []string{"bench", "--native", "--compare-native", "--rounds", "0"}, "--rounds: want 1 or more"},
		{"bench no swaps", nil, []string{"bench", "--module", "x.wasm", "--swaps", "0"}, "--swaps 0: want a positive number of swaps"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := wasmjobsEnv(t, tc.env, "", tc.args...)
			lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
			if r.code != 2 || r.stdout != "" || len(lines) != 1 || !strings.Contains(lines[0], tc.want) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit 2 and one line containing %q", r.code, r.stdout, r.stderr, tc.want)
			}
		})
	}
}

func TestClientErrorsFromTheServer(t *testing.T) {
	t.Parallel()
	// Nothing listens here: the commands say so.
	for _, args := range [][]string{
		{"enqueue", "q", "x"}, {"queues", "list"}, {"modules", "list"}, {"jobs", "get", "01X"}, {"dlq", "list", "q"}, {"dlq", "purge", "q"},
	} {
		r := wasmjobs(t, "", append(args, "--server", "http://127.0.0.1:9")...)
		if r.code != 1 || !strings.Contains(r.stderr, "cannot reach wasmjobs at http://127.0.0.1:9 (is `wasmjobs run` running? see --server)") {
			t.Errorf("%v: exit %d, stderr %q", args, r.code, r.stderr)
		}
	}
	h := startEchoHost(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"enqueue", "nope", "x"}, `server answered 404: unknown queue "nope": no module serves it (served: echo)`},
		{[]string{"enqueue", "echo", "x", "--priority", "5"}, "server answered 400: priority 5: want 0 to 1"},
		{[]string{"jobs", "get", "01NOPE"}, `server answered 404: job "01NOPE" is not in the backend's job records`},
		{[]string{"dlq", "list", "nope"}, `server answered 404: unknown queue "nope"`},
		{[]string{"dlq", "replay", "echo", "01NOPE"}, `server answered 404: no dead letter "01NOPE" in queues echo`},
	} {
		r := wasmjobs(t, "", append(tc.args, "--server", h.url)...)
		if r.code != 1 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q, want %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
	// The happy paths of the listing commands.
	r := wasmjobs(t, "one\ntwo\n\nthree\n", "enqueue", "echo", "-", "--lines", "--server", h.url)
	if r.code != 0 || len(strings.Fields(r.stdout)) != 3 {
		t.Fatalf("--lines: %d %q %q", r.code, r.stdout, r.stderr)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"queues", "list"}, "QUEUE  MODULE  PENDING  RUNNING  DELAYED  DEFERRED  DEAD  ERROR\necho   echo"},
		{[]string{"modules", "list"}, "MODULE  STATUS   VERSION"},
		{[]string{"modules", "list", "--json"}, `"status": "serving"`},
		{[]string{"dlq", "list", "echo"}, "ID  ATTEMPT  DIED  REASON"},
		{[]string{"dlq", "purge", "echo"}, "purged 0 dead letters of echo"},
		{[]string{"version"}, "wasmjobs "},
	} {
		r := wasmjobs(t, "", append(tc.args, "--server", h.url)...)
		if tc.args[0] == "version" {
			r = wasmjobs(t, "", "version")
		}
		if r.code != 0 || !strings.Contains(r.stdout, tc.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q, want %q", tc.args, r.code, r.stdout, r.stderr, tc.want)
		}
	}
}

func TestBenchSwapsReportsItsParts(t *testing.T) {
	t.Parallel()
	ack := filepath.Join(abitest.Dir(), "abi", "ack.wasm")
	r := wasmjobs(t, "", "bench", "--module", ack, "--swaps", "3", "--json")
	for _, field := range []string{`"swaps":3`, `"part":"watcher event"`, `"part":"debounce"`, `"part":"load"`, `"part":"first job"`, `"part":"rename to first job"`, `"p99_ms":`, `"max_ms":`} {
		if r.code != 0 || !strings.Contains(r.stdout, field) {
			t.Fatalf("exit %d, stdout %q lacks %s (stderr %q)", r.code, r.stdout, field, r.stderr)
		}
	}
}

// TestBenchRounds: --rounds runs the pair that many times, the baseline first in every
// other round, and reports every round and the round of the median ratio.
func TestBenchRounds(t *testing.T) {
	t.Parallel()
	ack := filepath.Join(abitest.Dir(), "abi", "ack.wasm")
	r := wasmjobs(t, "", "bench", "--module", ack, "--jobs", "500", "--compare-native", "--rounds", "3", "--json")
	if r.code != 0 {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	var res bench.Result
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
		t.Fatalf("%v in %q", err, r.stdout)
	}
	if len(res.Rounds) != 3 || res.Ratio == nil {
		t.Fatalf("rounds %+v, ratio %v; want 3 rounds and a ratio", res.Rounds, res.Ratio)
	}
	var ratios []float64
	for i, rd := range res.Rounds {
		if rd.BaselineFirst != (i%2 == 1) {
			t.Errorf("round %d: baseline first %v, want %v", i+1, rd.BaselineFirst, i%2 == 1)
		}
		if want := rd.JobsPerSec / rd.BaselineJobsPerSec; math.Abs(rd.Ratio-want) > 1e-9 {
			t.Errorf("round %d: ratio %v, want %v", i+1, rd.Ratio, want)
		}
		ratios = append(ratios, rd.Ratio)
	}
	slices.Sort(ratios)
	if *res.Ratio != ratios[1] || math.Abs(res.JobsPerSec/res.Baseline.JobsPerSec-ratios[1]) > 1e-9 {
		t.Fatalf("ratio %v (%v / %v), want the median round's %v of %v", *res.Ratio, res.JobsPerSec, res.Baseline.JobsPerSec, ratios[1], ratios)
	}
}

func TestBenchReportsJSON(t *testing.T) {
	t.Parallel()
	ack := filepath.Join(abitest.Dir(), "abi", "ack.wasm")
	r := wasmjobs(t, "", "bench", "--module", ack, "--jobs", "2000", "--compare-native", "--json")
	for _, field := range []string{`"jobs":2000`, `"jobs_per_sec":`, `"p50_ms":`, `"p90_ms":`, `"p99_ms":`, `"cpu_s_per_1k":`, `"peak_rss_mb":`, `"baseline":{"kind":"native","jobs_per_sec":`, `"ratio":`} {
		if r.code != 0 || !strings.Contains(r.stdout, field) {
			t.Fatalf("exit %d, stdout %q lacks %s (stderr %q)", r.code, r.stdout, field, r.stderr)
		}
	}
}
