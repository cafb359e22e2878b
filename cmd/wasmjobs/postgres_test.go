package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/wasmjobs/wasmjobs/backend/postgres"
	"github.com/wasmjobs/wasmjobs/internal/rigs/testbroker"
)

// witness is a loopback server that the jobs' guests call (abi/http_get, GET
// ?job=N[&ms=D]): a call lasts the job's 20 ms (or D), and the witness counts the calls of each job
// and every moment two calls of one job were open at once. A call from a host that
// died is closed with its process (its connection ends), so two open calls are two
// live runs.
type witness struct {
	mu       sync.Mutex
	open     map[int]int
	calls    map[int]int
	overlaps int
}

func (w *witness) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	n, err := strconv.Atoi(r.URL.Query().Get("job"))
	if err != nil {
		http.Error(rw, "no job", http.StatusBadRequest)
		return
	}
	w.mu.Lock()
	w.open[n]++
	if w.open[n] > 1 {
		w.overlaps++
	}
	w.mu.Unlock()
	d := 20 * time.Millisecond
	if ms, err := strconv.Atoi(r.URL.Query().Get("ms")); err == nil {
		d = time.Duration(ms) * time.Millisecond
	}
	select {
	case <-time.After(d):
	case <-r.Context().Done():
	}
	w.mu.Lock()
	w.open[n]--
	if r.Context().Err() == nil {
		w.calls[n]++
	}
	w.mu.Unlock()
}

// inFlight counts the calls open now.
func (w *witness) inFlight() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, o := range w.open {
		n += o
	}
	return n
}

// twice counts the jobs whose call completed more than once.
func (w *witness) twice() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, c := range w.calls {
		if c > 1 {
			n++
		}
	}
	return n
}

// done counts the jobs whose call completed at least once.
func (w *witness) done() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.calls)
}

// TestPostgresTwoHostsOneKilled runs two real hosts on one PostgreSQL database, 20,000
// jobs of 20 ms each (a call to a witness), and kills one host with SIGKILL a third of
// the way: every job enqueued succeeds, the dead host's claims are rescued within the
// lease and 5 s, and no job ever runs on two live hosts at once.
func TestPostgresTwoHostsOneKilled(t *testing.T) {
	t.Parallel()
	url := testbroker.PostgresURL(t)
	schema := "wasmjobs_twohosts_" + uniqueSuffix()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+schema+` CASCADE`)
		conn.Close(context.Background())
	})
	count := func(where string) int {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM `+schema+`.jobs WHERE `+where).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	w := &witness{open: make(map[int]int), calls: make(map[int]int)}
	srv := httptest.NewServer(w)
	t.Cleanup(srv.Close)
	const jobs, lease = 20_000, 5 * time.Second
	hosts := make([]*hostProc, 2)
	for i, id := range []string{"a", "b"} {
		dir := t.TempDir()
		writeManifest(t, dir, "witnessed", fmt.Sprintf("[http]\nallow = [%q]\n", srv.URL))
		installModule(t, dir, "abi/http_get", "witnessed", "v1")
		hosts[i] = startHost(t, dir, "--backend", url, "--pg-schema", schema, "--pg-lease", lease.String(),
			"--host-id", id, "--concurrency", "16", "--log-level", "info")
	}
	var lines strings.Builder
	for n := range jobs {
		fmt.Fprintf(&lines, "%s/?job=%d\n", srv.URL, n)
	}
	if r := wasmjobs(t, lines.String(), "enqueue", "witnessed", "-", "--lines", "-q", "--server", hosts[0].url); r.code != 0 {
		t.Fatalf("enqueue: %d %s", r.code, r.stderr)
	}

	waitForLong(t, "a third of the jobs", 2*time.Minute, func() bool { return w.done() >= jobs/3 })
	hosts[0].cmd.Process.Signal(syscall.SIGKILL)
	<-hosts[0].done
	killed := time.Now()
	held := count("state = 1 AND claimed_by = 'a'")
	waitForLong(t, "the dead host's claims rescued", lease+5*time.Second, func() bool { return count("claimed_by = 'a'") == 0 })
	rescued := time.Since(killed)
	waitForLong(t, "every job done", 3*time.Minute, func() bool { return w.done() == jobs && count("state <> 3") == 0 })
	if n := count("state = 3 AND status = 'succeeded'"); n != jobs {
		t.Fatalf("%d jobs recorded succeeded, want %d", n, jobs)
	}
	var dead int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM `+schema+`.dead`).Scan(&dead); err != nil {
		t.Fatal(err)
	}
	twice := w.twice()
	w.mu.Lock()
	defer w.mu.Unlock()
	t.Logf("killed a with %d claims held after %d of %d jobs; rescued %v after the kill; %d jobs called twice (at most the claims held)", held, jobs/3, jobs, rescued.Round(time.Millisecond), twice)
	if dead != 0 || w.overlaps != 0 || twice > held {
		t.Fatalf("%d dead letters, %d moments a job ran on two live hosts at once, %d jobs called twice (the dead host held %d); want none, none, at most those held", dead, w.overlaps, twice, held)
	}
}

