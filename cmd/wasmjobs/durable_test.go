package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	pebbledb "github.com/cockroachdb/pebble/v2"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/pebble"
)

// A second `run` on a data directory in use fails at once, naming the directory.
func TestSecondRunOnTheDataDirFails(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	h := startEchoHost(t, "--data-dir", data)
	if !strings.Contains(h.log(), `msg="data directory opened" data_dir=`+data) {
		t.Fatalf("the host does not say where its data is:\n%s", h.log())
	}
	start := time.Now()
	// The same flags as the first, port included: the directory is what it names.
	r := wasmjobs(t, "", "run", "--modules", h.dir, "--listen", strings.TrimPrefix(h.url, "http://"), "--data-dir", data)
	if r.code == 0 || !strings.Contains(r.stderr, data) || !strings.Contains(r.stderr, "in use") {
		t.Fatalf("a second run on %s: exit %d, stderr %q; want a failure naming the directory", data, r.code, r.stderr)
	}
	t.Logf("the second run failed in %v: %s", time.Since(start).Round(time.Millisecond), strings.TrimSpace(r.stderr))
	stopHost(t, h, syscall.SIGTERM)
}

// A damaged data directory is refused at start, with the file and the problem named:
// never an empty queue in place of the real one.
func TestDamagedDataDirRefusesToStart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir, data := t.TempDir(), filepath.Join(t.TempDir(), "data")
	installModule(t, dir, "abi/echo", "echo", "1")
	b, err := pebble.Open(ctx, pebble.Config{Dir: data})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Declare(ctx, backend.QueueConfig{Name: "echo"}); err != nil {
		t.Fatal(err)
	}
	for range 500 {
		if err := b.Publish(ctx, backend.NewEnvelope("echo", []byte(strings.Repeat("payload ", 20))), time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	db, err := pebbledb.Open(data, &pebbledb.Options{}) // into a table, to damage it
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	db.Close()
	tables, _ := filepath.Glob(filepath.Join(data, "*.sst"))
	if len(tables) == 0 {
		t.Fatal("no table to damage")
	}
	raw, err := os.ReadFile(tables[0])
	if err != nil {
		t.Fatal(err)
	}
	for i := 100; i < 110; i++ {
		raw[i] ^= 0xff
	}
	os.WriteFile(tables[0], raw, 0o644)
	r := wasmjobs(t, "", "run", "--modules", dir, "--listen", "127.0.0.1:0", "--data-dir", data)
	if r.code == 0 || !strings.Contains(r.stderr, filepath.Base(tables[0])) || !strings.Contains(r.stderr, "damaged") {
		t.Fatalf("run on a damaged directory: exit %d, stderr %q; want a refusal naming %s", r.code, r.stderr, filepath.Base(tables[0]))
	}
	t.Log(strings.TrimSpace(r.stderr))
}

// record is a job's record as GET /v1/jobs/{id} shows it on the pebble backend.
type record struct {
	ID, Queue, State, Reason, Output string
	Attempt                          int
	Logs                             []string
	EnqueuedAt                       time.Time `json:"enqueued_at"`
	StartedAt                        time.Time `json:"started_at"`
	Module                           struct{ Name, Version string }
}

// queued returns the jobs of queue that are waiting, delayed, deferred or handed out.
func (h *hostProc) queued(queue string) int {
	h.t.Helper()
	var out struct {
		Queues []struct {
			Name                                string
			Pending, Unacked, Delayed, Deferred int
		}
	}
	if code := h.get("/v1/queues", &out); code != 200 {
		h.t.Fatalf("GET /v1/queues: %d", code)
	}
	for _, q := range out.Queues {
		if q.Name == queue {
			return q.Pending + q.Unacked + q.Delayed + q.Deferred
		}
	}
	h.t.Fatalf("queue %s not served", queue)
	return 0
}

// enqueueIDs enqueues lines through the CLI (one request per 500 jobs, each an atomic
// batch) and returns the ids.
func enqueueIDs(t *testing.T, h *hostProc, queue, lines string, flags ...string) []string {
	t.Helper()
	args := append([]string{"enqueue", queue, "-", "--lines", "--server", h.url}, flags...)
	r := wasmjobs(t, lines, args...)
	if r.code != 0 {
		t.Fatalf("enqueue to %s: %d %s", queue, r.code, r.stderr)
	}
	return strings.Fields(r.stdout)
}

var settledLine = regexp.MustCompile(`msg="job settled" job=(\S+) queue=work `)

// TestCrashLosesNothingOnPebble runs the real binary on the default durable backend:
// thousands of jobs, some delayed, some dead-lettering, SIGKILL in the middle, and a
// restart on the same --data-dir. Every job completes, no more are run twice than were
// in flight, no delayed job ran before its time, and the dead letters and job records
// (with the guest's log lines) outlive the crash.
func TestCrashLosesNothingOnPebble(t *testing.T) {
	t.Parallel()
	const jobs, delayed, dead, concurrency = 4000, 300, 200, 16
	const delay = 10 * time.Second // due well after the kill: the delayed jobs cross it
	dir, data := t.TempDir(), t.TempDir()
	installModule(t, dir, "abi/sleep_ms", "work", "1")
	installModule(t, dir, "abi/dead_letter", "mail", "1")
	installModule(t, dir, "abi/log", "logger", "1")
	flags := []string{"--data-dir", data, "--concurrency", fmt.Sprint(concurrency)}
	h := startHost(t, dir, flags...)

	logged := enqueueIDs(t, h, "logger", "x\n")[0]
	deadIDs := enqueueIDs(t, h, "mail", strings.Repeat("x\n", dead))
	workIDs := enqueueIDs(t, h, "work", strings.Repeat("5\n", jobs)) // 5 ms each: about 3,000 a second at 16
	delayedIDs := enqueueIDs(t, h, "work", strings.Repeat("5\n", delayed), "--delay", delay.String())
	due := time.Now().Add(delay) // no earlier than this: the enqueues answered before it
	waitFor(t, "a third of the jobs", func() bool { return len(settledLine.FindAllString(h.log(), -1)) >= jobs/3 })
	// The delayed jobs must cross the kill to be found delayed at the restart; on a
	// machine so slow that they came due first, the restart may rightly find none, and
	// only "never early" (from the records, below) is asserted.
	crossed := time.Until(due) > delay/2
	stopHost(t, h, syscall.SIGKILL)
	before := h.log()
	atKill := len(settledLine.FindAllString(before, -1))

	h = startHost(t, dir, flags...)
	m := regexp.MustCompile(`msg="data directory opened" data_dir=\S+ pending=(\d+) delayed=(\d+) dead_letters=(\d+)`).FindStringSubmatch(h.log())
	if m == nil || m[1] == "0" || crossed && m[2] == "0" {
		t.Fatalf("the restart does not say it found jobs waiting and (the kill %v before they were due) delayed:\n%s", delay/2, h.log())
	}
	t.Logf("SIGKILL after %d jobs settled; the restart found %s waiting, %s delayed, %s dead letters", atKill, m[1], m[2], m[3])
	waitFor(t, "every job done", func() bool { return h.queued("work")+h.queued("mail") == 0 })

	get := func(id string) record {
		var rec record
		if code := h.get("/v1/jobs/"+id, &rec); code != 200 {
			t.Fatalf("GET /v1/jobs/%s after the restart: %d", id, code)
		}
		return rec
	}
	for _, id := range workIDs {
		if rec := get(id); rec.State != "succeeded" || rec.Output != "slept" {
			t.Fatalf("job %s after the restart: %+v, want succeeded", id, rec)
		}
	}
	for _, id := range delayedIDs {
		rec := get(id)
		if rec.State != "succeeded" || rec.StartedAt.Before(rec.EnqueuedAt.Add(delay)) {
			t.Fatalf("delayed job %s: %+v; it must succeed, and not start before %v", id, rec, rec.EnqueuedAt.Add(delay))
		}
	}
	for _, id := range deadIDs {
		if rec := get(id); rec.State != "dead" || rec.Reason == "" {
			t.Fatalf("dead-lettering job %s: %+v, want dead with its reason", id, rec)
		}
	}
	var dl struct {
		DeadLetters []struct{ ID string } `json:"dead_letters"`
	}
	h.get("/v1/dead-letters?queue=mail&limit=1000", &dl)
	distinct := map[string]bool{}
	for _, d := range dl.DeadLetters {
		distinct[d.ID] = true
	}
	for _, id := range deadIDs {
		if !distinct[id] {
			t.Fatalf("dead letter %s missing after the restart: %d dead letters", id, len(dl.DeadLetters))
		}
	}
	r := wasmjobs(t, "", "jobs", "get", logged, "--server", h.url)
	if r.code != 0 || !strings.Contains(r.stdout, "INFO info line") || !strings.Contains(r.stdout, "WARN err 1") {
		t.Fatalf("jobs get %s after the restart: %d %s %s; want the guest's log lines", logged, r.code, r.stdout, r.stderr)
	}

	stopHost(t, h, syscall.SIGTERM)
	// That nothing was lost is proved above from the durable truth: every job's record,
	// read back after the restart, says it succeeded. The log lines below only bound the
	// re-runs, and the killed process's log may lack its last lines (a line can be lost
	// at SIGKILL after its settle was committed), so a job is never required to appear
	// in it; the restarted host's log is whole, since it stopped cleanly.
	//
	// A job runs twice when its settle was not on disk at the kill. A settle commits
	// without waiting for the disk (publishes are synced, settles are not: pebble's log
	// is flushed behind them), so the kill can overtake the last few milliseconds of
	// settles, and only those: a job that ran twice must have settled first among the
	// last settleWindow settles logged before the kill. The bound is independent of the
	// restart's counts: a settle lost anywhere earlier, or a job run twice after the
	// restart, fails it.
	const settleWindow = concurrency + 256 // in flight, plus a few ms of unsynced settles at ~3,000 a second
	var order []string                     // the work jobs in the order their settles were logged before the kill
	for _, l := range settledLine.FindAllStringSubmatch(before, -1) {
		order = append(order, l[1])
	}
	firstAt := map[string]int{}
	for i, id := range order {
		if _, ok := firstAt[id]; !ok {
			firstAt[id] = i
		} else {
			t.Errorf("job %s settled twice before the kill", id)
		}
	}
	after := map[string]int{}
	for _, l := range settledLine.FindAllStringSubmatch(h.log(), -1) {
		after[l[1]]++
	}
	twice := 0
	for id, n := range after {
		i, ok := firstAt[id]
		switch {
		case n > 1:
			t.Errorf("job %s ran %d times after the restart", id, n)
		case !ok:
			continue // ran once, after the restart: not run before the kill, or its line was lost with it
		case i < len(order)-settleWindow:
			t.Errorf("job %s ran twice, but its first settle was the %d-th of %d before the kill, more than %d from the end: a settle on disk was lost", id, i+1, len(order), settleWindow)
		}
		twice++
	}
	unlogged := jobs + delayed - len(firstAt) - len(after) + twice // succeeded by their records, their only settle line lost with the kill
	t.Logf("%d work jobs, all succeeded by their records; %d settles logged before the kill, %d after, %d lost with it: %d ran twice (at most %d may)", jobs+delayed, len(order), len(after), unlogged, twice, settleWindow)
	if twice > settleWindow {
		t.Fatalf("%d jobs ran twice, more than the %d settles the kill can overtake", twice, settleWindow)
	}
}

// TestEnqueueDuringTheDrainIsRefused runs the real binary on the memory backend:
// SIGTERM while a slow job runs; from then on every enqueue answers 503 and says the
// host is draining, reads still answer, and the host exits having lost no job it
// answered 202 for.
func TestEnqueueDuringTheDrainIsRefused(t *testing.T) {
	t.Parallel()
	// The running job waits for a file the test creates once its checks during the
	// drain are done (abi/wait_file): it outlasts them however slow the machine.
	dir, gate := t.TempDir(), t.TempDir()
	installModule(t, dir, "abi/wait_file", "work", "v1")
	writeManifest(t, dir, "work", fmt.Sprintf("max_attempts = 1\ntimeout = \"1h\"\ndirs = [%q]\n", gate+":/gate"))
	h := startHost(t, dir, "--backend", "memory", "--drain-timeout", "1h")

	status, body := h.post("/v1/jobs", `{"queue": "work", "payload": "go"}`)
	var acc struct{ ID string }
	if status != 202 || json.Unmarshal([]byte(body), &acc) != nil {
		t.Fatalf("enqueue: %d %s", status, body)
	}
	var st jobState
	waitFor(t, "the slow job to start", func() bool { h.get("/v1/jobs/"+acc.ID, &st); return st.State == "running" })
	h.cmd.Process.Signal(syscall.SIGTERM)
	waitFor(t, "readyz to say 503", func() bool { return h.get("/readyz", nil) == 503 })

	accepted := []string{acc.ID}
	for _, tc := range []struct{ path, body string }{
		{"/v1/jobs", `{"queue": "work", "payload": "1"}`},
		{"/v1/jobs/batch", `{"jobs": [{"queue": "work", "payload": "1"}]}`},
	} {
		status, body := h.post(tc.path, tc.body)
		if status == 202 {
			accepted = append(accepted, body)
		}
		if status != 503 || !strings.Contains(body, "the host is draining") {
			t.Errorf("POST %s during the drain: %d %s, want 503 saying the host is draining", tc.path, status, body)
		}
	}
	r := wasmjobs(t, "", "enqueue", "work", "1", "--server", h.url)
	if r.code != 1 || !strings.Contains(r.stderr, "server answered 503: the host is draining") {
		t.Errorf("enqueue during the drain: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if code := h.get("/v1/jobs/"+acc.ID, &st); code != 200 || st.State != "running" {
		t.Fatalf("GET the running job during the drain: %d %+v", code, st)
	}
	if code := h.get("/v1/queues", nil); code != 200 {
		t.Fatalf("GET /v1/queues during the drain: %d", code)
	}
	if err := os.WriteFile(filepath.Join(gate, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}

	if err := h.exited(time.Minute); err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
	log := h.log()
	settled := regexp.MustCompile(`msg="job settled" .*job=(\S+)`).FindAllStringSubmatch(log, -1)
	if len(settled) != len(accepted) || settled[0][1] != acc.ID || strings.Contains(log, "dropped at exit") {
		t.Fatalf("accepted %v; settled %v; every job answered 202 must settle and none be dropped", accepted, settled)
	}
}

// TestDrainOnPebbleLosesNothing: on the durable default, SIGTERM while jobs run and more
// wait behind them; during the drain enqueues still answer 202 (the job is kept for the
// next start). The restart on the same --data-dir finds every job that was waiting,
// those accepted during the drain included, and runs them. A backup taken before the
// drain, put in place of a data directory, starts with the jobs it held.
//
// The running jobs wait for a file the test creates (abi/wait_file, through a directory
// the manifest grants) once it has seen the drain: they run through the backups and the
// drain's enqueues however slow the machine, and the drain's timeout is never reached.
func TestDrainOnPebbleLosesNothing(t *testing.T) {
	t.Parallel()
	dir, data, backups, gate := t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir()
	installModule(t, dir, "abi/wait_file", "work", "1")
	writeManifest(t, dir, "work", fmt.Sprintf("dirs = [%q]\ntimeout = \"1h\"\n", gate+":/gate"))
	release := func() {
		t.Helper()
		if err := os.WriteFile(filepath.Join(gate, "go"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	flags := []string{"--data-dir", data, "--backup-dir", backups, "--concurrency", "2", "--drain-timeout", "1h"}
	h := startHost(t, dir, flags...)
	slow := enqueueIDs(t, h, "work", "go\ngo\n") // running until release: through the backups and the enqueues of the drain
	queued := enqueueIDs(t, h, "work", strings.Repeat("go\n", 20))
	waitFor(t, "the slow jobs to run", func() bool {
		var a, b record
		h.get("/v1/jobs/"+slow[0], &a)
		h.get("/v1/jobs/"+slow[1], &b)
		return a.State == "running" && b.State == "running"
	})
	backup := filepath.Join(backups, "nightly")
	if r := wasmjobs(t, "", "backup", "nightly", "--server", h.url); r.code != 0 || !strings.Contains(r.stdout, backup) {
		t.Fatalf("backup: %d %s %s", r.code, r.stdout, r.stderr)
	}
	if r := wasmjobs(t, "", "backup", "nightly", "--server", h.url); r.code == 0 || !strings.Contains(r.stderr, "exists") {
		t.Fatalf("a backup of a name taken: %d %s %s; want a refusal", r.code, r.stdout, r.stderr)
	}
	if r := wasmjobs(t, "", "backup", "../escaped", "--server", h.url); r.code == 0 || !strings.Contains(r.stderr, "one plain name") {
		t.Fatalf("a backup named out of the backup directory: %d %s %s; want a refusal", r.code, r.stdout, r.stderr)
	}

	h.cmd.Process.Signal(syscall.SIGTERM)
	waitFor(t, "readyz to say 503", func() bool { return h.get("/readyz", nil) == 503 })
	if r := wasmjobs(t, "", "backup", "late", "--server", h.url); r.code == 0 || !strings.Contains(r.stderr, "draining") {
		t.Fatalf("a backup during the drain: %d %s %s; want a refusal", r.code, r.stdout, r.stderr)
	}
	status, body := h.post("/v1/jobs", `{"queue": "work", "payload": "go"}`)
	if status != 202 {
		t.Fatalf("enqueue during the drain: %d %s, want 202 on a durable backend", status, body)
	}
	var one struct{ ID string }
	json.Unmarshal([]byte(body), &one)
	status, body = h.post("/v1/jobs/batch", `{"jobs": [{"queue": "work", "payload": "go"}, {"queue": "work", "payload": "go"}]}`)
	var batch struct{ IDs []string }
	if json.Unmarshal([]byte(body), &batch); status != 202 || len(batch.IDs) != 2 {
		t.Fatalf("a batch during the drain: %d %s, want 202", status, body)
	}
	during := append([]string{one.ID}, batch.IDs...)
	if strings.Contains(h.log(), `msg="job settled"`) {
		t.Fatalf("a job settled before its release:\n%s", h.log())
	}
	release()
	if err := h.exited(time.Minute); err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, h.log())
	}
	log := h.log()
	want := len(queued) + len(during)
	if !strings.Contains(log, fmt.Sprintf(`msg="queued jobs are kept for the next start" queued=%d`, want)) ||
		strings.Count(log, `msg="job settled"`) != len(slow) {
		t.Fatalf("the drain: want the %d slow jobs settled and %d kept:\n%s", len(slow), want, log)
	}

	h = startHost(t, dir, flags...)
	if !strings.Contains(h.log(), fmt.Sprintf(`pending=%d`, want)) {
		t.Fatalf("the restart does not find the %d jobs waiting:\n%s", want, h.log())
	}
	waitFor(t, "every job done", func() bool { return h.queued("work") == 0 })
	for _, id := range append(append(slow, queued...), during...) {
		var rec record
		if code := h.get("/v1/jobs/"+id, &rec); code != 200 || rec.State != "succeeded" {
			t.Fatalf("job %s after the restart: %d %+v, want succeeded", id, code, rec)
		}
	}
	stopHost(t, h, syscall.SIGTERM)

	// Restore: the backup, used as a data directory, holds the jobs queued when it was
	// taken (the two slow ones were running: unsettled, so waiting too).
	h = startHost(t, dir, "--data-dir", backup)
	if !strings.Contains(h.log(), fmt.Sprintf(`pending=%d`, len(slow)+len(queued))) {
		t.Fatalf("the restored backup does not hold the %d jobs waiting when it was taken:\n%s", len(slow)+len(queued), h.log())
	}
	stopHost(t, h, syscall.SIGTERM)
}
