// Package server runs a wasmjobs host inside a Go program: the handler modules of a
// directory, served on a backend you open, with the HTTP API and the dashboard, and a
// drain that keeps every job it took.
//
// # Embedding
//
// Open a backend (backend/memory, backend/pebble or backend/rabbitmq), give it to
// New with a Config naming the modules directory, and Start the server:
//
//	b := memory.New(memory.Config{})
//	srv, err := server.New(b, server.Config{Modules: "./modules"})
//	if err != nil { ... } // b is still yours to close
//	if err := srv.Start(ctx); err != nil { ... }
//	defer srv.Stop(context.Background())
//
// From New on the Server owns the backend: Stop closes it, last. Every NAME.wasm of
// the directory serves the queue NAME (or the queue its manifest NAME.toml names); the
// directory is watched, so dropping in a new version swaps it without a restart.
//
// Jobs come in through Enqueue, the one place the enqueue rules live (POST /v1/jobs
// and /v1/jobs/batch call it as well), and Inspector is the operator's side: queues,
// jobs, dead letters and replay, modules, promote and rollback, schedules. Handler
// returns the HTTP API and the dashboard over both: mount it on a server of yours, or
// give Config.Listener and the Server serves it itself and shuts it down at the right
// moment of the drain. A program may also publish to the backend directly
// (backend.Backend.Publish), which skips the checks of queue, payload and limits.
//
// # Lifecycle
//
// New builds every part and starts nothing. Start starts them in order: the fleet
// follower (on RabbitMQ, when Config.Fleet is set), the registry's first read of the
// modules directory and its watch, the worker, the modules' schedules, the store's
// health check, the HTTP listener. Stop drains: the server stops calling itself ready
// at once (the API refuses new jobs on a backend that keeps nothing queued, and takes
// them for the next start on one that keeps them), the schedules stop firing and the
// directory is no longer followed, no new job is taken, and running jobs finish and
// settle until Config.DrainTimeout; jobs still running then are left unacknowledged,
// for the backend to deliver again. The API answers reads until the drain ends; then
// every part stops in the reverse of its start, the backend last with a slice of time
// of its own, all within the drain deadline plus CloseGrace. A Start that fails
// releases the host itself, the same way, within CloseGrace: a program that returns
// Start's error leaks no part and leaves no data directory locked.
//
// A backend whose store breaks for good (backend.HealthReporter) makes the server stop
// calling itself healthy and close Done; Stop then returns the failure. Done closes as
// well when the HTTP listener fails, and Stop returns that failure too.
//
// # Compatibility
//
// server is one of the public packages (with wasmjobstest, host, worker, backend and
// abi); at v0 they may change, each change with an entry in the CHANGELOG.
package server

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/rabbitmq"
	"github.com/wasmjobs/wasmjobs/host"
	"github.com/wasmjobs/wasmjobs/internal/app/fleet"
	"github.com/wasmjobs/wasmjobs/internal/app/inspect"
	"github.com/wasmjobs/wasmjobs/internal/app/metrics"
	"github.com/wasmjobs/wasmjobs/internal/schedule"
	"github.com/wasmjobs/wasmjobs/internal/telemetry"
	"github.com/wasmjobs/wasmjobs/worker"
)

// Defaults of Config.
const (
	// DefaultDrainTimeout is how long Stop waits for running jobs.
	DefaultDrainTimeout = 30 * time.Second
	// DefaultHistory is how many recent jobs the API reports on a backend without job
	// records (memory, RabbitMQ).
	DefaultHistory = 10_000
)

// CloseGrace is what Stop gives, past the drain deadline, to stopping the API, the
// engines and the backend: Stop returns within the drain timeout plus CloseGrace,
// whatever the backend or a slow client does.
const CloseGrace = 2 * time.Second

// backendCloseSlice is the part of CloseGrace kept for closing the backend (flushing
// the pebble store), after the API's shutdown has had the rest.
const backendCloseSlice = time.Second

