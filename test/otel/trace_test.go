package otel

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace"
)

// The span contract these tests hold the host to is issue #27's (docs: README's
// Tracing section; names in internal/telemetry).
const (
	scope = "github.com/wasmjobs/wasmjobs"
	// guestTrace is the trace id of the traceparent the steps guest sends itself
	// (testdata/steps.wat): the host must replace it.
	guestTrace = "0af7651916cd43dd8448eb211c80319c"
	// querySecret is in the query of every URL the guest calls: url.full drops it.
	querySecret = "query-secret"
	// closeGrace is server.CloseGrace: what a stop takes past --drain-timeout at most.
	closeGrace = 2 * time.Second
)

// TestJourney follows one job, enqueued under a caller's span, through a retry, a
// defer and an ack that calls out and enqueues a child, over OTLP/HTTP and gRPC on the
// default backend and over OTLP/HTTP on RabbitMQ (a real broker).
func TestJourney(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, proto string
		rabbit      bool
	}{
		{"OTLP/HTTP", "http/protobuf", false},
		{"OTLP/gRPC", "grpc", false},
		{"OTLP/HTTP on RabbitMQ", "http/protobuf", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var flags []string
			work, child := "work", "child"
			if tc.rabbit {
				flags = []string{"--backend", brokerURL(t)}
				suffix := "-" + uniqueSuffix(t)
				work, child = work+suffix, child+suffix
			}
			srv := newStepServer(t, script("retry", "defer", "ack "+child))
			c, h, _ := tracedHost(t, tc.proto, []module{{work, rig.steps, grant(srv)}, {child, rig.ack, ""}}, flags...)
			caller := newCaller(t)
			id := h.enqueue(jobJSON(work, srv.URL+"/step?token="+querySecret), "traceparent", caller.traceparent())
			spans := c.waitSpans(t, "the journey's spans", func(s []span) bool {
				return count("process "+work)(s) >= 3 && count("run "+work)(s) >= 3 && count("GET")(s) >= 3 && count("process "+child)(s) >= 1 &&
					count("settle "+child)(s) >= 1 && count("settle "+work)(s) >= 3
			})
			j := journey{t: t, spans: spans, work: work, child: child, id: id}
			send := j.send(caller)
			procs := j.processes(send, []string{"1", "2", "2"}, []string{"retry", "defer", "ack"})
			j.calls(srv, procs)
			j.childOf(procs[2])
			j.noSecrets()
			checkLogs(t, h, id, procs)
		})
	}
}

// journey checks the spans of one job of the steps guest.
type journey struct {
	t               *testing.T
	spans           []span
	work, child, id string
}

// send checks the job's one send span, a child of caller's, and returns it.
func (j journey) send(caller callerSpan) span {
	j.t.Helper()
	send := j.one(withAttr(named(j.spans, "send "+j.work), "messaging.message.id", j.id), "send "+j.work)
	j.check(send, ptrace.SpanKindProducer, messaging("send", "send", j.work, j.id))
	if send.Trace != caller.Trace || send.Parent != caller.ID {
		j.t.Errorf("send %s is in trace %s under %q, want a child of the caller's span %s/%s", j.work, send.Trace, send.Parent, caller.Trace, caller.ID)
	}
	return send
}

// processes checks the job's process spans, one per run with the attempts and settles
// given, each a new root linking to send, and returns them in start order.
func (j journey) processes(send span, attempts, settles []string) []span {
	j.t.Helper()
	procs := withAttr(named(j.spans, "process "+j.work), "messaging.message.id", j.id)
	if len(procs) != len(attempts) {
		j.t.Fatalf("%d spans process %s of job %s, want %d:\n%s", len(procs), j.work, j.id, len(attempts), dump(j.spans))
	}
	traces := map[string]bool{send.Trace: true}
	for i, p := range procs {
		want := messaging("process", "process", j.work, j.id)
		want["wasmjobs.attempt"], want["wasmjobs.settle"] = attempts[i], settles[i]
		want["wasmjobs.module"], want["wasmjobs.canary.role"] = j.work, "current"
		j.check(p, ptrace.SpanKindConsumer, want)
		for _, k := range []string{"wasmjobs.module.version", "wasmjobs.round", "wasmjobs.waited_ms"} {
			if p.attr(k) == "" {
				j.t.Errorf("run %d: process span lacks %s: %v", i+1, k, p)
			}
		}
		if reason := p.attr("wasmjobs.reason"); (reason == "") != (settles[i] == "ack") {
			j.t.Errorf("run %d: settle %s with wasmjobs.reason %q: want one exactly when it is not ack", i+1, settles[i], reason)
		}
		if p.Parent != "" || traces[p.Trace] {
			j.t.Errorf("run %d: process span %v is not a new root of a trace of its own", i+1, p)
		}
		traces[p.Trace] = true
		if !p.linksTo(send.Trace, send.ID, "enqueue") {
			j.t.Errorf("run %d: process span does not link to the send span %s/%s (wasmjobs.link=enqueue): %v", i+1, send.Trace, send.ID, p.Links)
		}
		run := j.one(j.childrenOf(p, "run "+j.work), fmt.Sprintf("run %d's run %s", i+1, j.work))
		j.check(run, ptrace.SpanKindInternal, nil)
		settle := j.one(j.inside(p, "settle "+j.work), fmt.Sprintf("run %d's settle %s", i+1, j.work))
		j.check(settle, ptrace.SpanKindClient, map[string]string{"messaging.operation.type": "settle", "messaging.operation.name": settles[i]})
	}
	return procs
}

