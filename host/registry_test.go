package host_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/memory"
	"github.com/wasmjobs/wasmjobs/host"
	"github.com/wasmjobs/wasmjobs/internal/rigs/abitest"
	"github.com/wasmjobs/wasmjobs/worker"
)

// regRig is a registry on a temp directory, serving a worker on a memory backend.
type regRig struct {
	t   *testing.T
	dir string
	b   *memory.Backend
	w   *worker.Worker
	r   *host.Registry

	mu      sync.Mutex
	events  []regEvent
	settled []jobRecord
	started map[string]time.Time
}

type regEvent struct {
	host.RegistryEvent
	seen time.Time // when the registry reported it: the swap is done by then
}

type jobRecord struct {
	id, version, settle string
	outcome             worker.Outcome
	start, end          time.Time
}

func newRegRig(t *testing.T, cfg host.RegistryConfig, concurrency int) *regRig {
	t.Helper()
	return newRegRigOn(t, t.TempDir(), cfg, concurrency)
}

// newRegRigOn is newRegRig on the modules directory dir: a restart, with cfg's
// HistoryDir, of a rig that ran on dir.
func newRegRigOn(t *testing.T, dir string, cfg host.RegistryConfig, concurrency int) *regRig {
	t.Helper()
	rig := &regRig{t: t, dir: dir, b: memory.New(memory.Config{}), started: make(map[string]time.Time)}
	rig.w = worker.New(rig.b, worker.Config{Concurrency: concurrency, Observer: worker.ObserverFunc(rig.observe)})
	cfg.Dir, cfg.Engine, cfg.Queues = rig.dir, newEngine(t), rig.w
	if cfg.Rollout.Strategy == "" {
		// These tests are of the swap itself: a canary's tests ask for one.
		cfg.Rollout.Strategy = host.StrategyImmediate
	}
	cfg.OnEvent = func(ev host.RegistryEvent) {
		rig.mu.Lock()
		rig.events = append(rig.events, regEvent{ev, time.Now()})
		rig.mu.Unlock()
	}
	r, err := host.NewRegistry(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rig.r = r
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		r.Close()
		rig.w.Stop(ctx)
		r.Retire()
		rig.b.Close(ctx)
	})
	return rig
}

func (rig *regRig) start() {
	rig.t.Helper()
	if err := rig.r.Start(context.Background()); err != nil {
		rig.t.Fatal(err)
	}
	if err := rig.w.Start(context.Background()); err != nil {
		rig.t.Fatal(err)
	}
}

func (rig *regRig) observe(e worker.Event) {
	rig.mu.Lock()
	defer rig.mu.Unlock()
	switch e.Kind {
	case worker.EventStarted:
		rig.started[e.Job.Envelope.ID] = time.Now()
	case worker.EventSettled, worker.EventSettleFailed:
		rig.settled = append(rig.settled, jobRecord{
			id: e.Job.Envelope.ID, version: e.Result.Version, settle: e.Settle.String(), outcome: e.Result.Outcome,
			start: rig.started[e.Job.Envelope.ID], end: time.Now(),
		})
	}
}

// write puts data at name in the directory, atomically (write a temp file, rename).
func (rig *regRig) write(name string, data []byte) time.Time {
	rig.t.Helper()
	tmp := filepath.Join(rig.dir, ".tmp-"+name)
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		rig.t.Fatal(err)
	}
	at := time.Now()
	if err := os.Rename(tmp, filepath.Join(rig.dir, name)); err != nil {
		rig.t.Fatal(err)
	}
	return at
}

// eventsOf returns the events of the kind.
func (rig *regRig) eventsOf(kind string) []regEvent {
	return rig.eventsWhere(func(e regEvent) bool { return e.Kind == kind })
}

// eventsFor returns the events of the module name.
func (rig *regRig) eventsFor(name string) []regEvent {
	return rig.eventsWhere(func(e regEvent) bool { return e.Module == name })
}

func (rig *regRig) eventsWhere(keep func(regEvent) bool) []regEvent {
	rig.mu.Lock()
	defer rig.mu.Unlock()
	var out []regEvent
	for _, e := range rig.events {
		if keep(e) {
			out = append(out, e)
		}
	}
	return out
}