// healthEvery is how often the server asks the backend whether its store failed.
const healthEvery = time.Second

// Errors of the lifecycle.
var (
	// ErrStarted is returned by a second Start.
	ErrStarted = errors.New("server: already started")
	// ErrStopped is returned by Start after Stop, and by a second Stop.
	ErrStopped = errors.New("server: stopped")
)

// Config configures a Server. Only Modules is required; every zero value means the
// default its field names.
type Config struct {
	// Modules is the directory of handler modules (required). It must exist.
	Modules string
	// Concurrency bounds the jobs running at once over all queues;
	// worker.DefaultConcurrency if 0.
	Concurrency int
	// DrainTimeout is how long Stop lets running jobs finish; DefaultDrainTimeout if 0.
	DrainTimeout time.Duration
	// Logger receives the host's log; nil discards it.
	Logger *slog.Logger
	// CacheDir holds compiled modules across runs; empty means wasmjobs under the
	// user's cache directory. On a backend without a data directory of its own the
	// modules' last versions and pins are kept under it too.
	CacheDir string
	// History is how many recent jobs the API reports and the dashboard lists the
	// attempts of, on a backend without job records; DefaultHistory if 0.
	History int
	// RootCAs, when set, is the pool modules' outbound HTTPS trusts (the system's and
	// a CA of yours); nil trusts the system's roots.
	RootCAs *x509.CertPool
	// Token, when set, is the bearer token the API and the dashboard require.
	Token string
	// Loopback turns on the API's Host check, against DNS rebinding: requests whose
	// Host header is not a loopback name are refused. Set it when Handler is served
	// on a loopback address only; with Listener it is set from the listener's address.
	Loopback bool
	// BackupDir, when set, is the directory the API's backups are written into (on
	// the pebble backend); empty turns backups off.
	BackupDir string
	// Fleet, when set, follows a RabbitMQ fleet's stream of pushed modules into the
	// Modules directory; nil follows none. Only with the RabbitMQ backend.
	Fleet *FleetConfig
	// Listener, when set, is the server's: Start serves Handler on it, and Stop shuts
	// it down after the drain (or closes it, if it never served). Nil serves nothing:
	// mount Handler on a server of yours. One beyond loopback (not a loopback address,
	// nor a Unix socket) needs Token, and TLS unless InsecureHTTP is set, as `wasmjobs
	// run --listen` does.
	Listener net.Listener
	// InsecureHTTP lets a Listener beyond loopback serve plain HTTP: the token then
	// crosses the network in clear. Without it New refuses such a Listener without TLS.
	// A Listener beyond loopback needs a Token whatever this says.
	InsecureHTTP bool
	// TLSCertFile and TLSKeyFile, both set, serve Listener over TLS. New loads them:
	// a missing or bad file fails New, naming it.
	TLSCertFile, TLSKeyFile string
	// BackendName names the backend in the log and on the dashboard (a URL's password
	// hidden); empty means its Go type.
	BackendName string
	// Version is the host's version on the dashboard; empty shows none.
	Version string
	// TracerProvider, when set, traces jobs end to end: a send span for each enqueue
	// (a child of the caller's, from the request's W3C traceparent), a process span
	// for each run linking to it, and inside that the guest's run, its outbound
	// requests, the settle and each child's send. Nil traces nothing and makes no
	// span. A provider that reports DroppedSpans() uint64 has the count on /metrics
	// (wasmjobs_trace_spans_dropped_total).
	TracerProvider trace.TracerProvider
	// TraceURL, when set, links each attempt's trace id on the dashboard to a trace UI:
	// "{trace_id}" in it is replaced, as in https://ui.example/trace/{trace_id}.
	TraceURL string
}

