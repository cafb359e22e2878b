// Package measure holds what the two benchmarks, wasmjobs bench and the River peer,
// measure with, so that their figures come from the same code: the process's resident
// memory and a loopback HTTP server that answers after a delay. It also holds the
// peer's result, which the peer prints and the benchmark report reads back, so the two
// agree on its fields. It imports nothing but the standard library, as the peer's
// module builds it without the host's dependencies.
package measure

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"
)

// SlowServer starts a loopback HTTP server that answers every request 200 "ok" after
// delay, and returns its URL and a function that stops it.
func SlowServer(delay time.Duration) (url string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("the benchmark's HTTP server: %w", err)
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			t := time.NewTimer(delay)
			defer t.Stop()
			select {
			case <-t.C:
				w.Write([]byte("ok"))
			case <-r.Context().Done():
			}
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go srv.Serve(ln)
	return "http://" + ln.Addr().String() + "/", func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	}, nil
}

// ResetPeakRSS returns what it can of the heap to the OS and resets the process's
// resident high-water mark to its current resident set, so that the mark read at the
// end is this run's peak. It reports whether the mark could be reset (Linux only).
func ResetPeakRSS() bool {
	debug.FreeOSMemory()
	// "5" resets the peak RSS (proc(5), since Linux 4.0).
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
}

// StatusMB reads a figure in kB of /proc/self/status, such as "VmRSS:" (the resident
// set) or "VmHWM:" (its high-water mark), in MB; 0 where there is none.
func StatusMB(field string) float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			if kb, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB"))); err == nil {
				return float64(kb) / 1024
			}
		}
	}
	return 0
}

// RiverResult is one run's figures of the River peer: what it prints, as a line or
// with --json, and what the report reads back from that JSON.
type RiverResult struct {
	Shape         string  `json:"shape"` // "-n 200000" or "--duration 30s"
	RiverVersion  string  `json:"river_version"`
	Postgres      string  `json:"postgres_version"`
	MaxWorkers    int     `json:"max_workers"`
	InsertMethod  string  `json:"insert_method"`
	JobsInserted  int64   `json:"jobs_inserted"`
	JobsWorked    int64   `json:"jobs_worked"`
	Seconds       float64 `json:"seconds"`
	JobsPerSec    float64 `json:"jobs_per_sec"`
	ClientCPUS    float64 `json:"client_cpu_s"`
	PostgresCPUS  float64 `json:"postgres_cpu_s"`
	MachineCPUS   float64 `json:"machine_cpu_s"`
	PostgresShare float64 `json:"postgres_cpu_share"` // of client + Postgres
	// JobsPerCPUS is jobs worked per CPU second of client and Postgres together: on a
	// machine shared with other work it says what River would do with the cores to itself
	// better than jobs/s does.
	JobsPerCPUS float64 `json:"jobs_per_cpu_s"`
	// P50Ms and P99Ms are percentiles of each job's time from its insert to its
	// completion coming out of the subscription; with -n that includes the wait behind
	// the whole backlog, as wasmjobs' bench --insert-first does.
	P50Ms float64 `json:"p50_ms"`
	P99Ms float64 `json:"p99_ms"`
	// PeakRSSMB is the peer process's resident high-water mark, reset at the client's start
	// (Linux); Postgres's memory is not in it. RSSPerJobKB is its growth over the run
	// per worker (MaxWorkers).
	PeakRSSMB   float64 `json:"peak_rss_mb"`
	RSSPerJobKB float64 `json:"rss_per_job_kb"`
	// HTTPDelayMs is the peer's --http-delay, zero for the no-op worker.
	HTTPDelayMs float64 `json:"http_delay_ms"`
}

// Line is the result as one line of figures.
func (r RiverResult) Line() string {
	s := fmt.Sprintf("river %s on Postgres %s, %s: %d jobs worked (%d inserted) in %.2f s: %.0f jobs/s",
		r.RiverVersion, r.Postgres, r.Shape, r.JobsWorked, r.JobsInserted, r.Seconds, r.JobsPerSec)
	if r.ClientCPUS+r.PostgresCPUS > 0 {
		s += fmt.Sprintf("; CPU s: client %.1f, postgres %.1f (%.0f%% of the two), machine %.1f; %.0f jobs per CPU s of the two",
			r.ClientCPUS, r.PostgresCPUS, 100*r.PostgresShare, r.MachineCPUS, r.JobsPerCPUS)
	}
	if r.HTTPDelayMs > 0 {
		s += fmt.Sprintf("; one GET a job (server answers after %.0f ms), %d workers: insert to completion p50 %.1f ms, p99 %.1f ms; peak RSS %.0f MB, %.0f KB per worker",
			r.HTTPDelayMs, r.MaxWorkers, r.P50Ms, r.P99Ms, r.PeakRSSMB, r.RSSPerJobKB)
	}
	return s
}
