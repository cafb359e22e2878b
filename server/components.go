package server

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/internal/app/fleet"
)

// component is one part of the host: what starts it (nil: New built it, nothing runs
// until asked) and what stops it (nil: nothing to release). Start runs the starts in
// list order, Stop the stops in reverse; a stop releases its part whether or not it
// started, so the same list undoes a failed Start. A stop's error is Stop's.
type component struct {
	name  string
	start func(ctx context.Context) error
	stop  func(ctx context.Context) error
}

// components returns the host's parts in start order. The order is the dependencies':
// the backend and the engines serve every other part; the fleet's modules are in the
// directory before the registry's first read; the registry registers the queues before
// the worker consumes them; the schedules publish to registered queues; the store's
// health watches a running host; the listener serves last, once every part answers.
// Stop drains (Server.drain) before these stops run: the listener and the backend
// outlive the worker's drain.
func (s *Server) components() []component {
	var stopWorker, retire sync.Once
	s.stopWorker = func(ctx context.Context) (err error) {
		stopWorker.Do(func() { err = s.w.Stop(ctx) })
		return err
	}
	s.retire = func() { retire.Do(s.reg.Retire) }
	var stopSchedules func()
	health := newHealthCheck(s)
	ln := newListener(s)
	return []component{
		{name: "backend", stop: s.closeBackend},
		// Engine.Close waits for the jobs still running, within the time before the
		// backend's (stopParts).
		{name: "engine", stop: s.engine.Close},
		{name: "upload checker", stop: s.checkEngine.Close},
		{name: "fleet follower", start: s.followModules, stop: func(ctx context.Context) error {
			if fl := s.fleetFollower(); fl != nil {
				fl.Close(ctx)
			}
			return nil
		}},
		{name: "registry", start: s.reg.Start, stop: func(context.Context) error {
			err := s.reg.Close()
			s.retire()
			return err
		}},
		{name: "worker", start: s.w.Start, stop: func(ctx context.Context) error {
			// Its error is the drain's, which Stop has had (a Stop without a drain: a
			// worker never started).
			s.stopWorker(ctx)
			return nil
		}},
		{name: "schedules", start: func(ctx context.Context) error {
			// They fire from now until the drain starts (the run context ends).
			stopSchedules = startSchedules(ctx, s.sched, s.reg, s.schedKick, s.log)
			return nil
		}, stop: func(context.Context) error {
			if stopSchedules != nil {
				stopSchedules()
			}
			return nil
		}},
		{name: "store health", start: health.start, stop: health.stop},
		{name: "listener", start: ln.start, stop: ln.stop},
	}
}

// closeBackend closes the backend, last, within what is left of ctx. From its start
// the host accepts no job: one taken now would meet a closed backend.
func (s *Server) closeBackend(ctx context.Context) error {
	s.closed.Store(true)
	if err := s.b.Close(ctx); err != nil {
		s.log.Error("closing the backend", "error", err)
		return err
	}
	return nil
}

// followModules starts following the fleet's modules stream, when Config.Fleet is set:
// it returns once the directory holds the fleet's current modules.
func (s *Server) followModules(ctx context.Context) error {
	fc := s.cfg.Fleet
	if fc == nil {
		return nil
	}
	id := fc.HostID
	if id == "" {
		name, _ := os.Hostname()
		id = fmt.Sprintf("%s-%d", name, os.Getpid())
	}
	fl, err := fleet.Start(ctx, fleet.Config{
		URLs: fc.URLs, Stream: fc.Stream, Dir: s.cfg.Modules, TrustKey: fc.TrustKey, HostID: id,
		Heartbeat: fc.Heartbeat, Republish: fc.Republish, Logger: s.log,
		Serving: func() map[string]string {
			out := map[string]string{}
			for _, m := range s.reg.Modules() {
				if m.Serving() {
					out[m.Name] = m.Version
				}
			}
			return out
		},
	})
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.follower = fl
	s.mu.Unlock()
	return nil
}

// fleetFollower is the fleet follower, nil before it started or without Config.Fleet.
func (s *Server) fleetFollower() *fleet.Follower {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.follower
}