// FleetConfig follows the modules stream of a RabbitMQ fleet (`wasmjobs modules
// push`): the fleet's modules are written into the modules directory before the
// registry's first read, so the host serves what the fleet serves from its start.
type FleetConfig struct {
	// URLs are the broker's node URLs, tried in order (required).
	URLs []string
	// Stream is the stream's name; "wasmjobs.modules" if empty.
	Stream string
	// TrustKey, when set, is the only key whose signed pushes are taken; the others
	// are refused and listed in /v1/modules.
	TrustKey ed25519.PublicKey
	// HostID names this host in its heartbeats; hostname-pid if empty.
	HostID string
	// Heartbeat is how often the host reports its serving versions; 10 s if 0.
	Heartbeat time.Duration
	// Republish is the age past which the newest push of a module is published again,
	// so that the stream's retention never drops it; an hour if 0.
	Republish time.Duration
}

// Server is one wasmjobs host on one backend. Its methods are safe for concurrent use.
type Server struct {
	b   backend.Backend
	cfg Config
	log *slog.Logger

	met         *metrics.Metrics
	engine      *host.Engine
	checkEngine *host.Engine // uploads' checks: no compilation cache
	reg         *host.Registry
	w           *worker.Worker
	sched       *schedule.Scheduler
	ops         *operator
	insp        *inspect.Inspector
	handler     http.Handler
	schedKick   chan struct{}
	parts       []component
	stopWorker  func(ctx context.Context) error // the worker's Stop, once
	retire      func()                          // the registry's Retire, once

	// runCtx lives from New to the drain's start: the schedules and the fleet follower
	// run in it, and its end stops them.
	runCtx    context.Context
	cancelRun context.CancelFunc

	started  atomic.Bool // Start has started every part
	draining atomic.Bool
	closed   atomic.Bool // the backend's close has begun: no job may reach it
	storeErr atomic.Pointer[error]
	serveErr atomic.Pointer[error] // the listener's failure
	tlsCert  *tls.Certificate      // Config.TLSCertFile's, loaded by New
	halted   chan struct{}         // Done
	halt     sync.Once

	mu    sync.Mutex
	state state
	// failedStart is set when a failed Start released the host; answered when a Stop
	// after it has answered nil (the documented Stop after a failed Start).
	failedStart, answered bool
	startDone             chan struct{} // closed when Start returns
	stopDone              chan struct{} // closed once the one release of the host ended
	follower              *fleet.Follower
}

type state int

const (
	stateNew state = iota
	stateStarting
	stateStarted
	stateStopping // a Stop, or a failed Start, releases the host: it ends with stopDone
)

