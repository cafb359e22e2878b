package metrics

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/memory"
	"github.com/wasmjobs/wasmjobs/host"
	"github.com/wasmjobs/wasmjobs/worker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// compare checks the named metrics of m against want, in the text format.
func compare(t *testing.T, m *Metrics, want string, names ...string) {
	t.Helper()
	if err := testutil.GatherAndCompare(m.reg, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
}

// infoHeader starts what compare expects of wasmjobs_module_info.
const infoHeader = `
# HELP wasmjobs_module_info 1 for the version each module serves now (role current) and the one on trial (role canary); a module that serves nothing has no series.
# TYPE wasmjobs_module_info gauge
`

// jobsHeader starts what compare expects of wasmjobs_jobs_in_flight.
const jobsHeader = `
# HELP wasmjobs_jobs_in_flight Jobs running now, by queue.
# TYPE wasmjobs_jobs_in_flight gauge
`

// totalHeader is what compare expects before the series of wasmjobs_jobs_total.
const totalHeader = `
# HELP wasmjobs_jobs_total Jobs settled, by queue, module and settle (ack, retry, defer, dead_letter, cancelled, wait).
# TYPE wasmjobs_jobs_total counter
`

// TestInFlightNeverNegativeOnARealWorker runs a worker on the memory backend with jobs
// that ack, dead-letter and cannot be decoded, and checks after every event that no
// queue's in-flight gauge is below zero, then that every counter is right.
func TestInFlightNeverNegativeOnARealWorker(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		m := New()
		var (
			mu       sync.Mutex
			negative []string
		)
		obs := worker.ObserverFunc(func(e worker.Event) {
			m.Observe(e)
			if v := testutil.ToFloat64(m.inFlight.WithLabelValues(e.Job.Envelope.Queue)); v < 0 {
				mu.Lock()
				negative = append(negative, fmt.Sprintf("in flight %v after %s of job %s", v, e.Kind, e.Job.Envelope.ID))
				mu.Unlock()
			}
		})
		b := memory.New(memory.Config{})
		defer b.Close(context.Background())
		w := worker.New(b, worker.Config{Observer: obs, Jitter: func(c time.Duration) time.Duration { return c }})
		h := worker.HandlerFunc(func(ctx context.Context, j *worker.Job) worker.Result {
			res := worker.Result{Handler: "work", Version: "v1", Outcome: worker.Ack}
			if string(j.Envelope.Payload) == "bad" {
				res.Outcome, res.Reason = worker.DeadLetter, "bad payload"
			}
			return res
		})
		ctx := context.Background()
		if err := w.Register(ctx, worker.Queue{Name: "q", Handler: h}); err != nil {
			t.Fatal(err)
		}
		if err := w.Start(ctx); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{"ok", "ok", "bad"} {
			if err := b.Publish(ctx, backend.NewEnvelope("q", []byte(p)), 0); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.InjectMalformed(ctx, "q", []byte("garbage"), "no message id"); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if err := w.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(negative) > 0 {
			t.Errorf("the in-flight gauge went negative:\n%s", strings.Join(negative, "\n"))
		}
		compare(t, m, jobsHeader+`wasmjobs_jobs_in_flight{queue="q"} 0`+totalHeader+`wasmjobs_jobs_total{module="",queue="q",settle="dead_letter"} 1
wasmjobs_jobs_total{module="work",queue="q",settle="ack"} 2
wasmjobs_jobs_total{module="work",queue="q",settle="dead_letter"} 1
`, "wasmjobs_jobs_in_flight", "wasmjobs_jobs_total")
		if n := testutil.CollectAndCount(m.duration); n != 2 {
			t.Errorf("duration series = %d, want 2 (module work and the undecodable message's)", n)
		}
	})
}