// refusedPushes lists the module pushes the fleet follower refused, for /v1/modules;
// nil without a follower.
func (s *Server) refusedPushes() any {
	if fl := s.fleetFollower(); fl != nil {
		return fl.Refused()
	}
	return nil
}

// healthCheck polls a backend whose store can break for good (pebble after a failed
// log write): the host then stops calling itself ready or healthy, drains and stops
// with the error, rather than answering 503 to every enqueue and failing every settle
// for ever while it says 200.
type healthCheck struct {
	s          *Server
	started    atomic.Bool // done is then closed by start or by its goroutine
	quit, done chan struct{}
}

func newHealthCheck(s *Server) *healthCheck {
	return &healthCheck{s: s, quit: make(chan struct{}), done: make(chan struct{})}
}

func (h *healthCheck) start(context.Context) error {
	h.started.Store(true)
	hr, ok := h.s.b.(backend.HealthReporter)
	if !ok {
		close(h.done)
		return nil
	}
	go func() {
		defer close(h.done)
		t := time.NewTicker(healthEvery)
		defer t.Stop()
		for {
			select {
			case <-h.quit:
				return
			case <-t.C:
			}
			if err := hr.Err(); err != nil {
				h.s.storeErr.Store(&err)
				h.s.log.Error("the backend's store failed: draining and exiting; restart the host (it reopens the store from disk)", "error", err)
				h.s.stopOnItsOwn()
				return
			}
		}
	}()
	return nil
}

func (h *healthCheck) stop(context.Context) error {
	close(h.quit)
	if h.started.Load() {
		<-h.done
	}
	return nil
}

// listener serves Handler on Config.Listener, when there is one.
type listener struct {
	s        *Server
	srv      *http.Server
	serving  atomic.Bool // serveErr then receives once the server ends
	serveErr chan error
}

func newListener(s *Server) *listener {
	l := &listener{s: s, serveErr: make(chan error, 1), srv: &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}}
	if s.tlsCert != nil {
		l.srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{*s.tlsCert}}
	}
	return l
}

func (l *listener) start(context.Context) error {
	ln := l.s.cfg.Listener
	if ln == nil {
		return nil
	}
	l.serving.Store(true)
	go func() {
		var err error
		if l.srv.TLSConfig != nil {
			err = l.srv.ServeTLS(ln, "", "") // the key pair New loaded
		} else {
			err = l.srv.Serve(ln)
		}
		switch {
		case errors.Is(err, http.ErrServerClosed):
		case !l.s.draining.Load():
			l.s.serveErr.Store(&err) // before Done closes: Stop returns it
			l.s.log.Error("the HTTP API stopped", "error", err)
			l.s.stopOnItsOwn()
		default: // the drain stops the host anyway: said, not returned
			l.s.log.Warn("the HTTP API stopped during the drain", "error", err)
		}
		l.serveErr <- err
	}()
	return nil
}

// stop ends the API within ctx (the time before the backend's: a slow client does not
// eat the backend's time), then closes the connections still open. A listener never
// served is closed.
func (l *listener) stop(ctx context.Context) error {
	ln := l.s.cfg.Listener
	if ln == nil {
		return nil
	}
	if !l.serving.Load() {
		ln.Close()
		return nil
	}
	if err := l.srv.Shutdown(ctx); err != nil {
		l.srv.Close()
	}
	<-l.serveErr
	return nil
}

// beforeBackend is ctx for a part stopped before the backend: its deadline less
// backendCloseSlice, so that the backend, closed after it, gets its own time to write
// out its state rather than a context that the part let expire.
func beforeBackend(ctx context.Context) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok {
		return context.WithDeadline(ctx, dl.Add(-backendCloseSlice))
	}
	return context.WithCancel(ctx)
}

// moduleHistoryDir is where the registry keeps the modules' last versions and pins: in
// the backend's data directory, which is the host's own and durable; on the other
// backends under the cache directory, in a directory of the modules directory's own
// (named by the sha256 of its absolute path), so that two hosts of one machine with
// other modules keep apart. Empty (kept in memory) when there is no cache directory.
func moduleHistoryDir(b backend.Backend, cacheDir, modules string) string {
	if d := dataDir(b); d != "" {
		return filepath.Join(d, "module-history")
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