// New builds a host on b with cfg. It starts nothing (see Start) and, when it
// succeeds, owns b and Config.Listener: Stop closes them. When it fails, both are
// left open for the caller to close.
func New(b backend.Backend, cfg Config) (*Server, error) {
	if b == nil {
		return nil, errors.New("server: a backend is required")
	}
	if cfg.Modules == "" {
		return nil, errors.New("server: Config.Modules is required: the directory of handler modules")
	}
	if fi, err := os.Stat(cfg.Modules); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("server: modules %s: not a directory", cfg.Modules)
	}
	if cfg.Concurrency < 0 || cfg.DrainTimeout < 0 || cfg.History < 0 {
		return nil, fmt.Errorf("server: Concurrency %d, DrainTimeout %v, History %d: want 0 (the default) or more",
			cfg.Concurrency, cfg.DrainTimeout, cfg.History)
	}
	if (cfg.TLSCertFile == "") != (cfg.TLSKeyFile == "") {
		return nil, errors.New("server: TLSCertFile and TLSKeyFile go together")
	}
	if ln := cfg.Listener; ln != nil && !onThisMachine(ln.Addr()) {
		// The checks of `wasmjobs run --listen`: the API beyond this machine is never open
		// to all, and its token crosses the network in clear only when asked to.
		if cfg.Token == "" {
			return nil, fmt.Errorf("server: Listener %s is beyond loopback: set Config.Token so that the API is not open", ln.Addr())
		}
		if cfg.TLSCertFile == "" && !cfg.InsecureHTTP {
			return nil, fmt.Errorf("server: Listener %s is beyond loopback: set Config.TLSCertFile and TLSKeyFile so that the token does not cross the network in clear, or Config.InsecureHTTP to serve plain HTTP all the same", ln.Addr())
		}
	}
	var cert *tls.Certificate
	if cfg.TLSCertFile != "" {
		// Loaded here, not when the listener starts serving: a missing or bad file is
		// New's error, not a listener that fails on its own after a Start that succeeded.
		c, err := tls.LoadX509KeyPair(cfg.TLSCertFile, cfg.TLSKeyFile)
		if err != nil {
			return nil, fmt.Errorf("server: TLS certificate %s and key %s: %w", cfg.TLSCertFile, cfg.TLSKeyFile, err)
		}
		cert = &c
	}
	if cfg.Fleet != nil && len(cfg.Fleet.URLs) == 0 {
		return nil, errors.New("server: Fleet.URLs is required: the broker of the modules stream")
	}
	cfg.Concurrency = cmp.Or(cfg.Concurrency, worker.DefaultConcurrency)
	cfg.DrainTimeout = cmp.Or(cfg.DrainTimeout, DefaultDrainTimeout)
	cfg.History = cmp.Or(cfg.History, DefaultHistory)
	cfg.BackendName = cmp.Or(cfg.BackendName, fmt.Sprintf("%T", b))
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Listener != nil {
		cfg.Loopback = isLoopback(cfg.Listener.Addr())
	}
	s := &Server{b: b, cfg: cfg, log: cfg.Logger, met: metrics.New(), halted: make(chan struct{}), tlsCert: cert,
		schedKick: make(chan struct{}, 1), startDone: make(chan struct{}), stopDone: make(chan struct{})}
	if dp, ok := cfg.TracerProvider.(interface{ DroppedSpans() uint64 }); ok {
		s.met.TraceDropped(dp.DroppedSpans)
	}
	if rr, ok := b.(backend.RecoveryReporter); ok {
		rec := rr.Recovery()
		s.log.Info("data directory opened", "data_dir", dataDir(b), "pending", rec.Ready, "delayed", rec.Delayed,
			"dead_letters", rec.Dead, "waiting", rec.Waiting, "queues", rec.Queues, "took", rec.Took.Round(time.Millisecond))
	}
	s.runCtx, s.cancelRun = context.WithCancel(context.Background())
	if err := s.build(); err != nil {
		s.cancelRun()
		return nil, err
	}
	return s, nil
}

