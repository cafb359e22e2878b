package main

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/memory"
	"github.com/wasmjobs/wasmjobs/backend/pebble"
	"github.com/wasmjobs/wasmjobs/backend/rabbitmq"
	"github.com/wasmjobs/wasmjobs/host"
	"github.com/wasmjobs/wasmjobs/internal/api"
	"github.com/wasmjobs/wasmjobs/internal/fleet"
	"github.com/wasmjobs/wasmjobs/internal/inspect"
	"github.com/wasmjobs/wasmjobs/internal/metrics"
	"github.com/wasmjobs/wasmjobs/internal/outbound"
	"github.com/wasmjobs/wasmjobs/internal/ui"
	"github.com/wasmjobs/wasmjobs/worker"
)

type runFlags struct {
	modules      string
	backend      string
	concurrency  int
	listen       string
	drainTimeout time.Duration
	logFormat    string
	logLevel     string
	token        string
	history      int
	dataDir      string
	recordsMax   int
	recordsAge   time.Duration
	backupDir    string
	queueType    string
	tlsCert      string
	tlsKey       string
	insecureHTTP bool
	httpCA       string

	// The modules stream of a RabbitMQ fleet (internal/fleet).
	moduleStream    string
	trustKey        string
	hostID          string
	moduleHeartbeat time.Duration
	republishEvery  time.Duration

	// open opens the backend; nil means openBackend. Tests give a backend of theirs.
	open func(context.Context, backendSpec, *slog.Logger) (backend.Backend, error)
}

// envDefaults is the environment variable of each flag that has one.
var envDefaults = map[string]string{
	"modules": "WASMJOBS_MODULES", "backend": "WASMJOBS_BACKEND", "concurrency": "WASMJOBS_CONCURRENCY",
	"listen": "WASMJOBS_LISTEN", "drain-timeout": "WASMJOBS_DRAIN_TIMEOUT", "log-format": "WASMJOBS_LOG_FORMAT",
	"log-level": "WASMJOBS_LOG_LEVEL", "token": "WASMJOBS_TOKEN", "history": "WASMJOBS_HISTORY",
	"server": "WASMJOBS_SERVER", "data-dir": "WASMJOBS_DATA_DIR", "records-max": "WASMJOBS_RECORDS_MAX",
	"records-max-age": "WASMJOBS_RECORDS_MAX_AGE", "backup-dir": "WASMJOBS_BACKUP_DIR",
	"queue-type": "WASMJOBS_QUEUE_TYPE",
	"tls-cert":   "WASMJOBS_TLS_CERT", "tls-key": "WASMJOBS_TLS_KEY", "http-ca": "WASMJOBS_HTTP_CA",
	"module-stream": "WASMJOBS_MODULE_STREAM", "trust-key": "WASMJOBS_TRUST_KEY", "host-id": "WASMJOBS_HOST_ID",
}

// applyEnv sets every flag of cmd that was not given on the command line from its
// environment variable, if set.
func applyEnv(cmd *cobra.Command) error {
	var err error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		name, ok := envDefaults[f.Name]
		if !ok || f.Changed || err != nil {
			return
		}
		if v, set := os.LookupEnv(name); set {
			if e := f.Value.Set(v); e != nil {
				err = usagef("%s=%q: %v", name, v, e)
			}
		}
	})
	return err
}

