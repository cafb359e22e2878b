package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/host"
	"github.com/wasmjobs/wasmjobs/internal/app/fleet"
	"github.com/wasmjobs/wasmjobs/internal/rigs/testbroker"
)

// fleetStream returns a stream name of the test's own, deleted when the test ends.
func fleetStream(t *testing.T, url string) string {
	t.Helper()
	stream := "wasmjobs.modules.test-" + uniqueSuffix()
	t.Cleanup(func() {
		conn, err := fleet.Dial(context.Background(), []string{url})
		if err != nil {
			t.Errorf("delete stream %s: %v", stream, err)
			return
		}
		defer conn.Close()
		if err := fleet.DeleteStream(conn, stream); err != nil {
			t.Errorf("delete stream %s: %v", stream, err)
		}
	})
	return stream
}

// serving returns the version h serves of module name, or "".
func (h *hostProc) serving(name string) string {
	var out struct{ Modules []host.ModuleStatus }
	h.get("/v1/modules", &out)
	for _, m := range out.Modules {
		if m.Name == name && m.Status == "serving" {
			return m.Version
		}
	}
	return ""
}

// jobsDone counts the jobs of queue h acked, from its debug log.
func (h *hostProc) jobsDone(queue string) int {
	n := 0
	for _, line := range strings.Split(h.log(), "\n") {
		if strings.Contains(line, "queue="+queue+" ") && strings.Contains(line, "settle=ack") {
			n++
		}
	}
	return n
}