// TestPostgresUniqueAcrossTwoHosts: two real hosts on one database take 1,000
// enqueues of one unique key at once, half each: one job is queued and runs, and every
// other enqueue answers a duplicate naming it, on either host, within its unique_for
// and after its job succeeded.
func TestPostgresUniqueAcrossTwoHosts(t *testing.T) {
	t.Parallel()
	url, schema := pgSchema(t, "unique")
	hosts := make([]*hostProc, 2)
	for i, id := range []string{"a", "b"} {
		hosts[i] = startEchoHost(t, "--backend", url, "--pg-schema", schema, "--host-id", id, "--log-level", "info")
	}
	const n = 1000
	body := `{"queue":"echo","payload":"once","unique_key":"one","unique_for":"1h"}`
	type answer struct {
		code      int
		id        string
		duplicate bool
		err       error
	}
	answers := make([]answer, n)
	client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			resp, err := client.Post(hosts[i%2].url+"/v1/jobs", "application/json", strings.NewReader(body))
			if err != nil {
				answers[i].err = err
				return
			}
			defer resp.Body.Close()
			var r struct {
				ID        string
				Duplicate bool
			}
			answers[i].code, answers[i].err = resp.StatusCode, json.NewDecoder(resp.Body).Decode(&r)
			answers[i].id, answers[i].duplicate = r.ID, r.Duplicate
		})
	}
	close(start)
	wg.Wait()
	var queued []string
	for i, a := range answers {
		switch {
		case a.err != nil:
			t.Fatalf("enqueue %d: %v", i, a.err)
		case a.code == http.StatusAccepted && !a.duplicate:
			queued = append(queued, a.id)
		case a.code != http.StatusOK || !a.duplicate:
			t.Fatalf("enqueue %d: %d %+v, want 202 or a 200 duplicate", i, a.code, a)
		}
	}
	if len(queued) != 1 {
		t.Fatalf("%d jobs queued of one unique key from two hosts, want 1", len(queued))
	}
	for i, a := range answers {
		if a.id != queued[0] {
			t.Fatalf("enqueue %d names %s, not the queued %s", i, a.id, queued[0])
		}
	}
	waitForLong(t, "the unique job succeeded", time.Minute, func() bool { return hosts[1].job(queued[0]).State == "succeeded" })
	for _, h := range hosts {
		code, out := h.post("/v1/jobs", body)
		if code != http.StatusOK || !strings.Contains(out, queued[0]) {
			t.Fatalf("an enqueue after the job succeeded, within unique_for: %d %s, want a duplicate of %s", code, out, queued[0])
		}
	}
	// Either host's metrics read the one store.
	for _, h := range hosts {
		m := h.metrics()
		for _, want := range []string{"wasmjobs_store_unique_keys 1\n", "wasmjobs_store_job_records 1\n", `wasmjobs_store_bytes{table="jobs"}`} {
			if !strings.Contains(m, want) {
				t.Fatalf("metrics without %q:\n%s", want, m)
			}
		}
	}
}

// pgSchema returns the tests' database and a schema name of the test's own, prefix in
// it, which is dropped when the test ends.
func pgSchema(t *testing.T, prefix string) (url, schema string) {
	t.Helper()
	url = testbroker.PostgresURL(t)
	schema = "wasmjobs_" + prefix + "_" + uniqueSuffix()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if conn, err := pgx.Connect(ctx, url); err == nil {
			conn.Exec(ctx, `DROP SCHEMA IF EXISTS `+schema+` CASCADE`)
			conn.Close(ctx)
		}
	})
	return url, schema
}