// waitFor polls cond until it holds or the deadline passes.
func (rig *regRig) waitFor(what string, cond func() bool) {
	rig.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			rig.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (rig *regRig) status(name string) host.ModuleStatus {
	for _, st := range rig.r.Modules() {
		if st.Name == name {
			return st
		}
	}
	return host.ModuleStatus{}
}

func (rig *regRig) publish(queue string, n int) {
	rig.t.Helper()
	for range n {
		if err := rig.b.Publish(context.Background(), backend.NewEnvelope(queue, []byte("x")), 0); err != nil {
			rig.t.Fatal(err)
		}
	}
}

// ranOn reports whether a job settled on version.
func (rig *regRig) ranOn(version string) bool {
	rig.mu.Lock()
	defer rig.mu.Unlock()
	return slices.ContainsFunc(rig.settled, func(j jobRecord) bool { return j.version == version })
}

func (rig *regRig) settledCount() int {
	rig.mu.Lock()
	defer rig.mu.Unlock()
	return len(rig.settled)
}

// TestSwapsUnderLoad swaps a module 20 times while 10,000 jobs flow at concurrency 16:
// every job runs exactly once, none fails, each on a version that was live while it
// ran, and every replaced version is closed.
func TestSwapsUnderLoad(t *testing.T) {
	t.Parallel()
	const jobs, swaps = 10_000, 20
	rig := newRegRig(t, host.RegistryConfig{Rescan: time.Hour}, 16)
	rig.write("svc.wasm", variant(t, "abi/ack", "v0"))
	rig.start()

	var modules []*host.Module
	modules = append(modules, rig.r.Handler("svc").Module())
	// Jobs flow all along: one a millisecond, about ten seconds for all of them, while
	// the 20 swaps take well under one (several on a loaded machine).
	published := make(chan error, 1)
	go func() {
		for range jobs {
			if err := rig.b.Publish(context.Background(), backend.NewEnvelope("svc", []byte("x")), 0); err != nil {
				published <- err
				return
			}
			time.Sleep(time.Millisecond)
		}
		published <- nil
	}()
	renamedAt := make(map[string]time.Time) // version -> when its file was renamed into place
	for i := 1; i <= swaps; i++ {
		data := variant(t, "abi/ack", fmt.Sprintf("v%d", i))
		renamedAt[host.Version(data)] = rig.write("svc.wasm", data)
		rig.waitFor(fmt.Sprintf("swap %d", i), func() bool { return len(rig.eventsOf("swapped")) == i })
		modules = append(modules, rig.r.Handler("svc").Module())
		// The next swap once a job ran on this version: swaps are quick, and a version
		// swapped out before the trickle reached it would have run nothing to check.
		rig.waitFor(fmt.Sprintf("a job on version %d", i), func() bool { return rig.ranOn(host.Version(data)) })
	}
	if err := <-published; err != nil {
		t.Fatal(err)
	}
	rig.waitFor("all jobs settled", func() bool { return rig.settledCount() >= jobs })
	rig.stopWorker() // nothing more can settle

	rig.mu.Lock()
	defer rig.mu.Unlock()
	if len(rig.settled) != jobs {
		t.Fatalf("%d settles for %d jobs", len(rig.settled), jobs)
	}
	// Each version's life: from when it was ready (At) to when the registry reported
	// the next swap done.
	type life struct{ from, until time.Time }
	lives := map[string]life{modules[0].Version(): {time.Time{}, time.Time{}}}
	swapped := slices.DeleteFunc(slices.Clone(rig.events), func(e regEvent) bool { return e.Kind != "swapped" })
	prev := modules[0].Version()
	for _, e := range swapped {
		l := lives[prev]
		l.until = e.seen
		lives[prev] = l
		lives[e.Version] = life{from: e.At}
		prev = e.Version
	}
	seen := make(map[string]bool)
	firstOn := make(map[string]time.Time)
	for _, j := range rig.settled {
		if seen[j.id] {
			t.Fatalf("job %s ran twice", j.id)
		}
		seen[j.id] = true
		if j.settle != "ack" || j.outcome != worker.Ack {
			t.Fatalf("job %s settled %s (outcome %v): a swap failed it", j.id, j.settle, j.outcome)
		}
		l, ok := lives[j.version]
		if !ok {
			t.Fatalf("job %s ran on unknown version %q", j.id, j.version)
		}
		if j.end.Before(l.from) || (!l.until.IsZero() && j.start.After(l.until)) {
			t.Fatalf("job %s ran [%v, %v] on a version live [%v, %v]", j.id, j.start, j.end, l.from, l.until)
		}
		if f, ok := firstOn[j.version]; !ok || j.end.Before(f) {
			firstOn[j.version] = j.end
		}
	}
	for i, m := range modules[:len(modules)-1] {
		select {
		case <-m.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("version %d was not closed after it was replaced", i)
		}
	}
	var latencies []time.Duration
	for v, at := range renamedAt {
		if f, ok := firstOn[v]; ok {
			latencies = append(latencies, f.Sub(at))
		}
	}
	slices.Sort(latencies)
	if len(latencies) != swaps {
		t.Fatalf("%d of %d versions ran a job", len(latencies), swaps)
	}
	t.Logf("swap latency (renamed into place -> first job on the new version) over %d swaps: p50 %v, p99 %v, max %v",
		swaps, latencies[len(latencies)/2], latencies[len(latencies)*99/100], latencies[len(latencies)-1])
}

// TestBadVersionKeepsTheOldServing drops bad versions in while jobs flow: none fails, the
// old version serves, and the rejection is visible.
func TestBadVersionKeepsTheOldServing(t *testing.T) {
	t.Parallel()
	good := variant(t, "abi/ack", "good")
	rig := newServingRigOf(t, good, 8)
	trunc := good[:len(good)/2]
	for i, bad := range []struct {
		name     string
		wasm     []byte
		manifest string
		want     string
	}{
		{"not wasm", []byte("#!/bin/sh\necho hi\n"), "", "not a wasm module"},
		{"truncated", trunc, "", "invalid module svc"},
		{"missing exports", variant(t, "hostile/no_handle", "x"), "", `missing export "wasmjobs_handle"`},
		{"trapping _initialize", variant(t, "hostile/init_trap", "x"), "", "_initialize failed: trap: unreachable"},
		{"failing wasmjobs_init", variant(t, "hostile/init_fail", "x"), "", "wasmjobs_init returned 5"},
		{"bad manifest", nil, "timeout = 5\n", "svc.toml:1:1: field timeout: want a duration from 1ms to 24h such as \"30s\", got 5"},
	} {
		rig.publish("svc", 200)
		if bad.wasm != nil {
			rig.write("svc.wasm", bad.wasm)
		}
		if bad.manifest != "" {
			rig.write("svc.toml", []byte(bad.manifest))
		}
		rig.waitFor("rejection of "+bad.name, func() bool { return len(rig.eventsOf("rejected")) == i+1 })
		ev := rig.eventsOf("rejected")[i]
		st := rig.status("svc")
		if !strings.Contains(ev.Err.Error(), bad.want) || st.Status != "serving" || st.Version != host.Version(good) || !strings.Contains(st.Error, bad.want) {
			t.Fatalf("%s: rejection %v, status %+v", bad.name, ev.Err, st)
		}
		if bad.manifest != "" {
			os.Remove(filepath.Join(rig.dir, "svc.toml"))
		}
		rig.write("svc.wasm", good) // back to the good bytes: the same version, no load
	}
	rig.waitFor("all jobs", func() bool { return rig.settledCount() >= 1200 })
	rig.quiesce()
	rig.stopWorker()
	rig.mu.Lock()
	defer rig.mu.Unlock()
	for _, j := range rig.settled {
		if j.settle != "ack" || j.version != host.Version(good) {
			t.Fatalf("job %s: %s on %.12s", j.id, j.settle, j.version)
		}
	}
	if len(rig.settled) != 1200 {
		t.Fatalf("%d settles of 1200 jobs", len(rig.settled))
	}
	if n := len(rig.events) - 6; n != 1 { // the first load, then only rejections
		t.Fatalf("%d events besides the 6 rejections: %+v", n, rig.events)
	}
}

// loads returns how many times the registry loaded or swapped in name, and the version
// it serves.
func (rig *regRig) loads() int { return len(rig.eventsOf("loaded")) + len(rig.eventsOf("swapped")) }

// quiesce stops the registry following the directory (waiting for a read under way),
// then reads the directory once more: whatever the changes so far lead to has happened
// when it returns, and nothing more happens after. No sleep can promise that.
func (rig *regRig) quiesce() {
	rig.t.Helper()
	if err := rig.r.Close(); err != nil {
		rig.t.Fatal(err)
	}
	rig.r.Sync(context.Background())
}

// drain stops the host as a drain does: the registry stops following the directory,
// the worker stops, the modules retire.
func (rig *regRig) drain() {
	rig.t.Helper()
	rig.r.Close()
	rig.stopWorker()
	rig.r.Retire()
}

// stopWorker drains the worker: no job settles after it returns.
func (rig *regRig) stopWorker() {
	rig.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := rig.w.Stop(ctx); err != nil {
		rig.t.Fatal(err)
	}
}

func TestNewModuleIsLoadedAndServed(t *testing.T) {
	t.Parallel()
	rig := newRegRig(t, host.RegistryConfig{Rescan: time.Hour}, 4)
	rig.start()
	if len(rig.r.Modules()) != 0 {
		t.Fatal("an empty directory has modules")
	}
	rig.write("mail.wasm", variant(t, "abi/echo", "1"))
	rig.waitFor("load", func() bool { return rig.loads() == 1 })
	rig.publish("mail", 5)
	rig.waitFor("jobs", func() bool { return rig.settledCount() == 5 })
	if st := rig.status("mail"); st.Status != "serving" || st.Queue != "mail" || st.File != filepath.Join(rig.dir, "mail.wasm") || st.LoadedAt.IsZero() {
		t.Fatalf("status %+v", st)
	}
	// Files that are not modules are ignored.
	rig.write("notes.txt", []byte("hello"))
	rig.write(".hidden.wasm", variant(t, "abi/ack", "h"))
	rig.quiesce()
	if len(rig.r.Modules()) != 1 {
		t.Fatalf("modules %+v", rig.r.Modules())
	}
}

// TestPartialWritesLoadOnce writes a module in pieces, as cp does, keeping it open
// between them: it is loaded once, whole. With a debounce longer than the pauses
// between pieces, and with one of an hour: the registry sees the writer close the file
// without waiting for the debounce.
func TestPartialWritesLoadOnce(t *testing.T) {
	t.Parallel()
	for _, debounce := range []time.Duration{300 * time.Millisecond, time.Hour} {
		t.Run(debounce.String(), func(t *testing.T) {
			t.Parallel()
			if debounce == time.Hour {
				needsLeases(t)
			}
			// Writes 20 ms apart, well inside the debounce even on a loaded machine.
			rig := newRegRig(t, host.RegistryConfig{Rescan: time.Hour, Debounce: debounce}, 4)
			rig.start()
			final := variant(t, "abi/echo", "final")
			// cp over the file: truncate, then the bytes arrive in pieces.
			f, err := os.Create(filepath.Join(rig.dir, "svc.wasm"))
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < len(final); i += 40 {
				f.Write(final[i:min(i+40, len(final))])
				time.Sleep(20 * time.Millisecond) // well inside the debounce
			}
			f.Close()
			rig.waitFor("the load", func() bool { return rig.loads()+len(rig.eventsOf("rejected")) > 0 })
			rig.quiesce()
			if rig.loads() != 1 || len(rig.eventsOf("rejected")) != 0 || rig.status("svc").Version != host.Version(final) {
				t.Fatalf("loads %d, rejections %d, status %+v; want one load of the final bytes", rig.loads(), len(rig.eventsOf("rejected")), rig.status("svc"))
			}
		})
	}
}

// needsLeases skips a test that needs the registry to tell a finished file before the
// debounce: Linux's read leases tell it (CI runs on Linux, so it skips nothing there).
func needsLeases(t *testing.T) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("only Linux's read leases tell a finished file before the debounce")
	}
}