// build makes every part, in the order of Start, and the list that starts and stops
// them. On an error it closes what it made (not the backend).
func (s *Server) build() (err error) {
	var made []func(context.Context)
	defer func() {
		if err != nil {
			ctx, cancel := context.WithTimeout(context.Background(), CloseGrace)
			defer cancel()
			for i := len(made) - 1; i >= 0; i-- {
				made[i](ctx)
			}
		}
	}()
	// New takes no context: building an engine waits for nothing (its host modules
	// are instantiated in memory, its cache directory made if missing).
	ctx := context.Background()
	// A backend that holds no job until others end cannot serve a handler's WAIT: the
	// engines refuse, at load, the modules that import fan-in, naming the backend. A
	// backend that publishes dependents hands out deliveries that wait and read their
	// results (backend.WaitingDelivery, backend.AwaitedDelivery): memory and pebble.
	_, waits := s.b.(backend.DependentPublisher)
	s.engine, err = host.NewEngine(ctx, host.Config{CacheDir: s.cfg.CacheDir, Logger: s.log,
		HTTP: host.HTTPOptions{RootCAs: s.cfg.RootCAs, IdleConnsPerHost: s.cfg.Concurrency}, OnHTTPCall: s.met.HTTPCall,
		NoWait: !waits, Backend: s.cfg.BackendName, TracerProvider: s.cfg.TracerProvider, TraceEventLimit: eventLimit(s.cfg.TracerProvider)})
	if err != nil {
		return err
	}
	made = append(made, func(ctx context.Context) { s.engine.Close(ctx) })
	// Uploads are untrusted: they are checked on an engine of their own, without the
	// on-disk compilation cache (an upload must not fill the cache directory).
	s.checkEngine, err = host.NewEngine(ctx, host.Config{NoCache: true, Logger: s.log, NoWait: !waits, Backend: s.cfg.BackendName})
	if err != nil {
		return fmt.Errorf("the upload checker's engine: %w", err)
	}
	made = append(made, func(ctx context.Context) { s.checkEngine.Close(ctx) })

	s.ops = newOperator(s.b, s.cfg.History)
	s.w = worker.New(s.b, worker.Config{
		Concurrency:    s.cfg.Concurrency,
		Observer:       s.ops.observer(s.met, s.log),
		Logger:         s.log,
		TracerProvider: s.cfg.TracerProvider,
	})
	onEvent := func(ev host.RegistryEvent) {
		s.met.ModuleEvent(ev)
		s.ops.versions.Record(ev)
		select { // a module changed: read the schedules again
		case s.schedKick <- struct{}{}:
		default:
		}
	}
	s.reg, err = host.NewRegistry(host.RegistryConfig{Dir: s.cfg.Modules, Engine: s.engine, Queues: s.w, Logger: s.log,
		OnEvent: onEvent, HistoryDir: moduleHistoryDir(s.b, s.cfg.CacheDir, s.cfg.Modules)})
	if err != nil {
		return err
	}
	s.sched = newScheduler(s.b, s.ops.recs, s.log, telemetry.Tracer(s.cfg.TracerProvider))
	s.insp = s.newInspector()
	s.met.CountQueues(s.queueDepths)
	if sr, ok := s.b.(backend.StoreReporter); ok {
		var failing atomic.Bool // logged once a run of failed reads, not at every scrape
		s.met.ReadStore(func() (backend.StoreStats, bool) {
			ctx, cancel := context.WithTimeout(s.runCtx, 2*time.Second)
			defer cancel()
			st, err := sr.StoreStats(ctx)
			if err != nil && s.runCtx.Err() == nil && !failing.Swap(true) {
				s.log.Warn("reading the store's sizes for /metrics failed; their series are left out until a read works", "error", err)
			} else if err == nil {
				failing.Store(false)
			}
			return st, err == nil
		})
	}
	s.handler = s.newHandler()
	s.parts = s.components()
	return nil
}

// Handler returns the API and the dashboard as one handler: the dashboard under /ui/,
// GET / redirecting to it, the API (/v1/..., /healthz, /readyz, /metrics) at the rest.
// It answers from New on; it reports the host ready only between Start and Stop.
func (s *Server) Handler() http.Handler { return s.handler }

// Done is closed when the host stops serving on its own: its store failed
// (backend.HealthReporter) or its listener did. The caller should then call Stop,
// which returns the store's failure.
func (s *Server) Done() <-chan struct{} { return s.halted }

// stopOnItsOwn ends the run (the schedules stop firing) and closes Done.
func (s *Server) stopOnItsOwn() {
	s.halt.Do(func() {
		s.cancelRun()
		close(s.halted)
	})
}

// serveFailure returns the listener's failure, or nil.
func (s *Server) serveFailure() error {
	if p := s.serveErr.Load(); p != nil {
		return *p
	}
	return nil
}

// failed returns the store's failure, or nil.
func (s *Server) failed() error {
	if p := s.storeErr.Load(); p != nil {
		return *p
	}
	return nil
}

// ready reports whether the host takes jobs: started, not draining, its store sound.
func (s *Server) ready() bool { return s.started.Load() && !s.draining.Load() && s.failed() == nil }

// refusal says why the host takes no jobs, nil while it takes them: from Start on, on
// a backend that keeps nothing queued only until the drain (a job taken then would be
// dropped at exit); on one that keeps them (pebble, RabbitMQ) through the drain, for
// the next start, until the backend's close begins.
func (s *Server) refusal() error {
	switch kq, ok := s.b.(backend.QueueKeeper); {
	case !s.started.Load():
		return errNotStarted
	case ok && !kq.KeepsQueued() && s.draining.Load(), s.closed.Load():
		return ErrDraining
	}
	return nil
}