func newRunCommand(g *globals) *cobra.Command {
	f := &runFlags{}
	cmd := &cobra.Command{
		Use:   "run --modules DIR",
		Short: "Serve jobs with the handler modules of a directory",
		Long: `run consumes jobs and runs each one in the WebAssembly module that serves its queue.

Every NAME.wasm in --modules serves the queue NAME (or the queue its manifest NAME.toml
names). The directory is watched: drop in, replace or remove a module and the running
host follows, without a restart and without failing a job. A version that does not load
is rejected and the previous one keeps serving.

The HTTP API (--listen) takes jobs (POST /v1/jobs), reports them (GET /v1/jobs/{id}),
queues, modules and dead letters, and serves Prometheus metrics on /metrics.

Jobs are kept in --data-dir (./wasmjobs-data by default) by the embedded pebble backend:
queued, delayed and dead-lettered jobs and job records survive a stop or a crash, and
the log says at start how many jobs were found waiting. One run owns a directory at a
time. --backend memory keeps nothing across a stop; --backend amqp://... shares queues
between hosts through RabbitMQ.

The [[schedule]]s of the modules' manifests enqueue a job per tick: on pebble this host
fires them and keeps the last fired tick of each in --data-dir; on RabbitMQ one host with
schedules leads at a time and the others take over when it stops or dies ('wasmjobs
schedules list' shows which). The drain stops them first.

SIGINT or SIGTERM drains: the API still answers reads and, on a durable backend, still
accepts jobs (kept for the next start; the memory backend refuses them), no new jobs
are taken, running jobs finish and settle, up to --drain-timeout; then unfinished jobs
are left unacknowledged for the backend to deliver again, and run exits within 2 s,
whatever the broker does. A second signal stops at once.

Every flag can also be set with its environment variable (WASMJOBS_MODULES, ...).`,
		Example: `  wasmjobs run --modules ./modules
  wasmjobs run --modules ./modules --data-dir /var/lib/wasmjobs
  wasmjobs run --modules ./modules --concurrency 32 --log-format json
  WASMJOBS_TOKEN=s3cret wasmjobs run --modules ./modules --listen 0.0.0.0:8080`,
		Args: argsBetween(0, 0),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := applyEnv(cmd); err != nil {
				return err
			}
			if err := pebbleOnlyFlags(cmd, f.backend); err != nil {
				return err
			}
			if err := checkQueueType(cmd, f.backend, f.queueType); err != nil {
				return err
			}
			return f.run(cmd.Context(), g, cmd.ErrOrStderr())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.modules, "modules", "", "the modules directory (required; env WASMJOBS_MODULES)")
	fl.StringVar(&f.backend, "backend", "pebble", "pebble (durable, in --data-dir), memory (nothing survives a stop), or RabbitMQ: amqp://user:pass@host:5672/vhost, or the comma-separated URLs of a cluster's nodes (env WASMJOBS_BACKEND)")
	fl.StringVar(&f.queueType, "queue-type", string(rabbitmq.Classic), "RabbitMQ queues: classic (priorities, one node) or quorum (replicated over a cluster, no priorities) (env WASMJOBS_QUEUE_TYPE)")
	fl.StringVar(&f.dataDir, "data-dir", defaultDataDir, "the pebble backend's data directory, owned by one run at a time (env WASMJOBS_DATA_DIR)")
	fl.IntVar(&f.recordsMax, "records-max", pebble.DefaultRecordMaxCount, "finished job records the pebble backend keeps for GET /v1/jobs/{id}, the newest; 0 keeps none (env WASMJOBS_RECORDS_MAX)")
	fl.DurationVar(&f.recordsAge, "records-max-age", pebble.DefaultRecordMaxAge, "how long the pebble backend keeps a finished job's record; 0 keeps them regardless of age (env WASMJOBS_RECORDS_MAX_AGE)")
	fl.StringVar(&f.backupDir, "backup-dir", "", "the directory `wasmjobs backup NAME` writes backups into (made 0700 if missing); empty turns backups off (env WASMJOBS_BACKUP_DIR)")
	fl.IntVar(&f.concurrency, "concurrency", worker.DefaultConcurrency, "jobs running at once over all queues (env WASMJOBS_CONCURRENCY)")
	fl.StringVar(&f.listen, "listen", "127.0.0.1:8080", "address of the HTTP API; beyond loopback it needs --token (env WASMJOBS_LISTEN)")
	fl.DurationVar(&f.drainTimeout, "drain-timeout", 30*time.Second, "how long a shutdown waits for running jobs (env WASMJOBS_DRAIN_TIMEOUT)")
	fl.StringVar(&f.logFormat, "log-format", "text", "text or json (env WASMJOBS_LOG_FORMAT)")
	fl.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error; debug logs every job (env WASMJOBS_LOG_LEVEL)")
	fl.StringVar(&f.token, "token", "", "bearer token the API requires (env WASMJOBS_TOKEN)")
	fl.StringVar(&f.tlsCert, "tls-cert", "", "PEM certificate: serve the API and the dashboard over TLS (with --tls-key; env WASMJOBS_TLS_CERT)")
	fl.StringVar(&f.tlsKey, "tls-key", "", "PEM private key of --tls-cert (env WASMJOBS_TLS_KEY)")
	fl.StringVar(&f.httpCA, "http-ca", "", "PEM file of CA certificates that modules' outbound HTTPS ([http] grants) trusts besides the system's: an internal CA, a test server's certificate (env WASMJOBS_HTTP_CA)")
	fl.BoolVar(&f.insecureHTTP, "insecure-http", false, "serve plain HTTP beyond loopback: the token then crosses the network in clear")
	fl.IntVar(&f.history, "history", api.DefaultHistory, "recent jobs whose state GET /v1/jobs/{id} reports on the memory and RabbitMQ backends, and whose attempts the dashboard lists (env WASMJOBS_HISTORY)")
	fl.StringVar(&f.moduleStream, "module-stream", fleet.DefaultStream, "on a RabbitMQ --backend: the stream of pushed modules (`wasmjobs modules push`) this host follows and writes into --modules; empty follows none (env WASMJOBS_MODULE_STREAM)")
	fl.StringVar(&f.trustKey, "trust-key", "", "take only module pushes signed by this ed25519 public key (from `wasmjobs modules keygen`); others are refused and listed in /v1/modules (env WASMJOBS_TRUST_KEY)")
	fl.StringVar(&f.hostID, "host-id", "", "this host's name in its heartbeats on the modules stream, which `wasmjobs modules list --backend` shows (default: hostname-pid; env WASMJOBS_HOST_ID)")
	fl.DurationVar(&f.moduleHeartbeat, "module-heartbeat", fleet.DefaultHeartbeat, "how often this host reports its serving versions on the modules stream")
	fl.DurationVar(&f.republishEvery, "republish-every", fleet.DefaultRepublish, "re-publish a pushed module whose newest copy in the stream is older than this, so retention never drops it")
	return cmd
}