// calls checks each run's GET: a client span under its run span, whose traceparent is
// the one the server received (not the guest's own).
func (j journey) calls(srv *stepServer, procs []span) {
	j.t.Helper()
	calls := srv.received()
	if len(calls) != len(procs) {
		j.t.Fatalf("the server received %d calls, want %d", len(calls), len(procs))
	}
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	for i, p := range procs {
		runs := j.childrenOf(p, "run "+j.work)
		if len(runs) != 1 {
			continue // reported by processes
		}
		get := j.one(j.childrenOf(runs[0], "GET"), fmt.Sprintf("run %d's GET", i+1))
		j.check(get, ptrace.SpanKindClient, map[string]string{"http.request.method": "GET", "url.full": srv.URL + "/step",
			"server.address": "127.0.0.1", "server.port": port, "http.response.status_code": "200"})
		// The guest logs the answer it got: the run span's one event.
		answer := srv.answer(i+1, nil)
		if ev := runs[0].Events; len(ev) != 1 || ev[0].Name != "log" || fmt.Sprint(ev[0].Attrs["log.message"]) != answer ||
			fmt.Sprint(ev[0].Attrs["log.severity"]) != "info" {
			j.t.Errorf("run %d: the run span's events are %v, want one log event, info, %q", i+1, ev, answer)
		}
		if strings.Contains(calls[i].Traceparent, guestTrace) {
			j.t.Errorf("run %d: the guest's own traceparent reached the server: %q", i+1, calls[i].Traceparent)
		}
		if want := "00-" + get.Trace + "-" + get.ID + "-01"; calls[i].Traceparent != want {
			j.t.Errorf("run %d: the server received traceparent %q, want the GET span's %q", i+1, calls[i].Traceparent, want)
		}
	}
}

// childOf checks the child job's send span, inside parent, and its process span, a new
// root that links back to it.
func (j journey) childOf(parent span) {
	j.t.Helper()
	send := j.one(j.inside(parent, "send "+j.child), "send "+j.child+" inside the last run")
	want := messaging("send", "send", j.child, "")
	delete(want, "messaging.message.id")
	j.check(send, ptrace.SpanKindProducer, want)
	childID := send.attr("messaging.message.id")
	if childID == "" {
		j.t.Errorf("send %s has no messaging.message.id", j.child)
	}
	proc := j.one(named(j.spans, "process "+j.child), "process "+j.child)
	want = messaging("process", "process", j.child, childID)
	want["wasmjobs.attempt"], want["wasmjobs.settle"] = "1", "ack"
	j.check(proc, ptrace.SpanKindConsumer, want)
	if proc.Parent != "" || proc.Trace == parent.Trace {
		j.t.Errorf("the child's process span is not a new root: %v", proc)
	}
	if !proc.linksTo(send.Trace, send.ID, "enqueue") {
		j.t.Errorf("the child's process span does not link to its send span %s/%s: %v", send.Trace, send.ID, proc.Links)
	}
}

// noSecrets checks that no attribute holds the URL's query or the guest's header.
func (j journey) noSecrets() {
	j.t.Helper()
	for _, s := range j.spans {
		for k, v := range s.Attrs {
			if str := fmt.Sprint(v); strings.Contains(str, querySecret) || strings.Contains(str, guestTrace) {
				j.t.Errorf("span %s records %s = %q", s.Name, k, str)
			}
		}
	}
}