// Start starts the parts in order (see the package's doc) and returns once the host
// serves. ctx bounds the start only: when it has ended, or ends first, Start fails
// with an error wrapping ctx's, and starts no part after that.
//
// A failed Start releases the host itself, as Stop would: it stops the parts it
// started, in reverse, and closes the backend, within CloseGrace. The documented
// pattern (return Start's error, defer Stop only once it succeeded) thus leaves
// nothing running and no data directory locked. A Stop after a failed Start waits for
// that release and returns nil, once; later ones return ErrStopped.
//
// A Stop during Start makes it give up with ErrStopped, whatever error the part under
// way returned; that Stop then releases the host.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	switch s.state {
	case stateStopping:
		s.mu.Unlock()
		return ErrStopped
	case stateStarting, stateStarted:
		s.mu.Unlock()
		return ErrStarted
	}
	s.state = stateStarting
	s.mu.Unlock()
	defer close(s.startDone)

	endStart := context.AfterFunc(ctx, s.cancelRun)
	defer endStart()
	for _, c := range s.parts {
		if c.start == nil {
			continue
		}
		// The AfterFunc above ends runCtx asynchronously: ctx is asked as well, so that
		// no part starts once ctx has ended.
		if ctx.Err() != nil || s.runCtx.Err() != nil {
			return s.startFailed(ctx, c.name, nil)
		}
		if err := c.start(s.runCtx); err != nil || ctx.Err() != nil || s.runCtx.Err() != nil {
			return s.startFailed(ctx, c.name, err)
		}
	}
	// ctx may end after the last check and before the AfterFunc is undone: if the
	// AfterFunc already ran (or runs), the run is ending, and the start has failed.
	if !endStart() {
		return s.startFailed(ctx, "the last part", nil)
	}
	s.mu.Lock()
	if s.state != stateStarting { // Stop came during the start: it stops the parts
		s.mu.Unlock()
		return ErrStopped
	}
	s.state = stateStarted
	s.started.Store(true)
	s.mu.Unlock()
	s.logServing()
	return nil
}

// startFailed ends a Start that could not start the part name (err is its error, nil
// when the start ended before it): with ErrStopped when Stop ended it (Stop then
// releases the host), otherwise with the failure, once the host is released.
func (s *Server) startFailed(ctx context.Context, name string, err error) error {
	s.mu.Lock()
	byStop := s.state == stateStopping
	if !byStop {
		s.state, s.failedStart = stateStopping, true
	}
	s.mu.Unlock()
	if byStop {
		return ErrStopped
	}
	switch {
	case ctx.Err() != nil:
		err = fmt.Errorf("server: start (%s): %w", name, ctx.Err())
	case err == nil: // the run ended on its own: the store or the listener failed
		cause := s.failed()
		if cause == nil {
			cause = s.serveFailure()
		}
		if cause == nil {
			cause = errors.New("its run ended")
		}
		err = fmt.Errorf("server: start (%s): the host stopped on its own: %w", name, cause)
	}
	s.draining.Store(true)
	s.cancelRun()
	closeCtx, cancel := context.WithTimeout(context.Background(), CloseGrace)
	defer cancel()
	err = errors.Join(err, s.stopParts(closeCtx))
	close(s.stopDone)
	return err
}

// logServing says that the host serves, where and with how many modules.
func (s *Server) logServing() {
	mods := s.reg.Modules()
	serving := 0
	for _, m := range mods {
		if m.Serving() {
			serving++
		}
	}
	var where []any
	if ln := s.cfg.Listener; ln != nil {
		scheme := "http"
		if s.cfg.TLSCertFile != "" {
			scheme = "https"
		}
		where = []any{"api", scheme + "://" + ln.Addr().String(), "dashboard", scheme + "://" + ln.Addr().String() + "/ui/"}
	}
	s.log.Info("wasmjobs serving", append(where, "modules", s.cfg.Modules,
		"serving", serving, "rejected", len(mods)-serving, "backend", s.cfg.BackendName, "concurrency", s.cfg.Concurrency)...)
}