// newLeaseRig is a rig whose debounce is an hour, on a system that tells a file
// finished (read leases): what it reads before then, it reads as finished.
func newLeaseRig(t *testing.T) *regRig {
	t.Helper()
	needsLeases(t)
	return newRegRig(t, host.RegistryConfig{Rescan: time.Hour, Debounce: time.Hour}, 4)
}

// unreadUntil checks that the module a, whose file is not finished (state says how),
// is not read while b is loaded, and that once finish finishes it, it is loaded once,
// as final.
func (rig *regRig) unreadUntil(state string, final []byte, finish func()) {
	rig.t.Helper()
	// b sorts after a: the read that loads b has looked at a first.
	rig.write("b.wasm", variant(rig.t, "abi/ack", "b"))
	rig.waitFor("b", func() bool { return rig.status("b").Status == "serving" })
	if ev := rig.eventsFor("a"); len(ev) != 0 {
		rig.t.Fatalf("a, %s, was read: %+v", state, ev)
	}
	finish()
	rig.waitFor("a", func() bool { return len(rig.eventsFor("a")) > 0 })
	rig.quiesce()
	if ev := rig.eventsFor("a"); len(ev) != 1 || ev[0].Kind != "loaded" || ev[0].Version != host.Version(final) {
		rig.t.Fatalf("events of a %+v, want one load of the final bytes", ev)
	}
}

