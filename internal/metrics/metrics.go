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

	mu      sync.Mutex        // guards serving, so a module's info series changes in one step
	serving map[string]string // module -> version of its wasmjobs_module_info series
}

// New returns the metrics, with the Go runtime and process collectors.
func New() *Metrics {
	m := &Metrics{
		reg:     prometheus.NewRegistry(),
		serving: make(map[string]string),
		jobs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wasmjobs_jobs_total",
			Help: "Jobs settled, by queue, module and settle (ack, retry, defer, dead_letter).",
		}, []string{"queue", "module", "settle"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "wasmjobs_job_duration_seconds",
			Help:    "How long handlers ran, by queue and module.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"queue", "module"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "wasmjobs_jobs_in_flight",
			Help: "Jobs running now, by queue.",
		}, []string{"queue"}),
		settleFailed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wasmjobs_settle_failures_total",
			Help: "Settles that failed (the backend delivers those jobs again), by queue.",
		}, []string{"queue"}),
		abandoned: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wasmjobs_jobs_abandoned_total",
			Help: "Jobs left unacknowledged when the drain timeout ran out, by queue.",
		}, []string{"queue"}),
		modules: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wasmjobs_module_events_total",
			Help: "Module loads, swaps, removals and rejections, by module and kind.",
		}, []string{"module", "kind"}),
		moduleInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "wasmjobs_module_info",
			Help: "1 for the version each module serves now (the sha256 of its bytes); a module that serves nothing has no series.",
		}, []string{"module", "version"}),
	}
	m.reg.MustRegister(m.jobs, m.duration, m.inFlight, m.settleFailed, m.abandoned, m.modules, m.moduleInfo,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
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
		m.duration.WithLabelValues(q, e.Result.Handler).Observe(e.Duration.Seconds())
	case worker.EventSettleFailed:
		m.inFlight.WithLabelValues(q).Dec()
		m.settleFailed.WithLabelValues(q).Inc()
	case worker.EventAbandoned:
		m.inFlight.WithLabelValues(q).Dec()
		m.abandoned.WithLabelValues(q).Inc()
	}
}

// ModuleEvent counts a registry event and keeps wasmjobs_module_info on the version
// that serves: a load or swap replaces the module's series with the new version's, a
// removal deletes it, and a rejection keeps the version that still serves (the event's
// Version), deleting the series when none does.
func (m *Metrics) ModuleEvent(ev host.RegistryEvent) {
	m.modules.WithLabelValues(ev.Module, ev.Kind).Inc()
	now := ev.Version
	if ev.Kind == "removed" {
		now = ""
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	was := m.serving[ev.Module]
	if was == now {
		return
	}
	if now != "" {
		m.moduleInfo.WithLabelValues(ev.Module, now).Set(1)
		m.serving[ev.Module] = now
	} else {
		delete(m.serving, ev.Module)
	}
	if was != "" {
		m.moduleInfo.DeleteLabelValues(ev.Module, was)
	}
}

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}
