package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/wasmjobs/wasmjobs/backend"
)

var (
	storeBytesDesc = prometheus.NewDesc("wasmjobs_store_bytes",
		"Size on disk of each of the backend's tables (indexes included), read at each scrape.", []string{"table"}, nil)
	storeRecordsDesc = prometheus.NewDesc("wasmjobs_store_job_records",
		"Finished jobs' records the backend keeps, read at each scrape.", nil, nil)
	storeKeysDesc = prometheus.NewDesc("wasmjobs_store_unique_keys",
		"Unique keys the backend keeps, held or ended and not yet pruned, read at each scrape.", nil, nil)
	storePrunedDesc = prometheus.NewDesc("wasmjobs_store_pruned_total",
		"Records and unique keys this host's backend pruned since it started.", nil, nil)
)

// storeCollector serves the wasmjobs_store_* metrics from a read taken at each scrape.
type storeCollector struct {
	read func() (backend.StoreStats, bool)
}

func (c storeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- storeBytesDesc
	ch <- storeRecordsDesc
	ch <- storeKeysDesc
	ch <- storePrunedDesc
}

func (c storeCollector) Collect(ch chan<- prometheus.Metric) {
	st, ok := c.read()
	if !ok {
		return // the store did not answer in time: no series rather than wrong ones
	}
	for table, n := range st.Bytes {
		ch <- prometheus.MustNewConstMetric(storeBytesDesc, prometheus.GaugeValue, float64(n), table)
	}
	ch <- prometheus.MustNewConstMetric(storeRecordsDesc, prometheus.GaugeValue, float64(st.Records))
	ch <- prometheus.MustNewConstMetric(storeKeysDesc, prometheus.GaugeValue, float64(st.UniqueKeys))
	ch <- prometheus.MustNewConstMetric(storePrunedDesc, prometheus.CounterValue, float64(st.Pruned))
}

// ReadStore makes /metrics serve the wasmjobs_store_* metrics, calling read at each
// scrape (it should bound its own time, and report false when it failed). Call it once,
// for a backend.StoreReporter.
func (m *Metrics) ReadStore(read func() (backend.StoreStats, bool)) {
	m.reg.MustRegister(storeCollector{read})
}
