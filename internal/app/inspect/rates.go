package inspect

import (
	"sync"
	"time"

	"github.com/wasmjobs/wasmjobs/worker"
)

// Defaults of Rates: RateBuckets buckets of RateBucket each, five minutes in all.
const (
	RateBucket  = 10 * time.Second
	RateBuckets = 30
)

// Rates counts, per queue, the jobs settled and the jobs that failed (a retry or a
// dead letter) in the last RateBuckets buckets of RateBucket: the throughput and
// failure rate the dashboard charts. It is a worker.Observer and costs one locked
// increment per settle. A nil *Rates counts nothing.
type Rates struct {
	mu     sync.Mutex
	now    func() time.Time
	queues map[string]*rateRing
}

type rateRing struct {
	slot [RateBuckets]struct {
		at             int64 // bucket number (Unix time / RateBucket)
		settled, fails int
	}
}

// NewRates returns empty rates; now is the clock (nil: time.Now).
func NewRates(now func() time.Time) *Rates {
	if now == nil {
		now = time.Now
	}
	return &Rates{now: now, queues: map[string]*rateRing{}}
}

// Observe implements worker.Observer.
func (r *Rates) Observe(e worker.Event) {
	if r == nil || e.Kind != worker.EventSettled || e.Job == nil {
		return
	}
	n := r.now().UnixNano() / int64(RateBucket)
	r.mu.Lock()
	defer r.mu.Unlock()
	q := r.queues[e.Job.Envelope.Queue]
	if q == nil {
		q = &rateRing{}
		r.queues[e.Job.Envelope.Queue] = q
	}
	s := &q.slot[n%RateBuckets]
	if s.at != n {
		s.at, s.settled, s.fails = n, 0, 0
	}
	s.settled++
	if e.Settle == worker.Retry || e.Settle == worker.DeadLetter {
		s.fails++
	}
}

// RateSeries is one queue's recent rates, oldest bucket first, the current (partial)
// bucket last.
type RateSeries struct {
	Queue string `json:"queue"`
	// BucketSeconds is the width of a bucket.
	BucketSeconds float64 `json:"bucket_seconds"`
	// Settled and Failed count the jobs settled (any way) and failed (retried or
	// dead-lettered) in each bucket.
	Settled []int `json:"settled"`
	Failed  []int `json:"failed"`
	// PerMinute is the settles per minute over the whole window; FailureRate the share
	// of them that failed (0 when none settled).
	PerMinute   float64 `json:"per_minute"`
	FailureRate float64 `json:"failure_rate"`
}

// Series returns queue's rates; a queue with no settles has a series of zeros.
func (r *Rates) Series(queue string) RateSeries {
	out := RateSeries{Queue: queue, BucketSeconds: RateBucket.Seconds(), Settled: make([]int, RateBuckets), Failed: make([]int, RateBuckets)}
	if r == nil {
		return out
	}
	n := r.now().UnixNano() / int64(RateBucket)
	r.mu.Lock()
	defer r.mu.Unlock()
	q := r.queues[queue]
	if q == nil {
		return out
	}
	total, fails := 0, 0
	for i := range RateBuckets {
		b := n - int64(RateBuckets-1-i)
		if s := q.slot[b%RateBuckets]; s.at == b {
			out.Settled[i], out.Failed[i] = s.settled, s.fails
			total, fails = total+s.settled, fails+s.fails
		}
	}
	out.PerMinute = float64(total) / (RateBuckets * RateBucket.Minutes())
	if total > 0 {
		out.FailureRate = float64(fails) / float64(total)
	}
	return out
}
