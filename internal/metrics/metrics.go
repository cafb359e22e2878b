// Package metrics turns the worker's job events and the registry's module events into
// Prometheus metrics for `wasmjobs run`.
package metrics

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/wasmjobs/wasmjobs/host"
	"github.com/wasmjobs/wasmjobs/worker"
)

// Metrics holds the host's metrics in a registry of its own.
type Metrics struct {
	reg          *prometheus.Registry
	jobs         *prometheus.CounterVec
	duration     *prometheus.HistogramVec
	inFlight     *prometheus.GaugeVec
	settleFailed *prometheus.CounterVec
	abandoned    *prometheus.CounterVec
	modules      *prometheus.CounterVec
}

// New returns the metrics, with the Go runtime and process collectors.
func New() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		jobs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wasmjobs_jobs_total",
			Help: "Jobs settled, by queue, module, module version and settle (ack, retry, defer, dead_letter).",
		}, []string{"queue", "module", "version", "outcome"}),
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
	}
	m.reg.MustRegister(m.jobs, m.duration, m.inFlight, m.settleFailed, m.abandoned, m.modules,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Observe implements worker.Observer.
func (m *Metrics) Observe(e worker.Event) {
	q := e.Job.Envelope.Queue
	switch e.Kind {
	case worker.EventStarted:
		m.inFlight.WithLabelValues(q).Inc()
	case worker.EventSettled:
		m.inFlight.WithLabelValues(q).Dec()
		m.jobs.WithLabelValues(q, e.Result.Handler, e.Result.Version, e.Settle.String()).Inc()
		m.duration.WithLabelValues(q, e.Result.Handler).Observe(e.Duration.Seconds())
	case worker.EventSettleFailed:
		m.inFlight.WithLabelValues(q).Dec()
		m.settleFailed.WithLabelValues(q).Inc()
	case worker.EventAbandoned:
		m.inFlight.WithLabelValues(q).Dec()
		m.abandoned.WithLabelValues(q).Inc()
	}
}

// ModuleEvent counts a registry event.
func (m *Metrics) ModuleEvent(ev host.RegistryEvent) {
	m.modules.WithLabelValues(ev.Module, ev.Kind).Inc()
}

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}
