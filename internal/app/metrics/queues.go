package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// QueueDepth is one queue's jobs by state, as a scrape reads them: a state the backend
// cannot count is left out.
type QueueDepth struct {
	Queue  string
	Counts map[string]int
}

var queueJobsDesc = prometheus.NewDesc("wasmjobs_queue_jobs",
	"Jobs of each served queue by state, read from the backend at each scrape: pending, unacked, delayed, deferred, dead, key_waiting (waiting for their concurrency key), waiting (for other jobs to end). A state the backend cannot count has no series.",
	[]string{"queue", "state"}, nil)

// queueCollector serves wasmjobs_queue_jobs from a count taken at each scrape.
type queueCollector struct{ count func() []QueueDepth }

func (c queueCollector) Describe(ch chan<- *prometheus.Desc) { ch <- queueJobsDesc }

func (c queueCollector) Collect(ch chan<- prometheus.Metric) {
	for _, q := range c.count() {
		for state, n := range q.Counts {
			ch <- prometheus.MustNewConstMetric(queueJobsDesc, prometheus.GaugeValue, float64(n), q.Queue, state)
		}
	}
}

// CountQueues makes /metrics serve wasmjobs_queue_jobs, calling count at each scrape
// (it should bound its own time: a scrape waits for it). Call it once.
func (m *Metrics) CountQueues(count func() []QueueDepth) {
	m.reg.MustRegister(queueCollector{count})
}