// pgScriptPath is the path of scripts/postgres.sh.
func pgScriptPath() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "scripts", "postgres.sh")
}

// pgCluster runs scripts/postgres.sh with args on the test's own cluster and returns
// its output.
func pgCluster(t *testing.T, cluster string, args ...string) string {
	t.Helper()
	cmd := exec.Command(pgScriptPath(), args...)
	cmd.Env = append(os.Environ(), "WASMJOBS_PG_CLUSTER="+cluster)
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("postgres.sh %s (cluster %s): %v\n%s%s", strings.Join(args, " "), cluster, err, out, stderr)
	}
	return strings.TrimSpace(string(out))
}

// TestPostgresStoppedForTwentySeconds runs two real hosts on a PostgreSQL cluster of
// the test's own (scripts/postgres.sh, so that no other test loses its database) and
// stops the cluster for 20 s a third of the way through 3,000 jobs of 20 ms (a call to
// the witness; every tenth 3 s, so that jobs are running when the database goes): one
// host under a 60 s lease (the outage is shorter), one under a 5 s
// lease (the outage is longer, so it gives its claims up). A third host is drained by
// SIGTERM during the outage and exits within its drain timeout and the 2 s after it.
// Once the cluster is back, both hosts reconnect by themselves, every job succeeds,
// none is dead-lettered, and no job ever runs on two live hosts at once.
func TestPostgresStoppedForTwentySeconds(t *testing.T) {
	t.Parallel()
	testbroker.PostgresURL(t) // PostgreSQL is installed, or the test skips (fails under CI)
	if os.Geteuid() != 0 && os.Getenv("CI") != "true" {
		t.Skip("makes a PostgreSQL cluster of its own: runs as root (as CI does)")
	}
	cluster := "wasmjobs_outage_" + uniqueSuffix()
	t.Cleanup(func() { pgCluster(t, cluster, "drop") }) // before the start: a start that fails part-way leaves nothing
	url := pgCluster(t, cluster, "start")
	ctx := context.Background()
	count := func(where string) int {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		conn, err := pgx.Connect(cctx, url)
		if err != nil {
			return -1
		}
		defer conn.Close(ctx)
		var n int
		if err := conn.QueryRow(cctx, `SELECT count(*) FROM wasmjobs.`+where).Scan(&n); err != nil {
			return -1
		}
		return n
	}

	w := &witness{open: make(map[int]int), calls: make(map[int]int)}
	srv := httptest.NewServer(w)
	t.Cleanup(srv.Close)
	const jobs = 3000
	start := func(lease string, flags ...string) *hostProc {
		dir := t.TempDir()
		writeManifest(t, dir, "witnessed", fmt.Sprintf("[http]\nallow = [%q]\n", srv.URL))
		installModule(t, dir, "abi/http_get", "witnessed", "v1")
		return startHost(t, dir, append([]string{"--backend", url, "--pg-lease", lease, "--concurrency", "16", "--log-level", "info"}, flags...)...)
	}
	long, short := start("60s", "--host-id", "long"), start("5s", "--host-id", "short")
	drained := start("60s", "--host-id", "drained", "--drain-timeout", "3s")
	var lines strings.Builder
	for n := range jobs {
		if n%10 == 0 {
			fmt.Fprintf(&lines, "%s/?job=%d&ms=3000\n", srv.URL, n)
		} else {
			fmt.Fprintf(&lines, "%s/?job=%d\n", srv.URL, n)
		}
	}
	if r := wasmjobs(t, lines.String(), "enqueue", "witnessed", "-", "--lines", "-q", "--server", long.url); r.code != 0 {
		t.Fatalf("enqueue: %d %s", r.code, r.stderr)
	}
	waitForLong(t, "a third of the jobs", 2*time.Minute, func() bool { return w.done() >= jobs/3 })
	pgCluster(t, cluster, "stop")
	stopped := time.Now()
	running := w.inFlight()
	drained.cmd.Process.Signal(syscall.SIGTERM)
	if err := drained.exited(3*time.Second + 2*time.Second + 2*time.Second); err != nil {
		t.Fatalf("the host drained during the outage exited with %v, want a clean exit", err)
	}
	t.Logf("the host drained during the outage exited %v after its SIGTERM; %d jobs were running when the database stopped", time.Since(stopped).Round(time.Millisecond), running)
	if running == 0 {
		t.Fatal("no job was running when the database stopped: the outage tested nothing")
	}
	time.Sleep(20*time.Second - time.Since(stopped))
	pgCluster(t, cluster, "start")
	waitForLong(t, "every job done", 3*time.Minute, func() bool {
		return w.done() == jobs && count(`jobs WHERE state <> 3`) == 0
	})
	if n := count(`jobs WHERE state = 3 AND status = 'succeeded'`); n != jobs {
		t.Fatalf("%d jobs recorded succeeded, want %d", n, jobs)
	}
	dead := count(`dead`)
	twice := w.twice()
	w.mu.Lock()
	defer w.mu.Unlock()
	t.Logf("%d jobs through a 20 s stop of the database: %d called twice", jobs, twice)
	if dead != 0 || w.overlaps != 0 {
		t.Fatalf("%d dead letters, %d moments a job ran on two live hosts at once; want none and none", dead, w.overlaps)
	}
	for _, h := range []*hostProc{long, short} {
		select {
		case err := <-h.done:
			t.Fatalf("a host exited during the outage: %v\n%s", err, h.log())
		default:
		}
	}
}