// Stop drains the host and stops every part (see the package's doc): it returns within
// the drain timeout (or ctx's deadline, or its cancellation, when sooner) plus
// CloseGrace, once a Start under way has returned. Its error joins the store's failure
// when that stopped the host, the listener's when it failed, the worker's when its stop
// failed otherwise than by the drain deadline (a settle or stream the backend kept past
// it: worker.ErrLeftBehind), and the errors of the parts' stops, the backend's close
// among them (its data directory may then still be locked); nil when none failed. Stop
// before Start releases what New built, the backend included.
//
// A Stop during Start first waits for Start to give up, so that no part starts after
// its stop ran: every part's start takes the run's context, which Stop ends, and
// returns with it. A Stop while another
// stop is under way (a first Stop's drain, a failed Start's release) waits for it,
// until ctx ends, then returns ErrStopped: a deferred Stop does not let the program
// exit mid-drain. The one exception is the first Stop after a failed Start, which
// returns nil once Start's release ended.
func (s *Server) Stop(ctx context.Context) error {
	s.mu.Lock()
	prev := s.state
	if prev == stateStopping {
		afterFailedStart := s.failedStart && !s.answered
		s.answered = true
		s.mu.Unlock()
		select {
		case <-s.stopDone:
		case <-ctx.Done():
			return fmt.Errorf("%w: gave up waiting for the stop under way: %w", ErrStopped, ctx.Err())
		}
		if afterFailedStart {
			return nil
		}
		return ErrStopped
	}
	s.state = stateStopping
	s.mu.Unlock()
	defer close(s.stopDone)
	s.draining.Store(true)
	s.cancelRun()
	if prev == stateStarting { // a Start under way gives up with the run's end
		<-s.startDone
	}
	served := s.started.Load()

	// The drain runs only on a host that served; otherwise the parts have nothing
	// running and the stops get CloseGrace alone.
	deadline := time.Now()
	if served {
		deadline = deadline.Add(s.cfg.DrainTimeout)
	}
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	drainCtx, cancelDrain := context.WithDeadline(ctx, deadline)
	defer cancelDrain()
	var stopErr error
	if served {
		stopErr = s.drain(drainCtx)
	}
	// The parts stop within CloseGrace of the drain's end: of its deadline, or of now
	// when it ended sooner (every job settled, or ctx cancelled: a second signal).
	closeBy := deadline
	if now := time.Now(); now.Before(closeBy) {
		closeBy = now
	}
	closeCtx, cancelClose := context.WithDeadline(context.WithoutCancel(ctx), closeBy.Add(CloseGrace))
	defer cancelClose()
	partsErr := s.stopParts(closeCtx)
	if served {
		s.log.Info("wasmjobs stopped")
	}
	var errs []error
	if err := s.failed(); err != nil {
		errs = append(errs, fmt.Errorf("stopped on a failed store: %w", err))
	}
	if err := s.serveFailure(); err != nil {
		errs = append(errs, fmt.Errorf("stopped on a failed listener: %w", err))
	}
	// The drain's deadline is no failure (the jobs it left are delivered again); a
	// settle or a stream that the backend kept past it is.
	if stopErr != nil && (!errors.Is(stopErr, context.DeadlineExceeded) || errors.Is(stopErr, worker.ErrLeftBehind)) {
		errs = append(errs, stopErr)
	}
	return errors.Join(append(errs, partsErr)...)
}