// one returns the one span of spans, failing the test when there is not exactly one.
func (j journey) one(spans []span, what string) span {
	j.t.Helper()
	if len(spans) != 1 {
		j.t.Fatalf("%d spans %s, want 1; the collector has:\n%s", len(spans), what, dump(j.spans))
	}
	return spans[0]
}

// childrenOf returns the spans called name whose parent is p.
func (j journey) childrenOf(p span, name string) []span {
	var out []span
	for _, s := range named(j.spans, name) {
		if s.Trace == p.Trace && s.Parent == p.ID {
			out = append(out, s)
		}
	}
	return out
}

// inside returns the spans called name that descend from p.
func (j journey) inside(p span, name string) []span {
	var out []span
	for _, s := range named(j.spans, name) {
		if s.Trace == p.Trace && under(j.spans, s, p.ID) {
			out = append(out, s)
		}
	}
	return out
}

// check checks a span's kind, scope and attributes (want's values as attr gives them).
func (j journey) check(s span, kind ptrace.SpanKind, want map[string]string) {
	j.t.Helper()
	if s.Kind != kind || s.Scope != scope {
		j.t.Errorf("span %s: kind %v, scope %q; want %v, %q", s.Name, s.Kind, s.Scope, kind, scope)
	}
	for k, v := range want {
		if got := s.attr(k); got != v {
			j.t.Errorf("span %s: %s = %q, want %q", s.Name, k, got, v)
		}
	}
}

// messaging is the messaging attributes of an operation on a job.
func messaging(op, name, queue, id string) map[string]string {
	return map[string]string{"messaging.system": "wasmjobs", "messaging.operation.type": op, "messaging.operation.name": name,
		"messaging.destination.name": queue, "messaging.message.id": id}
}

// checkLogs checks that the host's log line of each run's settle names the run's
// process span.
func checkLogs(t *testing.T, h *host, id string, procs []span) {
	t.Helper()
	var settled []string
	for line := range strings.Lines(h.log()) {
		if strings.Contains(line, `msg="job settled" job=`+id+" ") {
			settled = append(settled, line)
		}
	}
	if len(settled) != len(procs) {
		t.Fatalf("%d lines job settled for job %s, want %d", len(settled), id, len(procs))
	}
	for i, p := range procs {
		if want := "trace_id=" + p.Trace + " span_id=" + p.ID; !strings.Contains(settled[i], want) {
			t.Errorf("run %d's log line lacks %s: %s", i+1, want, settled[i])
		}
	}
}

// TestContextSurvivesRestart kills the host with SIGKILL while the job's run waits on
// its GET; the run after the restart (on the default backend's data) still links to
// the send span exported before the kill.
func TestContextSurvivesRestart(t *testing.T) {
	t.Parallel()
	srv := newStepServer(t, func(n int, r *http.Request) string {
		if n == 1 {
			<-r.Context().Done() // held until the kill cuts the connection
			return "retry"
		}
		return "ack"
	})
	c, h, cfg := tracedHost(t, "http/protobuf", []module{{"work", rig.steps, grant(srv)}})
	caller := newCaller(t)
	id := h.enqueue(jobJSON("work", srv.URL+"/step"), "traceparent", caller.traceparent())
	c.waitSpans(t, "the send span", func(s []span) bool { return count("send work")(s) == 1 })
	waitFor(t, "the run's GET", func() bool { return len(srv.received()) == 1 })
	h.signal(syscall.SIGKILL, 30*time.Second)

	h = startHost(t, &cfg)
	h.waitState(id, "succeeded")
	spans := c.waitSpans(t, "the run after the restart", func(s []span) bool {
		return len(withAttr(named(s, "process work"), "wasmjobs.settle", "ack")) == 1
	})
	j := journey{t: t, spans: spans, work: "work", id: id}
	send := j.send(caller)
	p := j.one(withAttr(named(spans, "process work"), "wasmjobs.settle", "ack"), "process work after the restart")
	if p.Parent != "" || !p.linksTo(send.Trace, send.ID, "enqueue") {
		t.Errorf("the run after the restart is not a root linking to the send span %s/%s: %v", send.Trace, send.ID, p)
	}
}