// TestEveryEndingEventCounts feeds each way a job can end after it started: each
// leaves nothing in flight and counts once where it belongs.
func TestEveryEndingEventCounts(t *testing.T) {
	t.Parallel()
	job := &worker.Job{Envelope: backend.NewEnvelope("q", nil)}
	res := worker.Result{Handler: "work", Version: "v1"}
	m := New()
	for _, end := range []worker.Event{
		{Kind: worker.EventSettled, Settle: worker.Ack},
		{Kind: worker.EventSettled, Settle: worker.Retry},
		{Kind: worker.EventSettled, Settle: worker.Defer},
		{Kind: worker.EventSettled, Settle: worker.DeadLetter},
		{Kind: worker.EventSettled, Settle: worker.Wait},
		{Kind: worker.EventSettleFailed, Settle: worker.Ack, Err: errors.New("connection lost")},
		{Kind: worker.EventAbandoned, Settle: worker.Ack},
	} {
		m.Observe(worker.Event{Kind: worker.EventStarted, Job: job})
		if got := testutil.ToFloat64(m.inFlight.WithLabelValues("q")); got != 1 {
			t.Fatalf("in flight after started = %v, want 1", got)
		}
		end.Job, end.Result, end.Duration = job, res, time.Millisecond
		m.Observe(end)
	}
	compare(t, m, jobsHeader+`wasmjobs_jobs_in_flight{queue="q"} 0`+totalHeader+`wasmjobs_jobs_total{module="work",queue="q",settle="ack"} 1
wasmjobs_jobs_total{module="work",queue="q",settle="dead_letter"} 1
wasmjobs_jobs_total{module="work",queue="q",settle="defer"} 1
wasmjobs_jobs_total{module="work",queue="q",settle="retry"} 1
wasmjobs_jobs_total{module="work",queue="q",settle="wait"} 1
# HELP wasmjobs_settle_failures_total Settles that failed (the backend delivers those jobs again), by queue.
# TYPE wasmjobs_settle_failures_total counter
wasmjobs_settle_failures_total{queue="q"} 1
# HELP wasmjobs_jobs_abandoned_total Jobs left unacknowledged when the drain timeout ran out, by queue.
# TYPE wasmjobs_jobs_abandoned_total counter
wasmjobs_jobs_abandoned_total{queue="q"} 1
`, "wasmjobs_jobs_in_flight", "wasmjobs_jobs_total", "wasmjobs_settle_failures_total", "wasmjobs_jobs_abandoned_total")
	if n := testutil.CollectAndCount(m.duration); n != 1 {
		t.Errorf("duration series = %d, want 1", n)
	}
}

// TestVersionsLiveOnTheInfoMetric swaps a module through many versions: the job
// counters keep one series per queue, module and settle, and wasmjobs_module_info
// shows only what serves now.
func TestVersionsLiveOnTheInfoMetric(t *testing.T) {
	t.Parallel()
	m := New()
	event := func(kind, module, version string) {
		m.ModuleEvent(host.RegistryEvent{Kind: kind, Module: module, Version: version, At: time.Now()})
	}
	event("loaded", "work", "v0")
	event("loaded", "mail", "m0")
	event("rejected", "broken", "") // never served: no series
	for i := range 50 {
		v := fmt.Sprintf("v%d", i)
		event("swapped", "work", v)
		job := &worker.Job{Envelope: backend.NewEnvelope("q", nil)}
		m.Observe(worker.Event{Kind: worker.EventStarted, Job: job})
		m.Observe(worker.Event{Kind: worker.EventSettled, Job: job, Result: worker.Result{Handler: "work", Version: v}, Settle: worker.Ack})
	}
	event("rejected", "work", "v49") // a bad new version: v49 still serves
	compare(t, m, infoHeader+`wasmjobs_module_info{module="mail",role="current",version="m0"} 1
wasmjobs_module_info{module="work",role="current",version="v49"} 1
`, "wasmjobs_module_info")
	compare(t, m, totalHeader+`wasmjobs_jobs_total{module="work",queue="q",settle="ack"} 50
`, "wasmjobs_jobs_total")

	event("removed", "work", "")
	compare(t, m, infoHeader+`wasmjobs_module_info{module="mail",role="current",version="m0"} 1
`, "wasmjobs_module_info")
	event("rejected", "mail", "") // nothing of mail serves any more
	event("loaded", "work", "w1")
	compare(t, m, infoHeader+`wasmjobs_module_info{module="work",role="current",version="w1"} 1
`, "wasmjobs_module_info")
	compare(t, m, `
# HELP wasmjobs_module_events_total Module loads, swaps, removals and rejections, by module and kind.
# TYPE wasmjobs_module_events_total counter
wasmjobs_module_events_total{kind="loaded",module="mail"} 1
wasmjobs_module_events_total{kind="loaded",module="work"} 2
wasmjobs_module_events_total{kind="rejected",module="broken"} 1
wasmjobs_module_events_total{kind="rejected",module="mail"} 1
wasmjobs_module_events_total{kind="rejected",module="work"} 1
wasmjobs_module_events_total{kind="removed",module="work"} 1
wasmjobs_module_events_total{kind="swapped",module="work"} 50
`, "wasmjobs_module_events_total")
}