// TestFinishedChangesDoNotWaitForTheDebounce: with a debounce of an hour, a change
// whose files are finished (renamed into place, or written and closed) is still read,
// so it is read at once, not after the debounce.
func TestFinishedChangesDoNotWaitForTheDebounce(t *testing.T) {
	t.Parallel()
	rig := newLeaseRig(t)
	rig.write("svc.wasm", variant(t, "abi/echo", "0"))
	rig.start()
	for i, step := range []struct {
		name   string
		change func() (module string, version string)
	}{
		{"a new module renamed in", func() (string, string) {
			v := variant(t, "abi/ack", "new")
			rig.write("other.wasm", v)
			return "other", host.Version(v)
		}},
		{"a new version renamed over", func() (string, string) {
			v := variant(t, "abi/echo", "1")
			rig.write("svc.wasm", v)
			return "svc", host.Version(v)
		}},
		{"a new version written in place and closed", func() (string, string) {
			v := variant(t, "abi/echo", "2")
			if err := os.WriteFile(filepath.Join(rig.dir, "svc.wasm"), v, 0o644); err != nil {
				t.Fatal(err)
			}
			return "svc", host.Version(v)
		}},
		{"a manifest renamed in", func() (string, string) {
			man := []byte("timeout = \"7s\"\n")
			rig.write("svc.toml", man)
			return "svc", host.VersionOf(variant(t, "abi/echo", "2"), man) // a version is bytes and manifest
		}},
	} {
		module, version := step.change()
		rig.waitFor(step.name, func() bool { return rig.loads() == i+2 })
		if ev := rig.eventsFor(module); ev[len(ev)-1].Version != version || ev[len(ev)-1].Read.IsZero() {
			t.Fatalf("%s: last event of %s %+v, want version %.12s read", step.name, module, ev[len(ev)-1], version)
		}
	}
	if n := len(rig.eventsOf("rejected")); n != 0 {
		t.Fatalf("%d rejections", n)
	}
}