// TestContextSurvivesReplay dead-letters a job, then replays it under a second
// caller's span: the new run links to the original send span and to the replay.
func TestContextSurvivesReplay(t *testing.T) {
	t.Parallel()
	srv := newStepServer(t, script("bury", "ack"))
	c, h, _ := tracedHost(t, "http/protobuf", []module{{"work", rig.steps, grant(srv)}})
	enqueuer, replayer := newCaller(t), newCaller(t)
	id := h.enqueue(jobJSON("work", srv.URL+"/step"), "traceparent", enqueuer.traceparent())
	h.waitState(id, "dead")
	if status, body := h.send("POST", "/v1/dead-letters/"+id+"/replay?queue=work", "", "traceparent", replayer.traceparent()); status != http.StatusOK {
		t.Fatalf("replay: %d %s", status, body)
	}
	h.waitState(id, "succeeded")
	spans := c.waitSpans(t, "the replayed run", func(s []span) bool {
		return len(withAttr(named(s, "process work"), "wasmjobs.settle", "ack")) == 1
	})
	j := journey{t: t, spans: spans, work: "work", id: id}
	send := j.send(enqueuer)
	procs := j.processes(send, []string{"1", "1"}, []string{"dead_letter", "ack"})
	// The replay's link names the replaying request's span: the caller's, or a span
	// the host made for the request under it.
	replay := replayer.ID
	for _, s := range spans {
		if s.Trace == replayer.Trace && s.Parent == replayer.ID {
			replay = s.ID
		}
	}
	if !procs[1].linksTo(replayer.Trace, replay, "replay") {
		t.Errorf("the replayed run does not link to the replay's span %s/%s (wasmjobs.link=replay): %v", replayer.Trace, replay, procs[1].Links)
	}
	if procs[0].linksTo(replayer.Trace, replay, "replay") {
		t.Errorf("the run before the replay links to it: %v", procs[0].Links)
	}
}

// TestContextSurvivesSwap replaces the module while its jobs wait: they run on the new
// version, each process span still linking to its job's send span.
func TestContextSurvivesSwap(t *testing.T) {
	t.Parallel()
	srv := newStepServer(t, script())
	c, h, cfg := tracedHost(t, "http/protobuf", []module{{"work", rig.steps, grant(srv) + "[rollout]\nstrategy = \"immediate\"\n"}})
	v1 := h.version("work")
	caller := newCaller(t)
	var ids []string
	for range 3 {
		ids = append(ids, h.enqueue(jobJSON("work", srv.URL+"/step", `"delay": "5s"`), "traceparent", caller.traceparent()))
	}
	modulesDir(cfg.modules).add(t, "work", rig.steps, "2", "")
	waitFor(t, "the new version", func() bool { return h.version("work") != v1 })
	v2 := h.version("work")
	if n := len(srv.received()); n != 0 {
		t.Fatalf("%d jobs ran before the swap: make their delay longer", n)
	}
	spans := c.waitSpans(t, "the jobs' runs", func(s []span) bool { return count("process work")(s) == len(ids) })
	for _, id := range ids {
		j := journey{t: t, spans: spans, work: "work", id: id}
		send := j.send(caller)
		p := j.processes(send, []string{"1"}, []string{"ack"})[0]
		if got := p.attr("wasmjobs.module.version"); got != v2 {
			t.Errorf("job %s ran on version %q, want the new %q (the old: %q)", id, got, v2, v1)
		}
	}
}

// version returns the version the module name serves, as /v1/modules lists it.
func (h *host) version(name string) string {
	h.t.Helper()
	var mods struct {
		Modules []struct{ Name, Version string }
	}
	h.get("/v1/modules", &mods)
	for _, m := range mods.Modules {
		if m.Name == name {
			return m.Version
		}
	}
	h.t.Fatalf("/v1/modules lacks %s: %+v", name, mods)
	return ""
}

// TestFailedRunIsError: a run that traps has the error status on its process and run
// spans, and is retried.
func TestFailedRunIsError(t *testing.T) {
	t.Parallel()
	srv := newStepServer(t, script("trap", "ack"))
	c, h, _ := tracedHost(t, "http/protobuf", []module{{"work", rig.steps, "backoff_base = \"10ms\"\n" + grant(srv)}})
	caller := newCaller(t)
	id := h.enqueue(jobJSON("work", srv.URL+"/step"), "traceparent", caller.traceparent())
	spans := c.waitSpans(t, "both runs", func(s []span) bool { return count("process work")(s) == 2 && count("run work")(s) == 2 })
	j := journey{t: t, spans: spans, work: "work", id: id}
	procs := j.processes(j.send(caller), []string{"1", "2"}, []string{"retry", "ack"})
	for i, want := range []ptrace.StatusCode{ptrace.StatusCodeError, ptrace.StatusCodeUnset} {
		run := j.childrenOf(procs[i], "run work")
		if procs[i].Status != want || len(run) != 1 || run[0].Status != want {
			t.Errorf("run %d: process span status %v, run spans %v; want status %v on both", i+1, procs[i].Status, run, want)
		}
	}
}