// pebbleOnlyFlags refuses the pebble backend's flags given on the command line with
// another backend: they would be ignored, and a --data-dir that keeps nothing is a
// surprise found only after a restart. Their environment variables are not refused:
// an environment is often shared by hosts of several backends.
func pebbleOnlyFlags(cmd *cobra.Command, spec string) error {
	if spec == "pebble" {
		return nil
	}
	for _, name := range []string{"data-dir", "records-max", "records-max-age", "backup-dir"} {
		if cmd.Flags().Changed(name) {
			return usagef("--%s is for --backend pebble; --backend %s keeps no data directory", name, redact(spec))
		}
	}
	return nil
}

// checkQueueType refuses an unknown --queue-type, and one given on the command line with
// a backend other than RabbitMQ (its environment variable is not refused, as with the
// pebble flags).
func checkQueueType(cmd *cobra.Command, spec, queueType string) error {
	if _, err := rabbitmq.ParseQueueType(queueType); err != nil {
		return usagef("--queue-type: %v", err)
	}
	if cmd.Flags().Changed("queue-type") && !isAMQP(spec) {
		return usagef("--queue-type is for a RabbitMQ --backend (amqp://...), not %q", redact(spec))
	}
	return nil
}

// newLogger makes the slog logger of --log-format and --log-level.
func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, usagef("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, usagef("--log-format %q: want text or json", format)
}