// TestFleetPush is issue 18's fleet, with the real binary on the test broker: three
// hosts with empty modules directories get a pushed module and serve it; thousands of
// jobs flow while one host is SIGKILLed, and every job completes, each live host doing
// part of them; a new version reaches every live host; a host started afterwards serves
// it from its start; `modules list --backend` shows every live host's version; a host
// with --trust-key refuses an unsigned and a wrongly signed push and takes a signed
// one; and `modules remove` removes the module everywhere.
func TestFleetPush(t *testing.T) {
	t.Parallel()
	url := brokerURL(t)
	ctx := context.Background()
	stream := fleetStream(t, url)
	b, _, work, results := recordSetup(t, url, "fleet")
	src := t.TempDir()
	installModule(t, src, "abi/record", work, "1")
	wasmPath := filepath.Join(src, work+".wasm")
	// New versions swap at once rather than through a canary: the test is about what
	// reaches the hosts. The manifest travels with the module (--manifest).
	manifest := filepath.Join(t.TempDir(), "fleet.toml")
	manText := []byte("[rollout]\nstrategy = \"immediate\"\n")
	if err := os.WriteFile(manifest, manText, 0o644); err != nil {
		t.Fatal(err)
	}
	version := func() string {
		wasm, err := os.ReadFile(wasmPath)
		if err != nil {
			t.Fatal(err)
		}
		return host.VersionOf(wasm, manText)
	}
	push := func(extra ...string) result {
		t.Helper()
		return wasmjobs(t, "", append([]string{"modules", "push", wasmPath, "--manifest", manifest, "--backend", url, "--stream", stream}, extra...)...)
	}
	flags := func(id string, extra ...string) []string {
		return append([]string{"--backend", url, "--module-stream", stream, "--module-heartbeat", "200ms",
			"--host-id", id, "--concurrency", "8"}, extra...)
	}
	hosts := []*hostProc{}
	for i := range 3 {
		hosts = append(hosts, startHost(t, t.TempDir(), flags(fmt.Sprint("h", i))...))
	}

	// A push reaches the three.
	if r := push(); r.code != 0 || !strings.Contains(r.stdout, "pushed "+work) {
		t.Fatalf("push: %d %s %s", r.code, r.stdout, r.stderr)
	}
	v1 := version()
	for i, h := range hosts {
		waitFor(t, fmt.Sprintf("host %d serving the pushed module", i), func() bool { return h.serving(work) == v1 })
	}

	// Thousands of jobs; one host is killed in the middle.
	// The enqueue runs beside the jobs (it takes a while on a busy machine), so the
	// kill comes in the middle of both.
	const jobs = 3000
	lines := strings.Repeat("20\n", jobs) // 20 ms each
	start := time.Now()
	enqueued := make(chan result, 1)
	go func() {
		enqueued <- wasmjobs(t, lines, "enqueue", work, "-", "--lines", "-q", "--header", "results="+results, "--backend", url)
	}()
	recorded := func() int {
		st, err := b.QueueStats(ctx, results)
		if err != nil {
			t.Fatal(err)
		}
		return st.Pending
	}
	for i, h := range hosts {
		if m, err := os.ReadFile(filepath.Join(h.dir, work+".toml")); err != nil || string(m) != string(manText) {
			t.Fatalf("host %d's manifest: %q, %v", i, m, err)
		}
	}
	for deadline := time.Now().Add(2 * time.Minute); recorded() < jobs/3; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d jobs recorded in 2 minutes", recorded(), jobs)
		}
	}
	atKill := recorded()
	hosts[2].cmd.Process.Signal(syscall.SIGKILL)
	<-hosts[2].done
	t.Logf("host 2 killed with %d of %d jobs recorded, %v after the enqueue began", atKill, jobs, time.Since(start).Round(time.Millisecond))
	if atKill > jobs*2/3 {
		t.Fatalf("host 2 was killed with %d of %d jobs done already: not mid-run", atKill, jobs)
	}
	if r := <-enqueued; r.code != 0 {
		t.Fatalf("enqueue: %d %s", r.code, r.stderr)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for recorded() < jobs {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d jobs recorded", recorded(), jobs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	seen := distinctRecords(t, url, results, jobs)
	if seen != jobs {
		t.Fatalf("%d of %d jobs completed", seen, jobs)
	}
	for i, h := range hosts[:2] {
		n := h.jobsDone(work)
		t.Logf("host %d did %d jobs", i, n)
		if n == 0 {
			t.Errorf("live host %d did none of the jobs", i)
		}
	}

	t.Logf("all jobs done %v after the enqueue began", time.Since(start).Round(time.Millisecond))

	// A new version reaches the live hosts.
	installModule(t, src, "abi/record", work, "2")
	if r := push(); r.code != 0 {
		t.Fatalf("push v2: %d %s", r.code, r.stderr)
	}
	v2 := version()
	for i, h := range hosts[:2] {
		waitFor(t, fmt.Sprintf("host %d serving version 2", i), func() bool { return h.serving(work) == v2 })
	}

	// A host started afterwards serves it from its start: the stream is read before
	// the registry's first read, so there is nothing to wait for.
	late := startHost(t, t.TempDir(), flags("late")...)
	if got := late.serving(work); got != v2 {
		t.Fatalf("the late host serves %q at its start, want version 2 %q\n%s", got, v2, late.log())
	}

	// modules list --backend shows what each live host serves.
	waitFor(t, "modules list to show the three live hosts on version 2", func() bool {
		r := wasmjobs(t, "", "modules", "list", "--backend", url, "--stream", stream, "--window", "1s", "--json")
		if r.code != 0 {
			t.Fatalf("modules list: %d %s", r.code, r.stderr)
		}
		var out struct {
			Hosts   []string
			Modules []struct {
				Module   string
				Versions map[string]string
				Drift    bool
			}
		}
		if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
			t.Fatalf("modules list --json: %v: %s", err, r.stdout)
		}
		for _, m := range out.Modules {
			if m.Module == work {
				return len(out.Hosts) == 3 && m.Versions["h0"] == v2 && m.Versions["h1"] == v2 && m.Versions["late"] == v2 && !m.Drift
			}
		}
		return false
	})

	t.Logf("modules list agreed %v after the enqueue began", time.Since(start).Round(time.Millisecond))

	// Trust: a host that trusts a key refuses the unsigned pushes (the two in the
	// stream, a new one) and one signed with another key, and takes a signed one.
	keys := t.TempDir()
	key, other := filepath.Join(keys, "fleet"), filepath.Join(keys, "other")
	for _, k := range []string{key, other} {
		if r := wasmjobs(t, "", "modules", "keygen", k); r.code != 0 {
			t.Fatalf("keygen: %d %s", r.code, r.stderr)
		}
	}
	trusting := startHost(t, t.TempDir(), flags("trusting", "--trust-key", key+".pub")...)
	if got := trusting.serving(work); got != "" {
		t.Fatalf("the trusting host serves %q of unsigned pushes", got)
	}
	installModule(t, src, "abi/record", work, "3")
	if r := push(); r.code != 0 {
		t.Fatalf("unsigned push: %d %s", r.code, r.stderr)
	}
	if r := push("--sign-key", other); r.code != 0 || !strings.Contains(r.stdout, "(signed)") {
		t.Fatalf("push signed with the other key: %d %s %s", r.code, r.stdout, r.stderr)
	}
	v3 := version()
	waitFor(t, "the untrusting hosts serving version 3", func() bool { return hosts[0].serving(work) == v3 && late.serving(work) == v3 })
	type refusals struct {
		Refused []fleet.Refusal `json:"refused_pushes"`
	}
	var got refusals
	waitFor(t, "the trusting host refusing four pushes", func() bool {
		got = refusals{}
		trusting.get("/v1/modules", &got)
		return len(got.Refused) >= 4
	})
	var unsigned, wrong int
	for _, r := range got.Refused {
		switch {
		case strings.Contains(r.Reason, fleet.ErrUnsigned.Error()):
			unsigned++
		case strings.Contains(r.Reason, fleet.ErrBadSignature.Error()) && r.Version == v3:
			wrong++
		}
	}
	if unsigned != 3 || wrong != 1 {
		t.Fatalf("refused pushes: %d unsigned, %d wrongly signed; want 3 and 1: %+v", unsigned, wrong, got.Refused)
	}
	if !strings.Contains(trusting.log(), "refused a module push") {
		t.Errorf("the trusting host's log does not say it refused pushes")
	}
	if v := trusting.serving(work); v != "" {
		t.Fatalf("the trusting host serves %s of refused pushes", v)
	}
	installModule(t, src, "abi/record", work, "4")
	if r := push("--sign-key", key); r.code != 0 {
		t.Fatalf("signed push: %d %s", r.code, r.stderr)
	}
	v4 := version()
	for _, h := range []*hostProc{hosts[0], hosts[1], late, trusting} {
		waitFor(t, "every live host serving the signed version", func() bool { return h.serving(work) == v4 })
	}

	// remove takes it away everywhere.
	if r := wasmjobs(t, "", "modules", "remove", work, "--backend", url, "--stream", stream, "--sign-key", key); r.code != 0 {
		t.Fatalf("remove: %d %s", r.code, r.stderr)
	}
	for _, h := range []*hostProc{hosts[0], hosts[1], late, trusting} {
		waitFor(t, "every live host dropping the removed module", func() bool {
			_, err := os.Stat(filepath.Join(h.dir, work+".wasm"))
			return os.IsNotExist(err) && h.serving(work) == ""
		})
	}
}

// distinctRecords reads want records of queue (waiting up to 30 s for each) and returns
// how many distinct jobs they name.
func distinctRecords(t *testing.T, url, queue string, want int) int {
	t.Helper()
	_, msgs := testbroker.Consume(t, url, queue)
	seen := map[string]bool{}
	for len(seen) < want {
		select {
		case m := <-msgs:
			seen[string(m.Body)] = true
		case <-time.After(10 * time.Second):
			return len(seen)
		}
	}
	return len(seen)
}