// stopParts stops every part in the reverse of its start, within ctx, and returns
// their errors. The backend, stopped last, has a slice of time of its own: every part
// before it stops within ctx's deadline less backendCloseSlice (beforeBackend), so
// that a part that waits (a job that never returns, a broker that hangs) cannot leave
// the backend a context already expired.
func (s *Server) stopParts(ctx context.Context) error {
	var errs []error
	for i := len(s.parts) - 1; i >= 0; i-- {
		c := s.parts[i]
		if c.stop == nil {
			continue
		}
		partCtx, cancel := ctx, context.CancelFunc(func() {})
		if i > 0 { // the backend is the list's first part
			partCtx, cancel = beforeBackend(ctx)
		}
		if err := c.stop(partCtx); err != nil {
			errs = append(errs, fmt.Errorf("server: stopping the %s: %w", c.name, err))
		}
		cancel()
	}
	return errors.Join(errs...)
}

// drain is the step of Stop before the parts' stops: the API already refuses new jobs
// (draining is set) and keeps answering reads until the listener's stop. It stops
// following the directory, stops taking jobs, lets running jobs finish and settle until
// ctx's deadline (settles under way end with it) and retires the modules.
func (s *Server) drain(ctx context.Context) error {
	// No job is taken from the drain's first moment: stopping the registry's follow
	// may take a while (a reconcile under way ends first).
	s.w.StopTaking()
	s.reg.Close()
	stopErr := s.stopWorker(ctx)
	s.retire()
	if stopErr != nil {
		s.log.Warn("drain timeout: unfinished jobs left unacknowledged", "error", stopErr)
	} else {
		running := 0
		for _, n := range s.w.Running() {
			running += n
		}
		s.log.Info("drained: every running job finished and settled", "running", running)
	}
	s.logQueued()
	return stopErr
}

// logQueued says what becomes of the jobs still queued in an embedded backend: one that
// keeps nothing drops them, one with a data directory keeps them for the next start.
func (s *Server) logQueued() {
	kq, ok := s.b.(backend.QueueKeeper)
	sr, stats := s.b.(backend.StatsReader)
	if !ok || !stats {
		return
	}
	// A count is a read of the backend's own memory or store: a second bounds them all,
	// so that a slow one cannot hold the drain's end.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	left := 0
	for _, m := range s.reg.Modules() { // the modules now, not those at start
		if !m.Serving() {
			continue
		}
		if st, err := sr.QueueStats(ctx, m.Queue); err == nil {
			left += st.Pending + st.Delayed + st.Deferred
		}
	}
	switch {
	case left > 0 && !kq.KeepsQueued():
		s.log.Warn("the memory backend keeps nothing across restarts: queued jobs are dropped at exit", "queued", left)
	case left > 0:
		s.log.Info("queued jobs are kept for the next start", "queued", left, "data_dir", dataDir(s.b))
	}
}

// dataDir is b's data directory, or "" for a backend without one.
func dataDir(b backend.Backend) string {
	if d, ok := b.(backend.DirReporter); ok {
		return d.Dir()
	}
	return ""
}

// isLoopback reports whether a listener's address is a loopback one, which a web page
// could reach through a DNS name rebound to it: the API's Host check guards it.
func isLoopback(addr net.Addr) bool {
	if a, ok := addr.(*net.TCPAddr); ok {
		return a.IP.IsLoopback()
	}
	return inspect.IsLoopbackHost(addr.String())
}

// onThisMachine reports whether a listener stays on this machine: a loopback address,
// or a Unix socket, reached through the file system and never by a web page, so that
// its clients' Host headers (any name) are not checked.
func onThisMachine(addr net.Addr) bool {
	_, unix := addr.(*net.UnixAddr)
	return unix || isLoopback(addr)
}

// isRabbitMQ reports whether b is the RabbitMQ backend, for the dashboard's name.
func isRabbitMQ(b backend.Backend) bool {
	_, ok := b.(*rabbitmq.Backend)
	return ok
}

// eventLimit is the spans' event limit of tp, when it says (a *telemetry.Provider, as
// `wasmjobs run` makes from OTEL_SPAN_EVENT_COUNT_LIMIT); 0, the default, otherwise.
func eventLimit(tp trace.TracerProvider) int {
	if p, ok := tp.(*telemetry.Provider); ok && p != nil {
		return p.EventLimit
	}
	return 0
}
