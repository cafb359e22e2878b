package main

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/memory"
	"github.com/wasmjobs/wasmjobs/backend/pebble"
	"github.com/wasmjobs/wasmjobs/backend/postgres"
	"github.com/wasmjobs/wasmjobs/backend/rabbitmq"
	"github.com/wasmjobs/wasmjobs/internal/app/api"
	"github.com/wasmjobs/wasmjobs/internal/app/fleet"
	"github.com/wasmjobs/wasmjobs/internal/app/inspect"
	"github.com/wasmjobs/wasmjobs/internal/telemetry"
	"github.com/wasmjobs/wasmjobs/server"
	"github.com/wasmjobs/wasmjobs/worker"
)

type runFlags struct {
	otlp         string
	traceURL     string
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
	pgSchema     string
	pgLease      time.Duration
	pgMigrate    bool
	tlsCert      string
	tlsKey       string
	insecureHTTP bool
	httpCA       string

	// The modules stream of a RabbitMQ fleet (internal/app/fleet).
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
	"queue-type": "WASMJOBS_QUEUE_TYPE", "pg-schema": "WASMJOBS_PG_SCHEMA", "pg-lease": "WASMJOBS_PG_LEASE", "pg-migrate": "WASMJOBS_PG_MIGRATE",
	"tls-cert": "WASMJOBS_TLS_CERT", "tls-key": "WASMJOBS_TLS_KEY", "http-ca": "WASMJOBS_HTTP_CA",
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
the log says at start how many jobs were found pending. One run owns a directory at a
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
			if err := checkBackendFlags(cmd, f.backend, f.queueType); err != nil {
				return err
			}
			return f.run(cmd.Context(), g, cmd.ErrOrStderr())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.modules, "modules", "", "the modules directory (required; env WASMJOBS_MODULES)")
	fl.StringVar(&f.backend, "backend", "pebble", "pebble (durable, in --data-dir), memory (nothing survives a stop), RabbitMQ: amqp://user:pass@host:5672/vhost, or the comma-separated URLs of a cluster's nodes, or PostgreSQL: postgres://user:pass@host:5432/db (env WASMJOBS_BACKEND)")
	fl.BoolVar(&f.pgMigrate, "pg-migrate", true, "on a PostgreSQL --backend: migrate the schema at start; with false, refuse a schema older than this binary's (for operators who run wasmjobs migrate by hand) (env WASMJOBS_PG_MIGRATE)")
	fl.DurationVar(&f.pgLease, "pg-lease", postgres.DefaultLease, "on a PostgreSQL --backend: how long a job's claim lasts unless this host renews it (every sixth of it); a host dead or cut off longer loses its jobs to the others (env WASMJOBS_PG_LEASE)")
	fl.StringVar(&f.pgSchema, "pg-schema", postgres.DefaultSchema, "on a PostgreSQL --backend: the schema of wasmjobs' tables, so that it can share a database (env WASMJOBS_PG_SCHEMA)")
	fl.StringVar(&f.queueType, "queue-type", string(rabbitmq.Classic), "RabbitMQ queues: classic (priorities, one node) or quorum (replicated over a cluster, no priorities) (env WASMJOBS_QUEUE_TYPE)")
	fl.StringVar(&f.dataDir, "data-dir", defaultDataDir, "the pebble backend's data directory, owned by one run at a time (env WASMJOBS_DATA_DIR)")
	fl.IntVar(&f.recordsMax, "records-max", pebble.DefaultRecordMaxCount, "finished job records the pebble and postgres backends keep for GET /v1/jobs/{id}, the newest; 0 keeps none (env WASMJOBS_RECORDS_MAX)")
	fl.DurationVar(&f.recordsAge, "records-max-age", pebble.DefaultRecordMaxAge, "how long the pebble and postgres backends keep a finished job's record; 0 keeps them regardless of age (env WASMJOBS_RECORDS_MAX_AGE)")
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
	fl.StringVar(&f.hostID, "host-id", "", "this host's name in its heartbeats on the modules stream, which `wasmjobs modules list --backend` shows, and on PostgreSQL in the claims it holds (default: hostname-pid; env WASMJOBS_HOST_ID)")
	fl.DurationVar(&f.moduleHeartbeat, "module-heartbeat", fleet.DefaultHeartbeat, "how often this host reports its serving versions on the modules stream")
	fl.DurationVar(&f.republishEvery, "republish-every", fleet.DefaultRepublish, "re-publish a pushed module whose newest copy in the stream is older than this, so retention never drops it")
	fl.StringVar(&f.otlp, "otlp", "", "export traces over OTLP to this collector, e.g. http://127.0.0.1:4318 (OTLP/HTTP; with OTEL_EXPORTER_OTLP_PROTOCOL=grpc, http://127.0.0.1:4317); empty: OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, or no tracing (env WASMJOBS_OTLP)")
	fl.StringVar(&f.traceURL, "trace-url", "", "a trace UI's URL with {trace_id} in it, e.g. https://ui.example/trace/{trace_id}: the dashboard links each attempt's trace id to it (env WASMJOBS_TRACE_URL)")
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
		if postgres.IsURL(spec) && (name == "records-max" || name == "records-max-age") {
			continue // the postgres backend keeps job records too
		}
		if cmd.Flags().Changed(name) {
			if name == "records-max" || name == "records-max-age" {
				return usagef("--%s is for --backend pebble or a postgres:// URL; --backend %s keeps no job records", name, redact(spec))
			}
			return usagef("--%s is for --backend pebble; --backend %s keeps no data directory", name, redact(spec))
		}
	}
	return nil
}