// TestPostgresMigrateByHand: an operator reads the schema's version, takes it down and
// up again with wasmjobs migrate, and a host started with --pg-migrate=false refuses
// the older schema, naming both versions, and serves once it is up again.
func TestPostgresMigrateByHand(t *testing.T) {
	t.Parallel()
	url, schema := pgSchema(t, "migrate")
	at := func(want string, args ...string) {
		t.Helper()
		r := wasmjobs(t, "", append(args, "--backend", url, "--pg-schema", schema)...)
		if r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Fatalf("wasmjobs %s: %d %q %q, want %q", strings.Join(args, " "), r.code, r.stdout, r.stderr, want)
		}
	}
	v := postgres.SchemaVersion
	at(fmt.Sprintf("version 0; this binary: version %d (never migrated", v), "migrate", "status")
	at(fmt.Sprintf("migrated from version 0 to %d", v), "migrate", "up")
	at(fmt.Sprintf("at version %d already", v), "migrate", "up")
	at(fmt.Sprintf("migrated from version %d to %d", v, v-1), "migrate", "down")
	at("migrated from version "+fmt.Sprint(v-1)+" to 1", "migrate", "down", "--to", "1")
	at(fmt.Sprintf("version 1; this binary: version %d (to apply: 2", v), "migrate", "status")
	if r := wasmjobs(t, "", "migrate", "down", "--backend", url, "--pg-schema", schema); r.code == 0 || !strings.Contains(r.stderr, "nothing below version 1") {
		t.Fatalf("migrate down from version 1: %d %q, want it refused", r.code, r.stderr)
	}
	dir := t.TempDir()
	installModule(t, dir, "abi/echo", "echo", "v1")
	// Bounded: a host that took the schema anyway would serve until killed.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	run := exec.CommandContext(ctx, binary, "run", "--modules", dir, "--listen", "127.0.0.1:0", "--backend", url, "--pg-schema", schema, "--pg-migrate=false")
	run.Env = append(os.Environ(), "WASMJOBS_CACHE_DIR="+t.TempDir(), "WASMJOBS_DATA_DIR="+t.TempDir(), "GORACE=atexit_sleep_ms=0")
	out, err := run.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() <= 0 || !strings.Contains(string(out), "older than this binary") || !strings.Contains(string(out), "version 1") {
		t.Fatalf("run --pg-migrate=false on a version 1 schema: %v %q, want it refused naming the versions", err, out)
	}
	at(fmt.Sprintf("migrated from version 1 to %d", v), "migrate", "up")
	h := startHost(t, dir, "--backend", url, "--pg-schema", schema, "--pg-migrate=false")
	id := h.enqueueJSON(`{"queue":"echo","payload":"up"}`)
	waitForLong(t, "the job on the migrated schema", time.Minute, func() bool { return h.job(id).State == "succeeded" })
	// wasmjobs backup answers that the database is backed up with its own tools.
	if r := wasmjobs(t, "", "backup", "nightly", "--server", h.url); r.code == 0 || !strings.Contains(r.stderr, "PostgreSQL, up with its own tools") {
		t.Fatalf("backup of a host on PostgreSQL: %d %q, want the advice to use PostgreSQL's own tools", r.code, r.stderr)
	}
}