// isLoopback reports whether a listen address stays on this machine.
func isLoopback(addr string) bool {
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// isAMQP reports whether a --backend value names a RabbitMQ broker.
func isAMQP(spec string) bool {
	return strings.HasPrefix(spec, "amqp://") || strings.HasPrefix(spec, "amqps://")
}

// defaultDataDir is where the pebble backend keeps its data when --data-dir is not
// given: in the working directory, like Prometheus' data/ and etcd's default.etcd.
const defaultDataDir = "wasmjobs-data"

// backendSpec is what openBackend needs: --backend and, for pebble, the data directory
// and the records' retention, for RabbitMQ the queue type.
type backendSpec struct {
	spec      string
	dataDir   string
	records   pebble.RecordConfig
	queueType rabbitmq.QueueType
}

// amqpURLs splits a --backend of several comma-separated node URLs. It splits only
// before a scheme, so a comma inside a URL (a password's) stays in it.
func amqpURLs(spec string) []string {
	var urls []string
	for rest := spec; rest != ""; {
		next := len(rest)
		for _, scheme := range []string{",amqp://", ",amqps://"} {
			if i := strings.Index(rest, scheme); i >= 0 && i < next {
				next = i
			}
		}
		if u := strings.TrimSpace(rest[:next]); u != "" {
			urls = append(urls, u)
		}
		rest = strings.TrimPrefix(rest[next:], ",")
	}
	return urls
}

// openBackend opens the backend of --backend. A pebble directory in use or damaged is
// refused with the directory, and the file and problem, named.
func openBackend(ctx context.Context, bs backendSpec, log *slog.Logger) (backend.Backend, error) {
	switch {
	case bs.spec == "memory":
		return memory.New(memory.Config{Logger: log}), nil
	case bs.spec == "pebble":
		if bs.dataDir == "" {
			return nil, usagef("--data-dir is empty: the pebble backend needs a data directory")
		}
		b, err := pebble.Open(ctx, pebble.Config{Dir: bs.dataDir, Logger: log, Records: bs.records})
		switch {
		case errors.Is(err, pebble.ErrLocked):
			return nil, fmt.Errorf("--data-dir %s: %w; another `wasmjobs run` owns it: stop that one, or give this one another --data-dir", bs.dataDir, err)
		case errors.Is(err, pebble.ErrCorrupt):
			return nil, fmt.Errorf("--data-dir %s: refusing to start on a damaged store: %w; restore a backup (see `wasmjobs backup`) or move the directory aside", bs.dataDir, err)
		case err != nil:
			return nil, fmt.Errorf("--data-dir %s: %w", bs.dataDir, err)
		}
		rec := b.Recovered()
		log.Info("data directory opened", "data_dir", b.Dir(), "waiting", rec.Ready, "delayed", rec.Delayed,
			"dead_letters", rec.Dead, "queues", rec.Queues, "took", rec.Took.Round(time.Millisecond))
		return b, nil
	case isAMQP(bs.spec):
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		return rabbitmq.Open(ctx, rabbitmq.Config{URLs: amqpURLs(bs.spec), QueueType: bs.queueType, Logger: log})
	}
	return nil, usagef("--backend %q: want pebble, memory or an amqp:// URL", bs.spec)
}

// redact hides the password of a --backend value for messages.
func redact(spec string) string {
	if isAMQP(spec) {
		urls := amqpURLs(spec)
		for i, u := range urls {
			urls[i] = rabbitmq.Redact(u)
		}
		return strings.Join(urls, ",")
	}
	return spec
}

// recordConfig maps the records flags onto the pebble backend's configuration, where
// zero means its default: here 0 keeps no record (--records-max) or keeps them
// regardless of age (--records-max-age).
func (f *runFlags) recordConfig() pebble.RecordConfig {
	rc := pebble.RecordConfig{MaxCount: f.recordsMax, MaxAge: f.recordsAge}
	if rc.MaxCount == 0 {
		rc.MaxCount = -1
	}
	if rc.MaxAge == 0 {
		rc.MaxAge = -1
	}
	return rc
}

// checkBackupDir checks --backup-dir and makes it (0700) if missing; it returns it
// absolute, or "" when backups are off. Backups exist only on the pebble backend and
// never go inside the data directory (a restore moves that directory aside).
func (f *runFlags) checkBackupDir() (string, error) {
	if f.backupDir == "" || f.backend != "pebble" { // given on the command line, refused before
		return "", nil
	}
	dir, err := filepath.Abs(f.backupDir)
	if err != nil {
		return "", usagef("--backup-dir %s: %v", f.backupDir, err)
	}
	data, err := filepath.Abs(f.dataDir)
	if err != nil {
		return "", usagef("--data-dir %s: %v", f.dataDir, err)
	}
	if rel, err := filepath.Rel(data, dir); err == nil && filepath.IsLocal(rel) || dir == data {
		return "", usagef("--backup-dir %s is inside --data-dir %s: put backups beside it, not in it", dir, data)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("--backup-dir %s: %w", dir, err)
	}
	return dir, nil
}

// closeGrace is what run gives, past the drain timeout, to closing the API, the backend
// and the engine: run exits within --drain-timeout plus this, whatever the broker does.
const closeGrace = 2 * time.Second

// backendCloseSlice is the part of closeGrace kept for closing the backend (flushing
// the pebble store), after the API's shutdown has had the rest.
const backendCloseSlice = time.Second

func (f *runFlags) run(ctx context.Context, g *globals, stderr io.Writer) error {
	// The first signal drains; a second one stops at once.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	return f.serve(ctx, g, stderr, sigs, func() { os.Exit(exitFailure) })
}

// serve is run with its signals and its hard exit given: the first signal (or ctx's
// end) drains, a second one calls exit. Everything it opens it closes on every path,
// in one deferred cleanup, bounded by the drain's deadline plus closeGrace.
func (f *runFlags) serve(ctx context.Context, g *globals, stderr io.Writer, sigs <-chan os.Signal, exit func()) (err error) {
	if f.modules == "" {
		return usagef("--modules is required: the directory of handler modules")
	}
	if fi, err := os.Stat(f.modules); err != nil || !fi.IsDir() {
		return usagef("--modules %s: not a directory", f.modules)
	}
	if f.concurrency < 1 {
		return usagef("--concurrency %d: want 1 or more", f.concurrency)
	}
	if f.drainTimeout <= 0 {
		return usagef("--drain-timeout %v: want a positive duration", f.drainTimeout)
	}
	if f.recordsMax < 0 || f.recordsAge < 0 {
		return usagef("--records-max %d, --records-max-age %v: want 0 or more", f.recordsMax, f.recordsAge)
	}
	backupDir, err := f.checkBackupDir()
	if err != nil {
		return err
	}
	if !isLoopback(f.listen) && f.token == "" {
		return usagef("--listen %s is beyond loopback: set --token (or WASMJOBS_TOKEN) so that the API is not open", f.listen)
	}
	if (f.tlsCert == "") != (f.tlsKey == "") {
		return usagef("--tls-cert and --tls-key go together: give both, or neither")
	}
	if !isLoopback(f.listen) && f.tlsCert == "" && !f.insecureHTTP {
		return usagef("--listen %s is beyond loopback: give --tls-cert and --tls-key so that the token does not cross the network in clear, or --insecure-http to serve plain HTTP all the same", f.listen)
	}
	httpRoots, err := httpRootsFrom(f.httpCA)
	if err != nil {
		return err
	}
	log, err := newLogger(stderr, f.logFormat, f.logLevel)
	if err != nil {
		return err
	}

	// One cleanup path: each step pushes what undoes it, and every return runs them in
	// reverse, each bounded by closeCtx's deadline.
	var cleanups []func(ctx context.Context)
	var finalDeadline time.Time // set when the drain starts: its deadline plus closeGrace
	served := false
	defer func() {
		if finalDeadline.IsZero() {
			finalDeadline = time.Now().Add(closeGrace)
		}
		closeCtx, cancel := context.WithDeadline(context.Background(), finalDeadline)
		defer cancel()
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i](closeCtx)
		}
		if served {
			log.Info("wasmjobs stopped")
		}
	}()

	// From the first signal the host is draining: Ready reports false at once, so the
	// API refuses new jobs, and runCtx ends. The goroutine ends with serve.
	var started, draining atomic.Bool
	runCtx, cancel := context.WithCancel(ctx)
	exited := make(chan struct{})
	cleanups = append(cleanups, func(context.Context) { close(exited); cancel() })
	go func() {
		select {
		case s := <-sigs:
			draining.Store(true)
			log.Info("draining: no new jobs are taken", "signal", s.String(), "drain_timeout", f.drainTimeout)
			cancel()
		case <-runCtx.Done():
			draining.Store(true)
		case <-exited:
			return
		}
		select {
		case s := <-sigs:
			log.Warn("second signal: stopping at once; running jobs go back to the backend only if it is durable", "signal", s.String())
			exit()
		case <-exited:
		}
	}()

	// The backend first: a second run on a data directory in use is most often a second
	// run with the same flags, and its error must name the directory, not the port.
	open := f.open
	if open == nil {
		open = openBackend
	}
	b, err := open(runCtx, backendSpec{spec: f.backend, dataDir: f.dataDir, records: f.recordConfig(), queueType: rabbitmq.QueueType(f.queueType)}, log)
	if err != nil {
		if runCtx.Err() != nil { // a signal during the connection: nothing served yet
			log.Info("wasmjobs stopped before it served")
			return nil
		}
		return err
	}
	cleanups = append(cleanups, func(ctx context.Context) {
		if err := b.Close(ctx); err != nil {
			log.Warn("closing the backend", "error", err)
		}
	})
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", f.listen, err)
	}
	cleanups = append(cleanups, func(context.Context) { ln.Close() })
	met := metrics.New()
	e, err := host.NewEngine(runCtx, host.Config{CacheDir: g.cacheDir, Logger: log, HTTP: outbound.Options{RootCAs: httpRoots, IdleConnsPerHost: f.concurrency}, OnHTTPCall: met.HTTPCall})
	if err != nil {
		return err
	}
	cleanups = append(cleanups, func(ctx context.Context) { e.Close(ctx) })

	rates := inspect.NewRates(nil)
	versions := ui.NewVersions()
	// A backend with job records (pebble) answers GET /v1/jobs/{id} itself, after a
	// restart too; the others get the host's memory of its recent jobs (nil for none).
	recs := inspect.RecordsFor(b, f.history)
	obs := worker.Observers(recs, met, rates, worker.LogObserver(log))
	w := worker.New(b, worker.Config{
		Concurrency: f.concurrency,
		Observer:    obs,
		Logger:      log,
	})
	schedKick := make(chan struct{}, 1) // a module changed: read the schedules again
	onEvent := func(ev host.RegistryEvent) {
		met.ModuleEvent(ev)
		versions.Record(ev)
		select {
		case schedKick <- struct{}{}:
		default:
		}
	}
	reg, err := host.NewRegistry(host.RegistryConfig{Dir: f.modules, Engine: e, Queues: w, Logger: log, OnEvent: onEvent,
		HistoryDir: moduleHistoryDir(b, g.cacheDir, f.modules)})
	if err != nil {
		return usagef("%v", err)
	}
	// On an early return: stop following the directory, stop the worker (nothing runs
	// yet, so at once), retire the modules. On the drain path these ran already.
	cleanups = append(cleanups, func(ctx context.Context) {
		reg.Close()
		w.Stop(ctx)
		reg.Retire()
	})

	// A fleet's pushed modules are written into the directory before the registry's
	// first read, so that the host serves what the fleet serves from its start.
	var refused func() []fleet.Refusal
	if isAMQP(f.backend) && f.moduleStream != "" {
		fl, err := f.followModules(runCtx, log, reg)
		if err != nil {
			if runCtx.Err() != nil {
				log.Info("wasmjobs stopped before it served")
				return nil
			}
			return err
		}
		cleanups = append(cleanups, func(ctx context.Context) { fl.Close(ctx) })
		refused = fl.Refused
	}

	if err := reg.Start(runCtx); err != nil {
		return err
	}
	if err := w.Start(runCtx); err != nil {
		if runCtx.Err() != nil {
			log.Info("wasmjobs stopped before it served")
			return nil
		}
		return err
	}
	// The modules' [[schedule]]s fire from now until the drain starts (runCtx ends).
	sched := newScheduler(b, recs, log)
	stopSchedules := startSchedules(runCtx, sched, reg, schedKick)
	cleanups = append(cleanups, func(context.Context) { stopSchedules() })
	// The memory backend drops at exit what is queued, so it takes jobs only until the
	// drain; a durable one (pebble, RabbitMQ) keeps them for the next start, and takes
	// them through the drain for as long as the API answers.
	accepting := func() bool { return started.Load() && !draining.Load() }
	if _, isMemory := b.(*memory.Backend); !isMemory {
		accepting = started.Load
	}
	// A backend whose store can break for good (pebble after a failed log write)
	// reports it through Err: the host then stops calling itself ready or healthy,
	// drains and exits with the error, rather than answering 503 to every enqueue and
	// failing every settle for ever while it says 200.
	var storeErr atomic.Pointer[error]
	healthStop, healthDone := make(chan struct{}), make(chan struct{})
	cleanups = append(cleanups, func(context.Context) { close(healthStop); <-healthDone })
	go func() {
		defer close(healthDone)
		hr, ok := b.(errReporter)
		if !ok {
			return
		}
		t := time.NewTicker(healthEvery)
		defer t.Stop()
		for {
			select {
			case <-healthStop:
				return
			case <-t.C:
			}
			if err := hr.Err(); err != nil {
				storeErr.Store(&err)
				log.Error("the backend's store failed: draining and exiting; restart the host (it reopens the store from disk)", "error", err)
				cancel()
				return
			}
		}
	}()
	failed := func() error {
		if p := storeErr.Load(); p != nil {
			return *p
		}
		return nil
	}
	loopback := isLoopback(ln.Addr().String())
	// One limit of wrong tokens for the API and the dashboard: both take the token.
	authLimit := inspect.NewAuthLimiter()
	// One inspector behind the API and the dashboard: the same answers, the same rules.
	in := inspect.New(inspect.Config{
		Backend: b, Registry: reg, Running: w.Running, Records: recs, Rates: rates,
		Schedules: sched.List, RefusedPushes: func() any {
			if refused == nil {
				return nil
			}
			return refused()
		},
		Accepting: accepting, Logger: log,
	})
	apiHandler := api.New(api.Config{
		Inspector: in, Metrics: met.Handler(),
		Token: f.token, AuthLimiter: authLimit, Ready: func() bool { return started.Load() && !draining.Load() && failed() == nil }, Logger: log,
		Healthy:  failed,
		Loopback: loopback, BackupDir: backupDir,
	})
	dataDir := ""
	if pb, ok := b.(*pebble.Backend); ok {
		dataDir = pb.Dir()
	}
	// Uploads are untrusted: they are checked on an engine of their own, without the
	// on-disk compilation cache (an upload must not fill the cache directory).
	checkEngine, err := host.NewEngine(runCtx, host.Config{NoCache: true, Logger: log})
	if err != nil {
		return fmt.Errorf("the upload checker's engine: %w", err)
	}
	cleanups = append(cleanups, func(ctx context.Context) { checkEngine.Close(ctx) })
	dash := ui.New(ui.Config{
		Inspector: in, Versions: versions,
		Token: f.token, AuthLimiter: authLimit, Loopback: loopback, Logger: log,
		Validate: uploadValidator(checkEngine),
		Host:     ui.HostInfo{Backend: backendName(f.backend), DataDir: dataDir, Concurrency: f.concurrency, Started: time.Now(), Version: versionString()},
	})
	root := http.NewServeMux()
	root.Handle("/ui/", dash)
	root.Handle("GET /{$}", http.RedirectHandler("/ui/", http.StatusSeeOther))
	root.Handle("/", apiHandler)
	srv := &http.Server{
		Handler:           root,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	serveErr := make(chan error, 1)
	scheme := "http"
	if f.tlsCert != "" {
		scheme = "https"
		go func() { serveErr <- srv.ServeTLS(ln, f.tlsCert, f.tlsKey) }()
	} else {
		go func() { serveErr <- srv.Serve(ln) }()
	}
	cleanups = append(cleanups, func(ctx context.Context) {
		// Reads go on until the drain ends; then the API closes within what is left,
		// less backendCloseSlice: the backend, closed after it, gets its own time to
		// write out its state rather than a context that a slow client let expire.
		if dl, ok := ctx.Deadline(); ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, dl.Add(-backendCloseSlice))
			defer cancel()
		}
		if err := srv.Shutdown(ctx); err != nil {
			srv.Close()
		}
		<-serveErr
	})
	started.Store(true)
	served = true
	mods := reg.Modules()
	serving := 0
	for _, m := range mods {
		if m.Status == "serving" {
			serving++
		}
	}
	log.Info("wasmjobs serving", "api", scheme+"://"+ln.Addr().String(), "dashboard", scheme+"://"+ln.Addr().String()+"/ui/", "modules", f.modules,
		"serving", serving, "rejected", len(mods)-serving, "backend", redact(f.backend), "concurrency", f.concurrency)

	select {
	case <-runCtx.Done():
	case err := <-serveErr:
		serveErr <- err // for the cleanup
		log.Error("the HTTP API stopped", "error", err)
		cancel()
	}

	// Drain. The API already refuses new jobs (Ready is false since the signal) and
	// keeps answering reads until the cleanup. Stop following the directory, stop
	// taking jobs, let running jobs finish and settle until the drain deadline; settles
	// under way end with it.
	draining.Store(true)
	drainDeadline := time.Now().Add(f.drainTimeout)
	finalDeadline = drainDeadline.Add(closeGrace)
	reg.Close()
	drainCtx, cancelDrain := context.WithDeadline(context.Background(), drainDeadline)
	defer cancelDrain()
	stopErr := w.Stop(drainCtx)
	reg.Retire()
	if stopErr != nil {
		log.Warn("drain timeout: unfinished jobs left unacknowledged", "error", stopErr)
	} else {
		running := 0
		for _, n := range w.Running() {
			running += n
		}
		log.Info("drained: every running job finished and settled", "running", running)
	}
	// Say what becomes of the jobs still queued: the memory backend drops them, the
	// pebble backend keeps them for the next start.
	_, isMemory := b.(*memory.Backend)
	pb, isPebble := b.(*pebble.Backend)
	if sr, ok := b.(backend.StatsReader); ok && (isMemory || isPebble) {
		left := 0
		for _, m := range reg.Modules() { // the modules now, not those at start
			if st, err := sr.QueueStats(context.Background(), m.Queue); m.Status == "serving" && err == nil {
				left += st.Pending + st.Delayed + st.Deferred
			}
		}
		switch {
		case left > 0 && isMemory:
			log.Warn("the memory backend keeps nothing across restarts: queued jobs are dropped at exit", "queued", left)
		case left > 0:
			log.Info("queued jobs are kept for the next start", "queued", left, "data_dir", pb.Dir())
		}
	}
	if err := failed(); err != nil {
		return fmt.Errorf("stopped on a failed store: %w", err)
	}
	if stopErr != nil && !errors.Is(stopErr, context.DeadlineExceeded) {
		return stopErr
	}
	return nil
}