// TestTraceParentingChild: a queue whose manifest says trace_parenting = "child" runs
// its jobs as children of their send span, in the caller's trace.
func TestTraceParentingChild(t *testing.T) {
	t.Parallel()
	c, h, _ := tracedHost(t, "http/protobuf", []module{{"now", rig.ack, "trace_parenting = \"child\"\n"}})
	caller := newCaller(t)
	id := h.enqueue(jobJSON("now", ""), "traceparent", caller.traceparent())
	spans := c.waitSpans(t, "the run", func(s []span) bool { return count("process now")(s) == 1 })
	j := journey{t: t, spans: spans, work: "now", id: id}
	send := j.send(caller)
	p := j.one(named(spans, "process now"), "process now")
	if p.Trace != caller.Trace || p.Parent != send.ID {
		t.Errorf("process now is in trace %s under %q, want a child of the send span %s/%s", p.Trace, p.Parent, send.Trace, send.ID)
	}
}

// TestReservedHeadersRefused: a client cannot set the headers a job's trace context
// crosses the queue in, on a single job or in a batch.
func TestReservedHeadersRefused(t *testing.T) {
	t.Parallel()
	_, h, _ := tracedHost(t, "http/protobuf", []module{{"child", rig.ack, ""}})
	forged := `"00-` + guestTrace + `-b7ad6b7169203331-01"`
	for _, tc := range []struct{ name, path, body string }{
		{"traceparent", "/v1/jobs", `{"queue": "child", "headers": {"wasmjobs-traceparent": ` + forged + `}}`},
		{"tracestate", "/v1/jobs", `{"queue": "child", "headers": {"wasmjobs-tracestate": "k=v"}}`},
		{"replay traceparent", "/v1/jobs", `{"queue": "child", "headers": {"wasmjobs-replay-traceparent": ` + forged + `}}`},
		{"in a batch", "/v1/jobs/batch", `{"jobs": [{"queue": "child"}, {"queue": "child", "headers": {"wasmjobs-traceparent": ` + forged + `}}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := h.send("POST", tc.path, tc.body, "traceparent", newCaller(t).traceparent())
			if status != http.StatusBadRequest || !strings.Contains(body, "reserved") {
				t.Errorf("POST %s %s: %d %s, want 400 naming the reserved prefix", tc.path, tc.body, status, body)
			}
		})
	}
}

// TestCollectorDownOrHung: with the collector down (a port nobody listens on) or hung
// (a server that accepts and never answers), jobs run at the rate they run with
// tracing off, spans are dropped and counted, and SIGTERM drains within
// --drain-timeout (and server.CloseGrace). It runs alone (no t.Parallel), so that the
// rates compare.
//
// The rate's bound, 3x tracing off's time plus 2 s, is loose on purpose: it is there
// to catch a job that waits on the exporter, which costs the export timeout (10 s) or
// stalls the queue for good, not to measure what spans cost (wasmjobs bench does,
// without -race). Here, under -race on two shared cores, 1,000 jobs took 0.33-0.98 s
// with tracing off and 0.74-1.66 s traced, the same row differing by up to 2.2x
// between runs.
func TestCollectorDownOrHung(t *testing.T) {
	const jobs = 1000
	const drain = 3 * time.Second
	hung := hungServer(t)
	up := startCollector(t)
	var off time.Duration
	// The rows down and hung have an export queue of 512 spans, fewer than the run
	// makes (three a job), so that it fills whatever the exporter's retries do; the
	// row up has the default queue (2048) and must drop none.
	small := "OTEL_BSP_MAX_QUEUE_SIZE=512"
	for _, tc := range []struct {
		name string
		env  []string
	}{
		{"tracing off", nil},
		{"collector up", up.env("http/protobuf")},
		{"collector down", append(otlpEnv("http/protobuf", freePort(t)), small)},
		{"collector hung, OTLP/HTTP", append(otlpEnv("http/protobuf", hung), small)},
		{"collector hung, OTLP/gRPC", append(otlpEnv("grpc", hung), small)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := modulesDir(t.TempDir())
			dir.add(t, "fast", rig.ack, "1", "")
			// Info: the debug level logs every job.
			h := startHost(t, &hostConfig{modules: string(dir), env: tc.env, flags: []string{"--drain-timeout", drain.String(), "--log-level", "info"}})
			h.runBatch("fast", 100, newCaller(t)) // warm-up: the first jobs pay for the instances' start
			took := h.runBatch("fast", jobs, newCaller(t))
			if tc.env == nil {
				off = took
			} else if limit := 3*off + 2*time.Second; took > limit {
				t.Errorf("%d jobs took %v, with tracing off %v: past the bound of %v", jobs, took, off, limit)
			}
			dropped := h.metric("wasmjobs_trace_spans_dropped_total")
			if tc.name == "collector up" {
				if dropped != 0 {
					t.Errorf("wasmjobs_trace_spans_dropped_total = %v with the collector up, want 0", dropped)
				}
				// A batch request is one send span, with its count.
				spans := up.waitSpans(t, "the batches' send spans", func(s []span) bool { return count("send fast")(s) == 2 })
				for _, n := range []string{"100", fmt.Sprint(jobs)} {
					if len(withAttr(named(spans, "send fast"), "messaging.batch.message_count", n)) != 1 {
						t.Errorf("no span send fast with messaging.batch.message_count = %s:\n%s", n, dump(named(spans, "send fast")))
					}
				}
			} else if tc.env != nil && dropped <= 0 {
				t.Errorf("wasmjobs_trace_spans_dropped_total = %v, want > 0", dropped)
			}
			// The host's bound: Stop returns within the drain timeout and server.CloseGrace
			// (2 s), the export's flush included; and a second for the process' exit.
			stopped, err := h.signal(syscall.SIGTERM, 30*time.Second)
			if bound := drain + closeGrace + time.Second; err != nil || stopped > bound {
				t.Errorf("SIGTERM: exit %v after %v, want a clean exit within %v (the drain timeout, server.CloseGrace and a second)", err, stopped, bound)
			}
			t.Logf("%d jobs in %v (%.0f/s; tracing off: %v), %v spans dropped, exit %v after SIGTERM", jobs, took, jobs/took.Seconds(), off, dropped, stopped)
		})
	}
}

// runBatch enqueues n jobs into queue in one batch under caller's span and returns how
// long they took to ack, from the request to the last.
func (h *host) runBatch(queue string, n int, caller callerSpan) time.Duration {
	h.t.Helper()
	jobs := make([]map[string]string, n)
	for i := range jobs {
		jobs[i] = map[string]string{"queue": queue}
	}
	body, _ := json.Marshal(map[string]any{"jobs": jobs})
	series := fmt.Sprintf(`wasmjobs_jobs_total{module=%q,queue=%q,settle="ack"}`, queue, queue)
	want := max(h.metric(series), 0) + float64(n)
	start := time.Now()
	if status, answer := h.send("POST", "/v1/jobs/batch", string(body), "traceparent", caller.traceparent()); status != http.StatusAccepted {
		h.t.Fatalf("batch: %d %s", status, answer)
	}
	waitFor(h.t, fmt.Sprintf("%d jobs acked", n), func() bool { return h.metric(series) >= want })
	return time.Since(start)
}

// hungServer listens on a loopback port, accepts and never answers; it returns the
// port. The connections are closed at t's cleanup.
func hungServer(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return l.Addr().(*net.TCPAddr).Port
}

// brokerURL is the test broker's URL, WASMJOBS_AMQP_URL (scripts/rabbitmq.sh start):
// without it the test skips, and fails under CI=true.
func brokerURL(t *testing.T) string {
	t.Helper()
	url := os.Getenv("WASMJOBS_AMQP_URL")
	if url == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("WASMJOBS_AMQP_URL is not set: under CI the RabbitMQ tests must run (scripts/rabbitmq.sh start)")
		}
		t.Skip("WASMJOBS_AMQP_URL is not set (scripts/rabbitmq.sh start)")
	}
	return url
}

// uniqueSuffix returns a short random lower-case suffix for the queue names a test
// makes on a shared broker.
func uniqueSuffix(t *testing.T) string { return newCaller(t).ID[:8] }
