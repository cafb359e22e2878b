// Package metrics turns the worker's job events and the registry's module events into
// Prometheus metrics for `wasmjobs run`.
package metrics

import (
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/wasmjobs/wasmjobs/host"
	"github.com/wasmjobs/wasmjobs/worker"
)

// Metrics holds the host's metrics in a registry of its own.
//
// Every label takes a bounded set of values (queues, modules, settles, event kinds), so
// the number of series does not grow with time. A module's version, which changes at
// every swap, is not a label of the job metrics: it is on wasmjobs_module_info, one
// series per serving module, whose series of a replaced version is deleted.
type Metrics struct {
	reg          *prometheus.Registry
	jobs         *prometheus.CounterVec
	duration     *prometheus.HistogramVec
	inFlight     *prometheus.GaugeVec
	settleFailed *prometheus.CounterVec
	abandoned    *prometheus.CounterVec
	modules      *prometheus.CounterVec
	moduleInfo   *prometheus.GaugeVec
	canaryJobs   *prometheus.CounterVec
	rollouts     *prometheus.CounterVec
	httpCalls    *prometheus.CounterVec
	httpDuration *prometheus.HistogramVec

	mu      sync.Mutex        // guards serving and trial, so a module's info series change in one step
	serving map[string]string // module -> version of its wasmjobs_module_info series, role current
	trial   map[string]string // module -> version of its canary's series, role canary
}