// backendName says which backend a --backend value is, without a URL's password.
func backendName(spec string) string {
	if isAMQP(spec) {
		return "RabbitMQ " + redact(spec)
	}
	return spec
}

// errReporter is a backend that can break for good and says so (the pebble backend
// once its store failed): run polls it every healthEvery.
type errReporter interface{ Err() error }

// healthEvery is how often run asks the backend whether its store failed.
const healthEvery = time.Second

// moduleHistoryDir is where the registry keeps the modules' last versions and pins: in
// the pebble backend's data directory, which is the host's own and durable; on the
// other backends under the cache directory, in a directory of the modules directory's
// own (named by the sha256 of its absolute path), so that two hosts of one machine with
// other modules keep apart. Empty (kept in memory) when there is no cache directory.
func moduleHistoryDir(b backend.Backend, cacheDir, modules string) string {
	if pb, ok := b.(*pebble.Backend); ok {
		return filepath.Join(pb.Dir(), "module-history")
	}
	if cacheDir == "" {
		d, err := os.UserCacheDir()
		if err != nil {
			return ""
		}
		cacheDir = filepath.Join(d, "wasmjobs")
	}
	abs, err := filepath.Abs(modules)
	if err != nil {
		abs = modules
	}
	sum := sha256.Sum256([]byte(abs))
	return filepath.Join(cacheDir, "module-history", hex.EncodeToString(sum[:8]))
}

