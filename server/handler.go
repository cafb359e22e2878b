package server

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/host"
	"github.com/wasmjobs/wasmjobs/internal/api"
	"github.com/wasmjobs/wasmjobs/internal/metrics"
	"github.com/wasmjobs/wasmjobs/internal/ui"
	"github.com/wasmjobs/wasmjobs/worker"
)

// operator is what the API and the dashboard keep of the host's jobs beside the
// backend: rates, recent attempts, module versions and, on a backend without job
// records, the history of recent jobs. The worker's observer feeds it.
type operator struct {
	rates    *api.Rates
	attempts *api.Attempts
	versions *ui.Versions
	// hist is nil on a backend with job records (pebble): it answers GET
	// /v1/jobs/{id} itself, after a restart too.
	hist *api.History
}

func newOperator(b backend.Backend, history int) *operator {
	op := &operator{rates: api.NewRates(nil), attempts: api.NewAttempts(history), versions: ui.NewVersions()}
	if _, records := b.(backend.JobRecordReader); !records {
		op.hist = api.NewHistory(history)
	}
	return op
}

// observer is the worker's observer: the history first (when there is one), so that a
// job's state is there before the metrics and the log report it.
func (op *operator) observer(met *metrics.Metrics, log *slog.Logger) worker.Observer {
	if op.hist != nil {
		return worker.Observers(op.hist, met, op.rates, op.attempts, worker.LogObserver(log))
	}
	return worker.Observers(met, op.rates, op.attempts, worker.LogObserver(log))
}

// newHandler builds the API and the dashboard on the host's parts and mounts them as
// one handler: the dashboard under /ui/, GET / redirecting to it, the API at the rest.
func (s *Server) newHandler() http.Handler {
	op, cfg := s.ops, s.cfg
	// One limit of wrong tokens for the API and the dashboard: both take the token.
	authLimit := api.NewAuthLimiter()
	apiHandler := api.New(api.Config{
		Backend: s.b, Registry: s.reg, Running: s.w.Running, History: op.hist, Attempts: op.attempts, Metrics: s.met.Handler(), Rates: op.rates,
		Schedules: s.sched.List, RefusedPushes: s.refusedPushes,
		Token: cfg.Token, AuthLimiter: authLimit, Ready: s.ready, Accepting: s.accepting, Logger: s.log,
		Healthy:  s.failed,
		Loopback: cfg.Loopback, BackupDir: cfg.BackupDir,
	})
	name := cfg.BackendName
	if isRabbitMQ(s.b) {
		name = "RabbitMQ " + name
	}
	dash := ui.New(ui.Config{
		Backend: s.b, Registry: s.reg, Running: s.w.Running, History: op.hist, Rates: op.rates, Attempts: op.attempts, Versions: op.versions,
		Schedules: s.sched.List, Token: cfg.Token, AuthLimiter: authLimit, Loopback: cfg.Loopback, Accepting: s.accepting, Logger: s.log,
		Validate: uploadValidator(s.checkEngine),
		Host:     ui.HostInfo{Backend: name, DataDir: dataDir(s.b), Concurrency: cfg.Concurrency, Started: time.Now(), Version: cfg.Version},
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