// TestCanaryMetrics: while a canary runs, jobs count by role on
// wasmjobs_canary_jobs_total, and its end is a rollout event by kind.
func TestCanaryMetrics(t *testing.T) {
	t.Parallel()
	m := New()
	m.ModuleEvent(workLoaded)
	m.ModuleEvent(workCanary("v2"))
	for i, role := range []string{host.RoleCurrent, host.RoleCanary, host.RoleCanary} {
		job := &worker.Job{Envelope: backend.NewEnvelope("q", nil)}
		settle := worker.Ack
		if i == 2 {
			settle = worker.Retry
		}
		m.Observe(worker.Event{Kind: worker.EventStarted, Job: job})
		m.Observe(worker.Event{Kind: worker.EventSettled, Job: job, Result: worker.Result{Handler: "work", Role: role}, Settle: settle})
	}
	compare(t, m, `
# HELP wasmjobs_canary_jobs_total Jobs settled while a module's canary ran, by queue, module, role (current, canary) and settle.
# TYPE wasmjobs_canary_jobs_total counter
wasmjobs_canary_jobs_total{module="work",queue="q",role="canary",settle="ack"} 1
wasmjobs_canary_jobs_total{module="work",queue="q",role="canary",settle="retry"} 1
wasmjobs_canary_jobs_total{module="work",queue="q",role="current",settle="ack"} 1
`, "wasmjobs_canary_jobs_total")
	for _, ev := range []host.RegistryEvent{workRolledBack("v2"), workCanary("v3"), workPromoted("v3")} {
		m.ModuleEvent(ev)
	}
	compare(t, m, `
# HELP wasmjobs_rollout_events_total Rollout events, by module and kind (canary, promoted, rolled_back, superseded, pinned).
# TYPE wasmjobs_rollout_events_total counter
wasmjobs_rollout_events_total{kind="canary",module="work"} 2
wasmjobs_rollout_events_total{kind="promoted",module="work"} 1
wasmjobs_rollout_events_total{kind="rolled_back",module="work"} 1
`, "wasmjobs_rollout_events_total")
}

// The rollout events of the module work, whose version v1 serves.
var (
	workLoaded = host.RegistryEvent{Kind: "loaded", Module: "work", Version: "v1"}
	workPinned = host.RegistryEvent{Kind: "pinned", Module: "work", Version: "v1"}
)

func workCanary(v string) host.RegistryEvent {
	return host.RegistryEvent{Kind: "canary", Module: "work", Version: "v1", Canary: v}
}

func workRolledBack(v string) host.RegistryEvent {
	return host.RegistryEvent{Kind: "rolled_back", Module: "work", Version: "v1", Canary: v}
}

func workPromoted(v string) host.RegistryEvent {
	return host.RegistryEvent{Kind: "promoted", Module: "work", Version: v, Canary: v}
}

// TestCanaryInfoSeries: while a canary runs its version has an info series of role
// canary; its end leaves only the version serving; and a canary's verdict recorded
// after a newer canary started (it ended by itself while the read that started the
// newer one ran) leaves the newer canary's info series alone.
func TestCanaryInfoSeries(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		events []host.RegistryEvent
		want   string // wasmjobs_module_info's series
	}{
		{"under way", []host.RegistryEvent{workLoaded, workCanary("v2")},
			`wasmjobs_module_info{module="work",role="canary",version="v2"} 1
wasmjobs_module_info{module="work",role="current",version="v1"} 1
`},
		{"rolled back", []host.RegistryEvent{workLoaded, workCanary("v2"), workRolledBack("v2")},
			`wasmjobs_module_info{module="work",role="current",version="v1"} 1
`},
		{"promoted", []host.RegistryEvent{workLoaded, workCanary("v2"), workRolledBack("v2"), workCanary("v3"), workPromoted("v3")},
			`wasmjobs_module_info{module="work",role="current",version="v3"} 1
`},
		{"a late verdict keeps the newer canary", []host.RegistryEvent{workLoaded, workCanary("v2"), workCanary("v3"), workRolledBack("v2"), workPinned},
			`wasmjobs_module_info{module="work",role="canary",version="v3"} 1
wasmjobs_module_info{module="work",role="current",version="v1"} 1
`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := New()
			for _, ev := range tc.events {
				m.ModuleEvent(ev)
			}
			compare(t, m, infoHeader+tc.want, "wasmjobs_module_info")
		})
	}
}

// TestQueueJobsAreCountedAtEachScrape: wasmjobs_queue_jobs serves what the count gives
// at each scrape, one series per queue and state it counted.
func TestQueueJobsAreCountedAtEachScrape(t *testing.T) {
	t.Parallel()
	m := New()
	waiting := 3
	m.CountQueues(func() []QueueDepth {
		return []QueueDepth{{Queue: "q", Counts: map[string]int{"pending": 1, "waiting": waiting}}}
	})
	const header = `
# HELP wasmjobs_queue_jobs Jobs of each served queue by state, read from the backend at each scrape: pending, unacked, delayed, deferred, dead, key_waiting (waiting for their concurrency key), waiting (for other jobs to end). A state the backend cannot count has no series.
# TYPE wasmjobs_queue_jobs gauge
`
	compare(t, m, header+`wasmjobs_queue_jobs{queue="q",state="pending"} 1
wasmjobs_queue_jobs{queue="q",state="waiting"} 3
`, "wasmjobs_queue_jobs")
	waiting = 0
	compare(t, m, header+`wasmjobs_queue_jobs{queue="q",state="pending"} 1
wasmjobs_queue_jobs{queue="q",state="waiting"} 0
`, "wasmjobs_queue_jobs")
}