// New returns the metrics, with the Go runtime and process collectors.
func New() *Metrics {
	m := &Metrics{
		reg:     prometheus.NewRegistry(),
		serving: make(map[string]string),
		trial:   make(map[string]string),
		jobs:    counter("wasmjobs_jobs_total", "Jobs settled, by queue, module and settle (ack, retry, defer, dead_letter, cancelled, wait).", "queue", "module", "settle"),
		duration: histogram("wasmjobs_job_duration_seconds", "How long handlers ran, by queue and module.",
			[]float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}, "queue", "module"),
		inFlight:     gauge("wasmjobs_jobs_in_flight", "Jobs running now, by queue.", "queue"),
		settleFailed: counter("wasmjobs_settle_failures_total", "Settles that failed (the backend delivers those jobs again), by queue.", "queue"),
		abandoned:    counter("wasmjobs_jobs_abandoned_total", "Jobs left unacknowledged when the drain timeout ran out, by queue.", "queue"),
		modules:      counter("wasmjobs_module_events_total", "Module loads, swaps, removals and rejections, by module and kind.", "module", "kind"),
		moduleInfo:   gauge("wasmjobs_module_info", "1 for the version each module serves now (role current) and the one on trial (role canary); a module that serves nothing has no series.", "module", "version", "role"),
		canaryJobs:   counter("wasmjobs_canary_jobs_total", "Jobs settled while a module's canary ran, by queue, module, role (current, canary) and settle.", "queue", "module", "role", "settle"),
		rollouts:     counter("wasmjobs_rollout_events_total", "Rollout events, by module and kind (canary, promoted, rolled_back, superseded, pinned).", "module", "kind"),
		// grant is the matching [http] allow entry, not the URL, so that a module's
		// series are bounded by its manifest; a denied URL's grant is "".
		httpCalls: counter("wasmjobs_http_requests_total", "Modules' outbound HTTP requests, by module, grant (the matching allow entry; \"\" when denied) and outcome (2xx, 3xx, 4xx, 5xx, or the failure: denied, blocked, dns, refused, tls, timeout, too_large, rate_limited, circuit_open, connection, too_many_redirects, cancelled).", "module", "grant", "outcome"),
		httpDuration: histogram("wasmjobs_http_request_duration_seconds", "How long modules' outbound HTTP requests took, start to the end of the body read (or the failure, or the close), by module and grant.",
			[]float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}, "module", "grant"),
	}
	m.reg.MustRegister(m.jobs, m.duration, m.inFlight, m.settleFailed, m.abandoned, m.modules, m.moduleInfo, m.canaryJobs, m.rollouts,
		m.httpCalls, m.httpDuration,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// counter, gauge and histogram make the metric vectors of New: a name, its help, its
// labels (and a histogram's buckets), the one table of what /metrics serves.
func counter(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}

func gauge(name, help string, labels ...string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
}

func histogram(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
}

// Observe implements worker.Observer. It counts a job in flight from its EventStarted
// to the event that ends it, which the worker always reports after it.
func (m *Metrics) Observe(e worker.Event) {
	q := e.Job.Envelope.Queue
	switch e.Kind {
	case worker.EventStarted:
		m.inFlight.WithLabelValues(q).Inc()
	case worker.EventSettled:
		m.inFlight.WithLabelValues(q).Dec()
		m.jobs.WithLabelValues(q, e.Result.Handler, e.Settle.String()).Inc()
		if e.Result.Role != "" {
			m.canaryJobs.WithLabelValues(q, e.Result.Handler, e.Result.Role, e.Settle.String()).Inc()
		}
		m.duration.WithLabelValues(q, e.Result.Handler).Observe(e.Duration.Seconds())
	case worker.EventSettleFailed:
		m.inFlight.WithLabelValues(q).Dec()
		m.settleFailed.WithLabelValues(q).Inc()
	case worker.EventAbandoned:
		m.inFlight.WithLabelValues(q).Dec()
		m.abandoned.WithLabelValues(q).Inc()
	}
}

// HTTPCall counts a module's outbound HTTP request; it is host.Config.OnHTTPCall.
func (m *Metrics) HTTPCall(c host.HTTPCall) {
	m.httpCalls.WithLabelValues(c.Module, c.Grant, c.Outcome).Inc()
	m.httpDuration.WithLabelValues(c.Module, c.Grant).Observe(c.Duration.Seconds())
}

// ModuleEvent counts a registry event and keeps wasmjobs_module_info on the version
// that serves: a load or swap replaces the module's series with the new version's, a
// removal deletes it, and a rejection keeps the version that still serves (the event's
// Version), deleting the series when none does.
//
// Rollout events (a canary started or ended, an operator's rollback) are counted on
// wasmjobs_rollout_events_total instead, and keep the canary's info series: a canary's
// version has one (role canary) from its start to its end.
func (m *Metrics) ModuleEvent(ev host.RegistryEvent) {
	now, trial := ev.Version, ""
	switch ev.Kind {
	case "loaded", "swapped", "removed", "rejected":
		m.modules.WithLabelValues(ev.Module, ev.Kind).Inc()
	default:
		m.rollouts.WithLabelValues(ev.Module, ev.Kind).Inc()
	}
	switch ev.Kind {
	case "removed":
		now = ""
	case "canary":
		trial = ev.Canary
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	switch ev.Kind {
	case "rejected", "pinned":
		// Neither starts nor ends a canary.
	case host.VerdictPromoted, host.VerdictRolledBack, host.VerdictSuperseded:
		// The end of that canary only: a verdict recorded late must not delete the
		// series of a newer canary started since.
		if m.trial[ev.Module] == ev.Canary {
			m.set(m.trial, ev.Module, "", host.RoleCanary)
		}
	default:
		m.set(m.trial, ev.Module, trial, host.RoleCanary)
	}
	m.set(m.serving, ev.Module, now, host.RoleCurrent)
}

// set replaces the module's info series of role, kept in versions, with one of version
// now ("" deletes it). Called with mu held.
func (m *Metrics) set(versions map[string]string, module, now, role string) {
	was := versions[module]
	if was == now {
		return
	}
	if now != "" {
		m.moduleInfo.WithLabelValues(module, now, role).Set(1)
		versions[module] = now
	} else {
		delete(versions, module)
	}
	if was != "" {
		m.moduleInfo.DeleteLabelValues(module, was, role)
	}
}

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// TraceDropped exposes the spans the tracer provider dropped, as
// wasmjobs_trace_spans_dropped_total: the queue full (a collector down or slow), a
// failed export, a shutdown out of time. dropped reads the provider's count.
func (m *Metrics) TraceDropped(dropped func() uint64) {
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "wasmjobs_trace_spans_dropped_total",
		Help: "Trace spans dropped rather than exported: the export queue full (the collector down or slow), an export that failed, or a shutdown that ran out of time.",
	}, func() float64 { return float64(dropped()) }))
}