// checkBackendFlags refuses an unknown --queue-type, one given on the command line with
// a backend other than RabbitMQ, and --pg-schema or --pg-lease given with a backend
// other than PostgreSQL (their environment variables are not refused, as with the pebble flags).
func checkBackendFlags(cmd *cobra.Command, spec, queueType string) error {
	if _, err := rabbitmq.ParseQueueType(queueType); err != nil {
		return usagef("--queue-type: %v", err)
	}
	if cmd.Flags().Changed("queue-type") && !isAMQP(spec) {
		return usagef("--queue-type is for a RabbitMQ --backend (amqp://...), not %q", redact(spec))
	}
	if f := cmd.Flags().Lookup("pg-schema"); f != nil && postgres.IsURL(spec) {
		if err := postgres.CheckSchema(f.Value.String()); err != nil {
			return usagef("--pg-schema: %v", err)
		}
	}
	for _, name := range []string{"pg-schema", "pg-lease", "pg-migrate"} {
		if cmd.Flags().Changed(name) && !postgres.IsURL(spec) {
			return usagef("--%s is for a PostgreSQL --backend (postgres://...), not %q", name, redact(spec))
		}
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
	pgSchema  string
	pgLease   time.Duration
	pgMigrate bool
	hostID    string
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
		return b, nil // the server logs what it holds (backend.RecoveryReporter)
	case isAMQP(bs.spec):
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		return rabbitmq.Open(ctx, rabbitmq.Config{URLs: amqpURLs(bs.spec), QueueType: bs.queueType, Logger: log})
	case postgres.IsURL(bs.spec):
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		b, err := postgres.Open(ctx, postgres.Config{URL: bs.spec, Schema: bs.pgSchema, Lease: bs.pgLease, Host: bs.hostID, Records: bs.records, NoMigrate: !bs.pgMigrate, Logger: log})
		if err != nil {
			return nil, fmt.Errorf("--backend %s: %w", redact(bs.spec), err)
		}
		return b, nil
	}
	return nil, usagef("--backend %q: want pebble, memory, an amqp:// URL or a postgres:// URL", bs.spec)
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
	if postgres.IsURL(spec) {
		if u, err := url.Parse(spec); err == nil {
			// libpq takes a password in the query too (password, sslpassword).
			q := u.Query()
			for _, k := range []string{"password", "sslpassword"} {
				if q.Has(k) {
					q.Set(k, "xxxxx")
				}
			}
			u.RawQuery = q.Encode()
			return u.Redacted()
		}
		return "postgres://(a URL that does not parse)"
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

func (f *runFlags) run(ctx context.Context, g *globals, stderr io.Writer) error {
	// The first signal drains; a second one stops at once.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	return f.serve(ctx, g, stderr, sigs, func() { os.Exit(exitFailure) })
}

// serve is run with its signals and its hard exit given: the first signal (or ctx's
// end) drains, a second one calls exit. It opens the backend and the listener and
// runs a server.Server on them, whose Stop closes both on every path, within the
// drain's deadline plus server.CloseGrace.
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
	if !inspect.IsLoopbackHost(f.listen) && f.token == "" {
		return usagef("--listen %s is beyond loopback: set --token (or WASMJOBS_TOKEN) so that the API is not open", f.listen)
	}
	if (f.tlsCert == "") != (f.tlsKey == "") {
		return usagef("--tls-cert and --tls-key go together: give both, or neither")
	}
	if !inspect.IsLoopbackHost(f.listen) && f.tlsCert == "" && !f.insecureHTTP {
		return usagef("--listen %s is beyond loopback: give --tls-cert and --tls-key so that the token does not cross the network in clear, or --insecure-http to serve plain HTTP all the same", f.listen)
	}
	if f.traceURL != "" {
		if u, err := url.Parse(f.traceURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || !strings.Contains(f.traceURL, "{trace_id}") {
			return usagef("--trace-url %q: want an http(s) URL with {trace_id} in it, such as https://ui.example/trace/{trace_id}", f.traceURL)
		}
	}
	httpRoots, err := httpRootsFrom(f.httpCA)
	if err != nil {
		return err
	}
	log, err := newLogger(stderr, f.logFormat, f.logLevel)
	if err != nil {
		return err
	}
	// drainStarted is when serve began to stop: the tracer's flush ends within the
	// drain's budget from then.
	var drainStarted time.Time
	tp, err := f.tracing(ctx, log)
	if err != nil {
		return err
	}
	if tp != nil {
		log = slog.New(telemetry.LogHandler(log.Handler()))
		defer func() { f.stopTracing(tp, log, drainStarted) }()
	}

	// From the first signal (or ctx's end) the host drains: runCtx ends, and serve
	// stops the server. The goroutine ends with serve.
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	exited := make(chan struct{})
	defer close(exited)
	go func() {
		select {
		case s := <-sigs:
			log.Info("draining: no new jobs are taken", "signal", s.String(), "drain_timeout", f.drainTimeout)
			cancel()
		case <-runCtx.Done():
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
	b, err := open(runCtx, backendSpec{spec: f.backend, dataDir: f.dataDir, records: f.recordConfig(), queueType: rabbitmq.QueueType(f.queueType), pgSchema: f.pgSchema, pgLease: f.pgLease, pgMigrate: f.pgMigrate, hostID: f.hostID}, log)
	if err != nil {
		if runCtx.Err() != nil { // a signal during the connection: nothing served yet
			log.Info("wasmjobs stopped before it served")
			return nil
		}
		return err
	}
	cfg, err := f.serverConfig(g, log, httpRoots, backupDir)
	if err != nil {
		closeBackend(b, log)
		return err
	}
	if tp != nil {
		cfg.TracerProvider = tp
	}
	cfg.TraceURL = f.traceURL
	srv, err := server.New(b, cfg)
	if err != nil {
		cfg.Listener.Close()
		closeBackend(b, log)
		return err
	}
	if err := srv.Start(runCtx); err != nil {
		srv.Stop(context.Background())
		if runCtx.Err() != nil {
			log.Info("wasmjobs stopped before it served")
			return nil
		}
		return err
	}
	select {
	case <-runCtx.Done():
	case <-srv.Done(): // the store or the listener failed
	}
	drainStarted = time.Now()
	err = srv.Stop(context.Background())
	if err != nil && outOfTime(err) {
		// A part (a broker that hangs, a settle it ignores) that did not stop within the
		// drain and its grace: the process's exit ends it, and nothing is lost (the jobs
		// left are delivered again). Said, not an exit status.
		log.Error("stopped, with parts that did not finish in time", "error", err)
		return nil
	}
	return err
}

// outOfTime reports whether every error joined in err is one of time running out.
func outOfTime(err error) bool {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			if !outOfTime(e) {
				return false
			}
		}
		return true
	}
	return errors.Is(err, context.DeadlineExceeded)
}

// serverConfig is the server's configuration of the flags: it opens the listener and
// reads the trust key.
func (f *runFlags) serverConfig(g *globals, log *slog.Logger, httpRoots *x509.CertPool, backupDir string) (server.Config, error) {
	// --history 0 or less means the default, as it always has (the server refuses a
	// negative History).
	cfg := server.Config{Modules: f.modules, Concurrency: f.concurrency, DrainTimeout: f.drainTimeout, Logger: log,
		CacheDir: g.cacheDir, History: max(f.history, 0), RootCAs: httpRoots, Token: f.token, BackupDir: backupDir,
		TLSCertFile: f.tlsCert, TLSKeyFile: f.tlsKey, InsecureHTTP: f.insecureHTTP, BackendName: redact(f.backend), Version: versionString()}
	if isAMQP(f.backend) && f.moduleStream != "" {
		trust, err := readTrustKey(f.trustKey)
		if err != nil {
			return cfg, err
		}
		if trust != nil {
			log.Info("module pushes must be signed by the trusted key", "trust_key", f.trustKey)
		}
		cfg.Fleet = &server.FleetConfig{URLs: amqpURLs(f.backend), Stream: f.moduleStream, TrustKey: trust, HostID: f.hostID,
			Heartbeat: f.moduleHeartbeat, Republish: f.republishEvery}
	}
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return cfg, fmt.Errorf("listen on %s: %w", f.listen, err)
	}
	cfg.Listener = ln
	return cfg, nil
}

// closeBackend closes a backend that no server took, within server.CloseGrace.
func closeBackend(b backend.Backend, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), server.CloseGrace)
	defer cancel()
	if err := b.Close(ctx); err != nil {
		log.Warn("closing the backend", "error", err)
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
