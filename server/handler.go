package server

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"time"

	"github.com/wasmjobs/wasmjobs/internal/telemetry"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/host"
	"github.com/wasmjobs/wasmjobs/internal/app/api"
	"github.com/wasmjobs/wasmjobs/internal/app/inspect"
	"github.com/wasmjobs/wasmjobs/internal/app/metrics"
	"github.com/wasmjobs/wasmjobs/internal/app/ui"
	"github.com/wasmjobs/wasmjobs/worker"
)

// operator is what the API and the dashboard keep of the host's jobs beside the
// backend: rates, module versions and, on a backend without job records, the host's
// memory of its recent jobs. The worker's observer feeds it.
type operator struct {
	rates    *inspect.Rates
	versions *ui.Versions
	// recs is nil on a backend with job records (pebble): it answers GET
	// /v1/jobs/{id} itself, after a restart too.
	recs *inspect.Records
}

func newOperator(b backend.Backend, history int) *operator {
	return &operator{rates: inspect.NewRates(nil), versions: ui.NewVersions(), recs: inspect.RecordsFor(b, history)}
}

// observer is the worker's observer: the records first (when there are any), so that
// a job's state is there before the metrics and the log report it.
func (op *operator) observer(met *metrics.Metrics, log *slog.Logger) worker.Observer {
	return worker.Observers(op.recs, met, op.rates, worker.LogObserver(log))
}

// newInspector builds the one inspector behind the API, the dashboard and Enqueue: the
// same answers and the same rules whichever way in.
// queueDepths counts the served queues' jobs for a scrape of /metrics, within 2 s:
// the counts a backend cannot tell (-1) and those of a queue whose count failed are
// left out.
func (s *Server) queueDepths() []metrics.QueueDepth {
	ctx, cancel := context.WithTimeout(s.runCtx, 2*time.Second)
	defer cancel()
	var out []metrics.QueueDepth
	for _, q := range s.insp.Queues(ctx) {
		if q.QueueStats == nil {
			continue
		}
		st := q.QueueStats
		counts := map[string]int{}
		for state, n := range map[string]int{"pending": st.Pending, "unacked": st.Unacked, "delayed": st.Delayed, "deferred": st.Deferred,
			"dead": st.Dead, "key_waiting": st.KeyWaiting, "waiting": st.Waiting} {
			if n >= 0 {
				counts[state] = n
			}
		}
		out = append(out, metrics.QueueDepth{Queue: q.Name, Counts: counts})
	}
	return out
}

func (s *Server) newInspector() *inspect.Inspector {
	return inspect.New(inspect.Config{
		Backend: s.b, Registry: s.reg, Running: s.w.Running, Records: s.ops.recs, Rates: s.ops.rates,
		Schedules: s.sched.List, RefusedPushes: s.refusedPushes, Refusal: s.refusal, Logger: s.log,
		CancelRunning: s.w.Cancel, Tracer: telemetry.Tracer(s.cfg.TracerProvider),
	})
}

// newHandler builds the API and the dashboard on the inspector and mounts them as one
// handler: the dashboard under /ui/, GET / redirecting to it, the API at the rest.
func (s *Server) newHandler() http.Handler {
	cfg := s.cfg
	// One limit of wrong tokens for the API and the dashboard: both take the token.
	authLimit := inspect.NewAuthLimiter()
	apiHandler := api.New(api.Config{
		Inspector: s.insp, Metrics: s.met.Handler(),
		Token: cfg.Token, AuthLimiter: authLimit, Ready: s.ready, Logger: s.log,
		Healthy:  s.failed,
		Loopback: cfg.Loopback, BackupDir: cfg.BackupDir,
	})
	name := cfg.BackendName
	if isRabbitMQ(s.b) {
		name = "RabbitMQ " + name
	}
	dash := ui.New(ui.Config{
		Inspector: s.insp, Versions: s.ops.versions,
		Token: cfg.Token, AuthLimiter: authLimit, Loopback: cfg.Loopback, Logger: s.log,
		Validate: uploadValidator(s.checkEngine), TraceURL: cfg.TraceURL,
		Host: ui.HostInfo{Backend: name, DataDir: dataDir(s.b), Concurrency: cfg.Concurrency, Started: time.Now(), Version: cfg.Version},
	})
	root := http.NewServeMux()
	root.Handle("/ui/", dash)
	root.Handle("GET /{$}", http.RedirectHandler("/ui/", http.StatusSeeOther))
	root.Handle("/", apiHandler)
	return root
}

// uploadValidator checks an uploaded module on e: compiled and its exports and imports
// checked with a neutral manifest (no env, no dirs, default limits), none of its code
// run (host.Engine.Check), one upload at a time.
func uploadValidator(e *host.Engine) func(ctx context.Context, name string, wasm []byte) (string, error) {
	sem := make(chan struct{}, 1)
	return func(ctx context.Context, name string, wasm []byte) (string, error) {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return "", fmt.Errorf("waiting for another upload's check: %w", ctx.Err())
		}
		defer func() { <-sem }()
		return e.Check(ctx, filepath.Base(name), wasm)
	}
}