// TestAFileOpenForWritingIsNotReadBeforeItsWriterClosesIt writes a module whose first
// bytes are a whole module of their own, and keeps it open: it is not read (while
// another module, renamed in after, is), and once its writer adds the rest and closes
// it, it is loaded once, whole, without waiting for the hour's debounce.
func TestAFileOpenForWritingIsNotReadBeforeItsWriterClosesIt(t *testing.T) {
	t.Parallel()
	rig := newLeaseRig(t)
	rig.start()
	prefix := mustRead(t, filepath.Join(abitest.Dir(), "abi", "echo.wasm"))
	final := variant(t, "abi/echo", "final") // prefix and a custom section
	if !bytes.HasPrefix(final, prefix) {
		t.Fatal("the final bytes do not start with the prefix")
	}
	f, err := os.Create(filepath.Join(rig.dir, "a.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(prefix); err != nil {
		t.Fatal(err)
	}
	rig.unreadUntil("still open for writing", final, func() {
		if _, err := f.Write(final[len(prefix):]); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestAnIncompleteModuleWaitsForTheDebounce: a module file cut short and closed (as by
// a writer that opens the file for each piece it appends) is not read before the
// debounce: it is not rejected while another module is loaded, and the whole file,
// written next, is loaded once.
func TestAnIncompleteModuleWaitsForTheDebounce(t *testing.T) {
	t.Parallel()
	rig := newLeaseRig(t)
	rig.start()
	final := variant(t, "abi/echo", "final")
	if err := os.WriteFile(filepath.Join(rig.dir, "a.wasm"), final[:len(final)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	rig.unreadUntil("half written", final, func() {
		if err := os.WriteFile(filepath.Join(rig.dir, "a.wasm"), final, 0o644); err != nil {
			t.Fatal(err)
		}
	})
	// A debounce that runs out reads what is there, whole or not, as before: it is
	// rejected, and the serving version stays.
	short := newRegRig(t, host.RegistryConfig{Rescan: time.Hour, Debounce: 20 * time.Millisecond}, 4)
	short.write("a.wasm", final)
	short.start()
	if err := os.WriteFile(filepath.Join(short.dir, "a.wasm"), final[:len(final)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	short.waitFor("the rejection", func() bool { return len(short.eventsOf("rejected")) == 1 })
	if st := short.status("a"); st.Status != "serving" || st.Version != host.Version(final) {
		t.Fatalf("status %+v, want the whole version serving", st)
	}
}

// TestARemovalWaitsForTheDebounce renames a module away, as an editor does before it
// writes the new file under the old name: the module is not removed before the
// debounce (while another module is loaded meanwhile), and the new file swaps in.
func TestARemovalWaitsForTheDebounce(t *testing.T) {
	t.Parallel()
	rig := newLeaseRig(t)
	rig.write("svc.wasm", variant(t, "abi/echo", "1"))
	rig.start()
	if err := os.Rename(filepath.Join(rig.dir, "svc.wasm"), filepath.Join(rig.dir, "svc.wasm~")); err != nil {
		t.Fatal(err)
	}
	rig.write("other.wasm", variant(t, "abi/ack", "o"))
	rig.waitFor("other", func() bool { return rig.status("other").Status == "serving" })
	if st := rig.status("svc"); st.Status != "serving" || len(rig.eventsOf("removed")) != 0 {
		t.Fatalf("svc %+v, events %+v: removed before the debounce", st, rig.eventsFor("svc"))
	}
	next := variant(t, "abi/echo", "2")
	if err := os.WriteFile(filepath.Join(rig.dir, "svc.wasm"), next, 0o644); err != nil {
		t.Fatal(err)
	}
	rig.waitFor("the swap", func() bool { return len(rig.eventsOf("swapped")) == 1 })
	rig.quiesce()
	if st := rig.status("svc"); st.Version != host.Version(next) || len(rig.eventsOf("removed")) != 0 {
		t.Fatalf("svc %+v, events %+v", st, rig.eventsFor("svc"))
	}
}

// newServingRig returns a started rig (an hour's rescan) whose module svc serves
// version 1 of the echo module.
func newServingRig(t *testing.T) *regRig {
	t.Helper()
	return newServingRigOf(t, variant(t, "abi/echo", "1"), 4)
}

// newServingRigOf is newServingRig serving wasm, with concurrency jobs at once.
func newServingRigOf(t *testing.T, wasm []byte, concurrency int) *regRig {
	t.Helper()
	rig := newRegRig(t, host.RegistryConfig{Rescan: time.Hour}, concurrency)
	rig.write("svc.wasm", wasm)
	rig.start()
	return rig
}

func TestEditorWriteThenRename(t *testing.T) {
	t.Parallel()
	rig := newServingRig(t)
	// vim: write a swap file and a backup, then rename the new file over the old.
	next := variant(t, "abi/echo", "2")
	os.WriteFile(filepath.Join(rig.dir, ".svc.wasm.swp"), []byte("swap"), 0o644)
	os.WriteFile(filepath.Join(rig.dir, "svc.wasm~"), variant(t, "abi/echo", "1"), 0o644)
	os.WriteFile(filepath.Join(rig.dir, "4913"), nil, 0o644)
	os.Remove(filepath.Join(rig.dir, "4913"))
	os.WriteFile(filepath.Join(rig.dir, "svc.wasm.new"), next, 0o644)
	os.Rename(filepath.Join(rig.dir, "svc.wasm.new"), filepath.Join(rig.dir, "svc.wasm"))
	os.Remove(filepath.Join(rig.dir, ".svc.wasm.swp"))
	rig.waitFor("the swap", func() bool { return len(rig.eventsOf("swapped")) > 0 })
	rig.quiesce()
	if rig.loads() != 2 || len(rig.eventsOf("swapped")) != 1 || rig.status("svc").Version != host.Version(next) || len(rig.r.Modules()) != 1 {
		t.Fatalf("loads %d, swaps %d, modules %+v", rig.loads(), len(rig.eventsOf("swapped")), rig.r.Modules())
	}
}

func TestRenameOver(t *testing.T) {
	t.Parallel()
	rig := newServingRig(t)
	next := variant(t, "abi/echo", "2")
	rig.write("svc.wasm", next) // write elsewhere, rename over
	rig.waitFor("the swap", func() bool { return len(rig.eventsOf("swapped")) > 0 })
	rig.quiesce()
	if len(rig.eventsOf("swapped")) != 1 || rig.status("svc").Version != host.Version(next) {
		t.Fatalf("swaps %d, status %+v", len(rig.eventsOf("swapped")), rig.status("svc"))
	}
}

// TestSymlinkSwap follows the Kubernetes ConfigMap layout: the module is a link through
// ..data, a link to a timestamped directory, swapped by renaming a new link over it.
func TestSymlinkSwap(t *testing.T) {
	t.Parallel()
	rig := newRegRig(t, host.RegistryConfig{Rescan: time.Hour}, 4)
	mkdata := func(stamp string, wasm []byte) {
		d := filepath.Join(rig.dir, "..2026_11_30_"+stamp)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(d, "svc.wasm"), wasm, 0o644)
		os.WriteFile(filepath.Join(d, "svc.toml"), []byte(`queue = "svc"`), 0o644)
		tmp := filepath.Join(rig.dir, "..data_tmp")
		os.Symlink("..2026_11_30_"+stamp, tmp)
		if err := os.Rename(tmp, filepath.Join(rig.dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	mkdata("01", variant(t, "abi/echo", "1"))
	os.Symlink("..data/svc.wasm", filepath.Join(rig.dir, "svc.wasm"))
	os.Symlink("..data/svc.toml", filepath.Join(rig.dir, "svc.toml"))
	rig.start()
	if rig.loads() != 1 {
		t.Fatalf("loads %d", rig.loads())
	}
	next := variant(t, "abi/echo", "2")
	mkdata("02", next)
	os.RemoveAll(filepath.Join(rig.dir, "..2026_11_30_01"))
	rig.waitFor("the swap", func() bool { return rig.loads() > 1 })
	rig.quiesce()
	if rig.loads() != 2 || rig.status("svc").Version != host.VersionOf(next, []byte(`queue = "svc"`)) {
		t.Fatalf("loads %d, status %+v; want exactly one more load, of the new bytes", rig.loads(), rig.status("svc"))
	}
}

func TestIdenticalBytesAreANoOp(t *testing.T) {
	t.Parallel()
	data := variant(t, "abi/echo", "1")
	rig := newServingRigOf(t, data, 4)
	for range 3 {
		rig.write("svc.wasm", bytes.Clone(data))
		os.Chtimes(filepath.Join(rig.dir, "svc.wasm"), time.Now(), time.Now())
	}
	rig.quiesce()
	if rig.loads() != 1 {
		t.Fatalf("%d loads of the same bytes, want 1", rig.loads())
	}
}

func TestRescanCatchesMissedEvents(t *testing.T) {
	t.Parallel()
	// Without a watcher, as on a file system without inotify: only rescans see changes.
	rig := newRegRig(t, host.RegistryConfig{NoWatch: true, Rescan: 100 * time.Millisecond}, 4)
	rig.start()
	rig.write("svc.wasm", variant(t, "abi/echo", "1"))
	rig.waitFor("the rescan to load the module", func() bool { return rig.loads() == 1 })
	next := variant(t, "abi/echo", "2")
	rig.write("svc.wasm", next)
	rig.waitFor("the rescan to swap", func() bool { return rig.status("svc").Version == host.Version(next) })
}

func TestRemovedModuleStopsConsumingAndKeepsItsJobs(t *testing.T) {
	t.Parallel()
	rig := newRegRig(t, host.RegistryConfig{Rescan: time.Hour}, 2)
	rig.write("slow.wasm", variant(t, "hostile/loop", "1"))
	// The running jobs' timeout must outlast the removal (the event, the debounce and
	// the unregister): 300 ms did not in a full -race run on a loaded machine.
	rig.write("slow.toml", []byte("timeout = \"2s\"\nmax_attempts = 1"))
	rig.start()
	rig.publish("slow", 5)
	rig.waitFor("two jobs running", func() bool { return rig.r.Handler("slow").Module().InUse() == 2 })
	mod := rig.r.Handler("slow").Module()
	os.Remove(filepath.Join(rig.dir, "slow.wasm"))
	rig.waitFor("removal", func() bool { return len(rig.eventsOf("removed")) == 1 })
	// The two running jobs finished (as timeouts, dead-lettered at max attempts 1); the
	// other three stay queued; the module is closed.
	select {
	case <-mod.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the removed module was not closed")
	}
	// Unregister returned before the event: the queue is no longer consumed, its
	// stream gave back what it held, and its two jobs settled.
	if _, consumed := rig.w.Running()["slow"]; consumed {
		t.Fatal("the removed module's queue is still consumed")
	}
	st, _ := rig.b.Stats("slow")
	if rig.settledCount() != 2 || st.Pending != 3 || st.Dead != 2 || len(rig.r.Modules()) != 0 {
		t.Fatalf("settled %d, stats %+v, modules %+v", rig.settledCount(), st, rig.r.Modules())
	}
}

func TestManifestChangeReloads(t *testing.T) {
	t.Parallel()
	rig := newServingRig(t)
	rig.write("svc.toml", []byte("max_payload = 4"))
	rig.waitFor("reload", func() bool { return len(rig.eventsOf("swapped")) == 1 })
	if got := rig.r.Handler("svc").Module().Manifest().Limits.MaxPayload; got != 4 {
		t.Fatalf("max payload %d after the manifest changed", got)
	}
	// Moving the module to another queue stops the old queue and serves the new one.
	rig.write("svc.toml", []byte(`queue = "other"`))
	rig.waitFor("move", func() bool { return rig.status("svc").Queue == "other" })
	rig.publish("other", 3)
	rig.waitFor("jobs on the new queue", func() bool { return rig.settledCount() == 3 })
	if r := rig.w.Running(); len(r) != 1 {
		t.Fatalf("queues served: %v, want only other", r)
	}
}

func TestRejectedNewModuleIsVisible(t *testing.T) {
	t.Parallel()
	rig := newRegRig(t, host.RegistryConfig{Rescan: time.Hour}, 4)
	rig.write("bad.wasm", variant(t, "hostile/no_marker", "1"))
	rig.start()
	st := rig.status("bad")
	if st.Status != "rejected" || st.Version != "" || !strings.Contains(st.Error, "not an ABI v1 module") {
		t.Fatalf("status %+v", st)
	}
	// Fixing it puts it in service.
	rig.write("bad.wasm", variant(t, "abi/echo", "1"))
	rig.waitFor("load", func() bool { return rig.status("bad").Status == "serving" })
	if st := rig.status("bad"); st.Error != "" {
		t.Fatalf("the old error stayed: %+v", st)
	}
}

func TestRegistryConfigErrors(t *testing.T) {
	t.Parallel()
	e := newEngine(t)
	w := idleWorker(t)
	if _, err := host.NewRegistry(host.RegistryConfig{Dir: "/nope", Engine: e, Queues: w}); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("missing dir: %v", err)
	}
	f := filepath.Join(t.TempDir(), "file")
	os.WriteFile(f, nil, 0o644)
	if _, err := host.NewRegistry(host.RegistryConfig{Dir: f, Engine: e, Queues: w}); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("file as dir: %v", err)
	}
	if _, err := host.NewRegistry(host.RegistryConfig{Dir: t.TempDir()}); err == nil {
		t.Error("no engine accepted")
	}
}

// TestCloseOfARegistryNeverStarted: Close returns on a registry that was never
// started, and Start after Close fails.
// closesSoon checks that r.Close (what names the case) returns, without an error, within
// 10 s.
func closesSoon(t *testing.T, r *host.Registry, what string) {
	t.Helper()
	closed := make(chan error, 1)
	go func() { closed <- r.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal(what + " did not return")
	}
}

func TestCloseOfARegistryNeverStarted(t *testing.T) {
	t.Parallel()
	w := idleWorker(t)
	r, err := host.NewRegistry(host.RegistryConfig{Dir: t.TempDir(), Engine: newEngine(t), Queues: w})
	if err != nil {
		t.Fatal(err)
	}
	closesSoon(t, r, "Close of a registry never started")
	if err := r.Close(); err != nil {
		t.Fatalf("a second Close: %v", err)
	}
	if err := r.Start(context.Background()); err == nil {
		t.Fatal("Start after Close succeeded")
	}
}

// registryWith returns a second registry of rig's directory, registering its modules'
// queues with q (a wrapper of rig's worker): it reads the directory at Start and Sync
// only, puts a new version in service at once, and closes and retires with the test.
func (rig *regRig) registryWith(q host.Queues) *host.Registry {
	rig.t.Helper()
	r, err := host.NewRegistry(host.RegistryConfig{Dir: rig.dir, Engine: newEngine(rig.t), Queues: q, Rescan: time.Hour, NoWatch: true,
		Rollout: host.Rollout{Strategy: host.StrategyImmediate}})
	if err != nil {
		rig.t.Fatal(err)
	}
	rig.t.Cleanup(func() {
		r.Close()
		r.Retire()
	})
	return r
}

// failingQueues registers queues with a worker, except while fail is set.
type failingQueues struct {
	*worker.Worker
	fail atomic.Bool
}

func (f *failingQueues) Register(ctx context.Context, q worker.Queue) error {
	if f.fail.Load() {
		return errors.New("broker unreachable")
	}
	return f.Worker.Register(ctx, q)
}

// TestFailedRegisterIsARejectionTriedAgain: a module whose queue cannot be registered
// is shown as rejected with the error, and the next read of the directory tries again
// although its files did not change.
func TestFailedRegisterIsARejectionTriedAgain(t *testing.T) {
	t.Parallel()
	rig := newRegRig(t, host.RegistryConfig{Rescan: time.Hour}, 4)
	q := &failingQueues{Worker: rig.w}
	q.fail.Store(true)
	r := rig.registryWith(q)
	rig.write("svc.wasm", variant(t, "abi/echo", "1"))
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	mods := r.Modules()
	if len(mods) != 1 || mods[0].Status != "rejected" || mods[0].Version != "" || !strings.Contains(mods[0].Error, "broker unreachable") {
		t.Fatalf("modules %+v, want svc rejected with the registration's error", mods)
	}
	if r.Handler("svc") != nil {
		t.Fatal("a module whose queue is not served has a handler")
	}
	r.Sync(context.Background()) // still failing: still rejected
	if st := r.Modules()[0]; st.Status != "rejected" {
		t.Fatalf("status %+v", st)
	}
	q.fail.Store(false)
	r.Sync(context.Background()) // the same files: tried again
	if st := r.Modules()[0]; st.Status != "serving" || st.Error != "" || st.Queue != "svc" {
		t.Fatalf("status %+v after the registration works, want serving with no error", st)
	}
	if err := rig.w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	rig.publish("svc", 3)
	rig.waitFor("the jobs", func() bool { return rig.settledCount() == 3 })
}

// TestCloseAfterAFailedStart: a Start that fails before it follows the directory (here
// the watcher cannot watch a directory that is gone) leaves a registry that Close
// closes at once, and that does not start again.
func TestCloseAfterAFailedStart(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "modules")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	w := idleWorker(t)
	r, err := host.NewRegistry(host.RegistryConfig{Dir: dir, Engine: newEngine(t), Queues: w})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "watching "+dir) {
		t.Fatalf("Start on a removed directory: %v, want an error watching it", err)
	}
	closesSoon(t, r, "Close after a failed Start")
	if err := r.Start(context.Background()); err == nil {
		t.Fatal("Start after a failed Start and Close succeeded")
	}
}

// TestFailedRegisterOfASwapKeepsTheOldVersion: a new version whose queue cannot be
// registered with its manifest is rejected whole: the previous version keeps serving
// (its jobs run on it), the status shows it serving with the error, and a later read of
// the directory swaps the new version in once the registration works, without
// compiling it again.
func TestFailedRegisterOfASwapKeepsTheOldVersion(t *testing.T) {
	t.Parallel()
	rig := newRegRig(t, host.RegistryConfig{Rescan: time.Hour}, 4)
	q := &failingQueues{Worker: rig.w}
	r := rig.registryWith(q)
	v1, v2 := variant(t, "abi/echo", "1"), variant(t, "abi/echo", "2")
	rig.write("svc.wasm", v1)
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := rig.w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	q.fail.Store(true)
	rig.write("svc.wasm", v2)
	rig.write("svc.toml", []byte("max_attempts = 7"))
	r.Sync(context.Background())
	st := r.Modules()[0]
	if st.Status != "serving" || st.Version != host.Version(v1) || !strings.Contains(st.Error, "broker unreachable") {
		t.Fatalf("status %+v, want the first version serving with the registration's error", st)
	}
	if got := r.Handler("svc").Module(); got.Version() != host.Version(v1) || got.Manifest().MaxAttempts == 7 {
		t.Fatalf("the handler runs version %s with max_attempts %d: the rejected version was swapped in", got.Version(), got.Manifest().MaxAttempts)
	}
	rig.publish("svc", 2)
	rig.waitFor("the jobs", func() bool { return rig.settledCount() == 2 })
	rig.mu.Lock()
	for _, j := range rig.settled {
		if j.version != host.Version(v1) {
			t.Errorf("job %s ran on %s, want the serving version", j.id, j.version)
		}
	}
	rig.mu.Unlock()
	loadedBy := time.Now()
	r.Sync(context.Background()) // still failing: still the first version
	if st := r.Modules()[0]; st.Version != host.Version(v1) || st.Error == "" {
		t.Fatalf("status %+v", st)
	}
	q.fail.Store(false)
	r.Sync(context.Background()) // the same files: tried again
	st = r.Modules()[0]
	if st.Status != "serving" || st.Version != host.VersionOf(v2, []byte("max_attempts = 7")) || st.Error != "" {
		t.Fatalf("status %+v after the registration works, want the new version with no error", st)
	}
	// The files did not change: the version loaded before the retries serves, not
	// one compiled again at each read.
	if !st.LoadedAt.Before(loadedBy) {
		t.Fatalf("the new version was loaded at %v, after the first read (%v): compiled again", st.LoadedAt, loadedBy)
	}
	if got := r.Handler("svc").Module().Manifest().MaxAttempts; got != 7 {
		t.Fatalf("max_attempts %d after the swap, want 7", got)
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