// followModules starts following the modules stream of the RabbitMQ backend: it
// returns once the directory holds the fleet's current modules.
func (f *runFlags) followModules(ctx context.Context, log *slog.Logger, reg *host.Registry) (*fleet.Follower, error) {
	trust, err := readTrustKey(f.trustKey)
	if err != nil {
		return nil, err
	}
	id := f.hostID
	if id == "" {
		name, _ := os.Hostname()
		id = fmt.Sprintf("%s-%d", name, os.Getpid())
	}
	if trust != nil {
		log.Info("module pushes must be signed by the trusted key", "trust_key", f.trustKey)
	}
	return fleet.Start(ctx, fleet.Config{
		URLs: amqpURLs(f.backend), Stream: f.moduleStream, Dir: f.modules, TrustKey: trust, HostID: id,
		Heartbeat: f.moduleHeartbeat, Republish: f.republishEvery, Logger: log,
		Serving: func() map[string]string {
			out := map[string]string{}
			for _, m := range reg.Modules() {
				if m.Status == "serving" {
					out[m.Name] = m.Version
				}
			}
			return out
		},
	})
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

// httpRootsFrom returns the roots modules' outbound HTTPS trusts: the system's and
// the certificates of the PEM file (--http-ca); nil (the system's alone) for no file.
func httpRootsFrom(file string) (*x509.CertPool, error) {
	if file == "" {
		return nil, nil
	}
	pemData, err := os.ReadFile(file)
	if err != nil {
		return nil, usagef("--http-ca: %v", err)
	}
	roots, err := x509.SystemCertPool()
	if err != nil {
		// An empty pool instead would make every public https destination fail with
		// an unknown authority, far from this cause.
		return nil, usagef("--http-ca %s: the system's trusted roots, which it adds to, cannot be read (%v): see SSL_CERT_FILE and SSL_CERT_DIR", file, err)
	}
	if !roots.AppendCertsFromPEM(pemData) {
		return nil, usagef("--http-ca %s: no PEM certificate in it", file)
	}
	return roots, nil
}
