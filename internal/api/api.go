// Package api is the HTTP API of `wasmjobs run`: enqueue jobs, follow them, and inspect
// queues, modules and dead letters. Every response is JSON; every error is
// {"error": "..."} with a 4xx or 5xx status that says whose fault it is.
package api

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/host"
	"github.com/wasmjobs/wasmjobs/internal/jobspec"
	"github.com/wasmjobs/wasmjobs/internal/schedule"
)

// Defaults of Config.
const (
	DefaultMaxBody  = 4 << 20 // a 1 MiB payload in base64 inside JSON fits
	MaxBatch        = 1000
	DefaultPriority = jobspec.PriorityLevels // jobs may use 0..levels-1
)

// Config is what the API serves.
type Config struct {
	Backend  backend.Backend
	Registry *host.Registry
	// Running reports the running jobs per queue (worker.Worker.Running).
	Running func() map[string]int
	// History answers GET /v1/jobs/{id} when the backend keeps no job records (it is
	// not a backend.JobRecordReader); nil remembers nothing.
	History *History
	// Attempts gives the attempts (each with its calls) of GET /v1/jobs/{id} when the
	// backend keeps no job records; nil lists none.
	Attempts *Attempts
	// Rates answers GET /v1/rates; nil reports zeros.
	Rates *Rates
	// Metrics serves /metrics; nil leaves it out.
	Metrics http.Handler
	// AuthLimiter bounds the wrong bearer tokens tried (see AuthLimiter); the
	// dashboard's too (ui.Config.AuthLimiter) when both serve one host. Nil means one
	// of the API's own.
	AuthLimiter *AuthLimiter
	// Token, when set, is required as "Authorization: Bearer TOKEN" on every request
	// but /healthz and /readyz.
	Token string
	// Ready reports whether the host serves jobs (for /readyz). Nil means always.
	Ready func() bool
	// Healthy reports what broke the host (a failed store) for /healthz, which then
	// answers 503 with it; nil means always healthy.
	Healthy func() error
	// Accepting reports whether the host takes new jobs: POST /v1/jobs, the batch and
	// dead-letter replays answer 503 while it is false, so that no job is accepted
	// that the drain would then drop. Nil means Ready: a host that drains stops being
	// ready and stops taking jobs at the same moment. A durable backend, which keeps
	// what is queued for the next start, may accept through the drain.
	Accepting func() bool
	// Loopback says the API listens on a loopback address only. It then refuses a
	// request whose Host header is not a loopback name or address (localhost,
	// 127.0.0.0/8, [::1]), so that a DNS name rebound to 127.0.0.1 by a web page
	// cannot reach it.
	Loopback bool
	// BackupDir is the directory POST /v1/backup writes backups into (run's
	// --backup-dir), absolute; empty turns backups off (501). A request names only
	// the backup, never a path.
	BackupDir string
	// Schedules lists the modules' periodic schedules for GET /v1/schedules
	// (schedules.go); nil lists none.
	Schedules func() []schedule.Status
	// RefusedPushes lists the module pushes this host refused (internal/fleet), for
	// GET /v1/modules' refused_pushes; nil, or a nil answer, leaves the field out.
	RefusedPushes func() any
	// MaxBody bounds request bodies; zero means DefaultMaxBody.
	MaxBody int64
	Logger  *slog.Logger
}

// server serves the API.
type server struct {
	cfg       Config
	log       *slog.Logger
	limit     *AuthLimiter
	backupSem chan struct{} // one backup at a time
}

// New returns the API's handler.
func New(cfg Config) http.Handler {
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = DefaultMaxBody
	}
	if cfg.Ready == nil {
		cfg.Ready = func() bool { return true }
	}
	if cfg.Accepting == nil {
		cfg.Accepting = cfg.Ready
	}
	s := &server{cfg: cfg, log: cfg.Logger, limit: cfg.AuthLimiter, backupSem: make(chan struct{}, 1)}
	if s.limit == nil {
		s.limit = NewAuthLimiter()
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/jobs", s.enqueue)
	mux.HandleFunc("POST /v1/jobs/batch", s.enqueueBatch)
	mux.HandleFunc("GET /v1/jobs/{id}", s.getJob)
	mux.HandleFunc("GET /v1/queues", s.queues)
	mux.HandleFunc("GET /v1/queues/{queue}/jobs", s.listJobs)
	mux.HandleFunc("POST /v1/jobs/{id}/cancel", s.jobAction(ActionCancel))
	mux.HandleFunc("POST /v1/jobs/{id}/retry", s.jobAction(ActionRetry))
	mux.HandleFunc("DELETE /v1/jobs/{id}", s.jobAction(ActionDelete))
	mux.HandleFunc("GET /v1/rates", s.rates)
	mux.HandleFunc("GET /v1/modules", s.modules)
	mux.HandleFunc("GET /v1/modules/{name}/history", s.moduleHistory)
	mux.HandleFunc("POST /v1/modules/{name}/rollback", s.moduleRollback)
	mux.HandleFunc("POST /v1/modules/{name}/promote", s.modulePromote)
	mux.HandleFunc("GET /v1/schedules", s.schedules)
	mux.HandleFunc("GET /v1/dead-letters", s.deadLetters)
	mux.HandleFunc("DELETE /v1/dead-letters", s.purgeDeadLetters)
	mux.HandleFunc("POST /v1/dead-letters/{id}/replay", s.replay)
	mux.HandleFunc("POST /v1/backup", s.backup)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.Healthy != nil {
			if err := s.cfg.Healthy(); err != nil {
				writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "failed", "error": err.Error()})
				return
			}
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if !s.cfg.Ready() {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready"})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	})
	if cfg.Metrics != nil {
		mux.Handle("GET /metrics", cfg.Metrics)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such endpoint: %s %s", r.Method, r.URL.Path)
	})
	// Outermost first: a foreign Host, a cross-site state change and a body that is not
	// JSON are refused before the token is even looked at.
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusForbidden, "cross-origin request refused: %s %s comes from another site (Origin %q)", r.Method, r.URL.Path, r.Header.Get("Origin"))
	}))
	h := cop.Handler(requireJSON(s.auth(mux)))
	if cfg.Loopback {
		h = loopbackOnly(h)
	}
	return h
}

// requireJSON refuses a request with a body that is not declared as JSON. A browser
// sends a cross-site form or a text/plain body without asking first (no CORS
// preflight); it must ask to send application/json, and this API never says yes.
func requireJSON(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength != 0 { // -1: a body of unknown length
			ct := r.Header.Get("Content-Type")
			if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
				writeError(w, http.StatusUnsupportedMediaType, "Content-Type %q: a request body must be application/json", ct)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// loopbackOnly refuses a request whose Host is not a loopback name or address: on a
// loopback listener any other Host means a DNS name was rebound to this machine. A
// request without a Host (HTTP/1.0, such as a load balancer's health check) passes: a
// browser always sends one, so its absence cannot be a rebinding.
func loopbackOnly(next http.Handler) http.Handler { return LoopbackOnly(next) }

// LoopbackOnly is the API's Host check, for the dashboard on the same listener.
func LoopbackOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Host != "" && !IsLoopbackHost(r.Host) {
			writeError(w, http.StatusForbidden, "Host %q refused: this API listens on loopback and answers only to localhost, 127.0.0.0/8 or [::1]", r.Host)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// IsLoopbackHost reports whether host, a Host header with or without a port, names
// this machine's loopback: localhost (also fully qualified, "localhost."), an address
// of 127.0.0.0/8, or [::1].
func IsLoopbackHost(host string) bool {
	h, _, err := net.SplitHostPort(host)
	if err != nil { // no port
		h = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	}
	if strings.EqualFold(strings.TrimSuffix(h, "."), "localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// errDraining answers an enqueue while the host drains.
var errDraining = &httpError{http.StatusServiceUnavailable,
	"the host is draining (shutting down) and takes no new jobs: enqueue through another host, or after it restarts"}

// accepting fails an enqueue while the host drains. A request that passed it is
// checked again after its publish (see publish).
func (s *server) accepting() error {
	if !s.cfg.Accepting() {
		return errDraining
	}
	return nil
}

// auth requires the bearer token where one is configured. A token sent is looked at
// only within the limit of wrong ones (AuthLimiter); a request without one (or with
// another scheme, such as a proxy's Basic) tries none and is not counted.
func (s *server) auth(next http.Handler) http.Handler {
	if s.cfg.Token == "" {
		return next
	}
	want := []byte(s.cfg.Token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" || r.URL.Path == "/readyz" {
			next.ServeHTTP(w, r)
			return
		}
		if got, ok := BearerToken(r); ok {
			right := subtle.ConstantTimeCompare([]byte(got), want) == 1
			if d := s.limit.Check(r, right); d > 0 {
				after := RetryAfter(d)
				w.Header().Set("Retry-After", after)
				writeError(w, http.StatusTooManyRequests, "too many wrong tokens, from your address or from all of them together: no token is looked at before %s s from now", after)
				return
			}
			if right {
				next.ServeHTTP(w, r)
				return
			}
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="wasmjobs"`)
		writeError(w, http.StatusUnauthorized, "missing or wrong bearer token")
	})
}

// BearerToken is the token of r's "Authorization: Bearer TOKEN" header (the scheme in
// any case, RFC 9110 11.1); ok is false without one, or with another scheme.
func BearerToken(r *http.Request) (token string, ok bool) {
	scheme, token, found := strings.Cut(r.Header.Get("Authorization"), " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return token, true
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
}

func writeError(w http.ResponseWriter, status int, format string, args ...any) {
	writeJSON(w, status, map[string]string{"error": fmt.Sprintf(format, args...)})
}

// httpError is an error with the status it answers with.
type httpError struct {
	status int
	msg    string
}

func (e *httpError) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &httpError{http.StatusBadRequest, fmt.Sprintf(format, args...)}
}

func fail(w http.ResponseWriter, err error) {
	var he *httpError
	if errors.As(err, &he) {
		writeError(w, he.status, "%s", he.msg)
		return
	}
	if errors.Is(err, backend.ErrUnknownQueue) || errors.Is(err, backend.ErrNotFound) {
		writeError(w, http.StatusNotFound, "%v", err)
		return
	}
	if errors.Is(err, backend.ErrJobState) {
		writeError(w, http.StatusConflict, "%v", err)
		return
	}
	if errors.Is(err, ErrUnavailable) {
		writeError(w, http.StatusNotImplemented, "%v", err)
		return
	}
	if errors.Is(err, backend.ErrDelayTooLong) {
		// The backend's own ceiling (RabbitMQ's delay chain is shorter than
		// backend.MaxDelay, which the request checks already): the client's to fix.
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	// A full disk (pebble.ErrDiskFull) and a failed store (pebble.ErrStoreFailed) are
	// the host's trouble, not the client's: 503, with the data directory named by the
	// backend's message. Nothing else is written: the client may try again later.
	writeError(w, http.StatusServiceUnavailable, "%v", err)
}

// decode reads a JSON body into v, strictly.
func (s *server) decode(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, s.cfg.MaxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var tooBig *http.MaxBytesError
		var syntax *json.SyntaxError
		var typ *json.UnmarshalTypeError
		switch {
		case errors.As(err, &tooBig):
			return &httpError{http.StatusRequestEntityTooLarge, fmt.Sprintf("request body passes the limit of %d bytes", s.cfg.MaxBody)}
		case errors.As(err, &syntax):
			return badRequest("invalid JSON at byte %d: %v", syntax.Offset, err)
		case errors.As(err, &typ):
			return badRequest("field %s: want %s, got %s", typ.Field, typ.Type, typ.Value)
		case errors.Is(err, io.EOF):
			return badRequest("empty body: want a JSON object")
		case errors.Is(err, io.ErrUnexpectedEOF):
			return badRequest("invalid JSON: the body ends early")
		}
		return badRequest("invalid request: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	if dec.More() {
		return badRequest("invalid JSON: more than one value in the body")
	}
	return nil
}

// EnqueueRequest is the body of POST /v1/jobs.
type EnqueueRequest struct {
	Queue         string            `json:"queue"`
	Payload       *string           `json:"payload,omitempty"`
	PayloadBase64 *string           `json:"payload_base64,omitempty"`
	Headers       map[string]string `json:"headers,omitempty"`
	Delay         string            `json:"delay,omitempty"`
	Priority      int               `json:"priority,omitempty"`
	MaxAttempts   int               `json:"max_attempts,omitempty"`
	// UniqueKey makes the job unique in its queue; UniqueFor ("1h") is how long the
	// key stays held after the job finished (see unique.go).
	UniqueKey string `json:"unique_key,omitempty"`
	UniqueFor string `json:"unique_for,omitempty"`
}

// served returns the module serving queue, or an error naming the served queues.
func (s *server) served(queue string) (host.ModuleStatus, error) {
	var names []string
	for _, m := range s.cfg.Registry.Modules() {
		if m.Status != "serving" {
			continue
		}
		if m.Queue == queue {
			return m, nil
		}
		names = append(names, m.Queue)
	}
	slices.Sort(names)
	return host.ModuleStatus{}, &httpError{http.StatusNotFound,
		fmt.Sprintf("unknown queue %q: no module serves it (served: %s)", queue, strings.Join(names, ", "))}
}

// envelope validates a request and makes its job, with its delay and unique key.
func (s *server) envelope(req EnqueueRequest) (backend.UniquePublication, error) {
	spec := jobspec.Spec{Queue: req.Queue, Headers: req.Headers, Priority: req.Priority, MaxAttempts: req.MaxAttempts, UniqueKey: req.UniqueKey}
	none := backend.UniquePublication{}
	limit := 0
	if req.Queue != "" {
		mod, err := s.served(req.Queue)
		if err != nil {
			return none, err
		}
		limit = s.payloadLimit(mod.Name)
	}
	var err error
	switch {
	case req.Payload != nil && req.PayloadBase64 != nil:
		return none, badRequest("give payload or payload_base64, not both")
	case req.PayloadBase64 != nil:
		spec.Payload, err = base64.StdEncoding.DecodeString(*req.PayloadBase64)
		if err != nil {
			return none, badRequest("payload_base64: %v", err)
		}
	case req.Payload != nil:
		spec.Payload = []byte(*req.Payload)
	}
	if req.Delay != "" {
		spec.Delay, err = time.ParseDuration(req.Delay)
		if err != nil {
			return none, badRequest("delay: want a duration such as \"90s\" or \"1h30m\", got %q", req.Delay)
		}
	}
	if req.UniqueFor != "" {
		spec.UniqueFor, err = time.ParseDuration(req.UniqueFor)
		if err != nil {
			return none, badRequest("unique_for: want a duration such as \"10m\" or \"24h\", got %q", req.UniqueFor)
		}
	}
	if err := jobspec.Validate(spec, limit); err != nil {
		if errors.Is(err, jobspec.ErrTooLarge) {
			return none, &httpError{http.StatusRequestEntityTooLarge, err.Error()}
		}
		return none, badRequest("%v", err)
	}
	return spec.Publication(), nil
}

func (s *server) payloadLimit(module string) int {
	if h := s.cfg.Registry.Handler(module); h != nil {
		return h.Module().Manifest().Limits.MaxPayload
	}
	return host.DefaultLimits().MaxPayload
}

func (s *server) publish(ctx context.Context, env backend.Envelope, delay time.Duration) error {
	// Recorded first: on a fast backend the job can run and settle before Publish
	// returns, and its later states must not be overwritten by "pending".
	s.cfg.History.Enqueued(env, delay > 0)
	if err := s.cfg.Backend.Publish(ctx, env, delay); err != nil {
		s.cfg.History.Forget(env.ID)
		return fmt.Errorf("publishing to queue %s: %w", env.Queue, err)
	}
	// A 202 means the job was in before the drain began. One whose publish the first
	// signal overtook may be dropped at exit: the client must not count on it.
	if !s.cfg.Accepting() {
		// The client is told the job was refused: GET must not show it as pending. If
		// it runs all the same, its events record it again.
		s.cfg.History.Forget(env.ID)
		return &httpError{http.StatusServiceUnavailable, fmt.Sprintf(
			"the host is draining (shutting down): it began while job %s was published, which may be dropped at exit; enqueue it again through another host, or after it restarts", env.ID)}
	}
	return nil
}

func (s *server) enqueue(w http.ResponseWriter, r *http.Request) {
	if err := s.accepting(); err != nil {
		fail(w, err)
		return
	}
	var req EnqueueRequest
	if err := s.decode(w, r, &req); err != nil {
		fail(w, err)
		return
	}
	pub, err := s.envelope(req)
	if err != nil {
		fail(w, err)
		return
	}
	if pub.Key != "" {
		s.enqueueUnique(w, r, []backend.UniquePublication{pub}, false)
		return
	}
	env, delay := pub.Envelope, pub.Delay
	if err := s.publish(r.Context(), env, delay); err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusAccepted, map[string]string{"id": env.ID})
}

// BatchRequest is the body of POST /v1/jobs/batch.
type BatchRequest struct {
	Jobs []EnqueueRequest `json:"jobs"`
}

func (s *server) enqueueBatch(w http.ResponseWriter, r *http.Request) {
	if err := s.accepting(); err != nil {
		fail(w, err)
		return
	}
	var req BatchRequest
	if err := s.decode(w, r, &req); err != nil {
		fail(w, err)
		return
	}
	if len(req.Jobs) == 0 || len(req.Jobs) > MaxBatch {
		fail(w, badRequest("jobs: want 1 to %d jobs, got %d", MaxBatch, len(req.Jobs)))
		return
	}
	envs := make([]backend.Envelope, len(req.Jobs))
	delays := make([]time.Duration, len(req.Jobs))
	pubs := make([]backend.UniquePublication, len(req.Jobs))
	unique := false
	for i, j := range req.Jobs {
		var err error
		if pubs[i], err = s.envelope(j); err != nil {
			var he *httpError
			if errors.As(err, &he) {
				he.msg = fmt.Sprintf("jobs[%d]: %s", i, he.msg)
			}
			fail(w, err)
			return
		}
		envs[i], delays[i] = pubs[i].Envelope, pubs[i].Delay
		unique = unique || pubs[i].Key != ""
	}
	if unique {
		s.enqueueUnique(w, r, pubs, true)
		return
	}
	if bp, ok := s.cfg.Backend.(backend.BatchPublisher); ok {
		s.publishBatch(w, r, bp, envs, delays)
		return
	}
	ids := make([]string, 0, len(envs))
	for i, env := range envs {
		if err := s.publish(r.Context(), env, delays[i]); err != nil {
			// ids holds the jobs accepted before the failure (or the drain).
			writeJSON(w, http.StatusServiceUnavailable, map[string]any{"error": err.Error(), "ids": ids})
			return
		}
		ids = append(ids, env.ID)
	}
	writeJSON(w, http.StatusAccepted, map[string]any{"ids": ids})
}

// publishBatch publishes a batch in one atomic write: every job is accepted, or none.
func (s *server) publishBatch(w http.ResponseWriter, r *http.Request, bp backend.BatchPublisher, envs []backend.Envelope, delays []time.Duration) {
	pubs := make([]backend.Publication, len(envs))
	ids := make([]string, len(envs))
	for i, env := range envs {
		pubs[i] = backend.Publication{Envelope: env, Delay: delays[i]}
		ids[i] = env.ID
		s.cfg.History.Enqueued(env, delays[i] > 0) // first: see publish
	}
	if err := bp.PublishBatch(r.Context(), pubs); err != nil {
		for _, id := range ids {
			s.cfg.History.Forget(id)
		}
		if errors.Is(err, backend.ErrUnknownQueue) || errors.Is(err, backend.ErrDelayTooLong) {
			fail(w, fmt.Errorf("publishing a batch of %d jobs: %w", len(envs), err))
			return
		}
		// The batch is one write: whole or not at all. But a write that ended with the
		// request's context, or with a store that failed while committing it, may have
		// landed: the caller gets the ids to look up rather than a "none" that may lie.
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || s.storeFailed() {
			writeJSON(w, http.StatusServiceUnavailable, map[string]any{
				"error": fmt.Sprintf("publishing a batch of %d jobs: %v; the batch may have been accepted (all of it or none): check with GET /v1/jobs/{id} for the ids given", len(envs), err), "ids": ids})
			return
		}
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{
			"error": fmt.Sprintf("publishing a batch of %d jobs: none was accepted: %v", len(envs), err), "ids": []string{}})
		return
	}
	if !s.cfg.Accepting() {
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"error": fmt.Sprintf(
			"the host is draining (shutting down): it began while a batch of %d jobs was published, which may be dropped at exit; enqueue them again through another host, or after it restarts", len(envs)), "ids": []string{}})
		return
	}
	writeJSON(w, http.StatusAccepted, map[string]any{"ids": ids})
}

// storeFailed reports whether the backend says its store broke (the pebble backend's
// Err, non-nil once a commit failed: that commit may have reached the disk).
func (s *server) storeFailed() bool {
	hr, ok := s.cfg.Backend.(interface{ Err() error })
	return ok && hr.Err() != nil
}

// jobState is a backend's job record as GET /v1/jobs/{id} shows it.
func jobState(rec backend.JobRecord) JobState {
	st := JobState{ID: rec.ID, Queue: rec.Queue, State: string(rec.State), Attempt: rec.Attempt, MaxAttempts: rec.MaxAttempts,
		Reason: rec.Reason, Output: strings.ToValidUTF8(string(rec.Output), "\uFFFD"), OutputTruncated: rec.OutputTruncated,
		Logs: rec.Logs, LogsTruncated: rec.LogsTruncated, Module: ModuleRef{Name: rec.Module, Version: rec.ModuleVersion, Role: rec.ModuleRole},
		EnqueuedAt: rec.CreatedAt, UpdatedAt: rec.UpdatedAt, StartedAt: rec.StartedAt, FinishedAt: rec.FinishedAt, Children: rec.Children,
		Attempts: recordAttempts(rec)}
	if !rec.StartedAt.IsZero() && rec.FinishedAt.After(rec.StartedAt) {
		st.DurationMs = float64(rec.FinishedAt.Sub(rec.StartedAt).Microseconds()) / 1000
	}
	return st
}

func (s *server) getJob(w http.ResponseWriter, r *http.Request) {
	st, err := s.jobs().Get(r.Context(), r.PathValue("id"))
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// QueueInfo describes a served queue in GET /v1/queues. A count of -1 is one the
// backend cannot tell (RabbitMQ does not count unacked, delayed or deferred messages).
// When reading the counts failed, they are absent (QueueStats is nil) and Error says
// why: "unknown" and "failed" are never the same value.
type QueueInfo struct {
	Name    string `json:"name"`
	Module  string `json:"module"`
	Running int    `json:"running"`
	*backend.QueueStats
	// Error is why the counts could not be read, empty when they were.
	Error string `json:"error,omitempty"`
}

// unknownStats are the counts of a backend that cannot count at all.
var unknownStats = backend.QueueStats{Pending: -1, Unacked: -1, Delayed: -1, Deferred: -1, Dead: -1}

func (s *server) queues(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"queues": Queues(r.Context(), s.cfg.Backend, s.cfg.Registry, s.cfg.Running, s.log)})
}

// Queues describes every served queue with its counts, as GET /v1/queues shows them
// (and the dashboard's overview, so that the two never differ). running may be nil.
func Queues(ctx context.Context, b backend.Backend, reg *host.Registry, running func() map[string]int, log *slog.Logger) []QueueInfo {
	run := map[string]int{}
	if running != nil {
		run = running()
	}
	sr, canCount := b.(backend.StatsReader)
	out := []QueueInfo{}
	for _, m := range reg.Modules() {
		if m.Status != "serving" {
			continue
		}
		qi := QueueInfo{Name: m.Queue, Module: m.Name, Running: run[m.Queue], QueueStats: &backend.QueueStats{}}
		if !canCount {
			*qi.QueueStats = unknownStats
		} else if st, err := sr.QueueStats(ctx, m.Queue); err != nil {
			if log != nil {
				log.Error("counting a queue's messages failed", "queue", m.Queue, "error", err)
			}
			qi.QueueStats, qi.Error = nil, fmt.Sprintf("counting the messages of queue %s: %v", m.Queue, err)
		} else {
			*qi.QueueStats = st
		}
		out = append(out, qi)
	}
	return out
}

func (s *server) modules(w http.ResponseWriter, r *http.Request) {
	out := map[string]any{"modules": s.cfg.Registry.Modules()}
	if s.cfg.RefusedPushes != nil {
		if r := s.cfg.RefusedPushes(); r != nil {
			out["refused_pushes"] = r
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// DeadLetterInfo is a dead letter in GET /v1/dead-letters.
type DeadLetterInfo struct {
	ID            string            `json:"id"`
	Queue         string            `json:"queue"`
	Reason        string            `json:"reason"`
	At            time.Time         `json:"at"`
	Attempt       int               `json:"attempt"`
	Headers       map[string]string `json:"headers,omitempty"`
	Payload       string            `json:"payload"`
	PayloadBase64 string            `json:"payload_base64"`
}

func (s *server) store() (backend.DeadLetterStore, error) {
	store, ok := s.cfg.Backend.(backend.DeadLetterStore)
	if !ok {
		return nil, &httpError{http.StatusNotImplemented, "this backend cannot list dead letters"}
	}
	return store, nil
}

// queueParam reads the required, served queue of a dead-letter request.
func (s *server) queueParam(r *http.Request) (string, error) {
	q := r.URL.Query().Get("queue")
	if q == "" {
		return "", badRequest("the query parameter queue is required")
	}
	if _, err := s.served(q); err != nil {
		return "", err
	}
	return q, nil
}

func (s *server) deadLetters(w http.ResponseWriter, r *http.Request) {
	q, err := s.queueParam(r)
	if err != nil {
		fail(w, err)
		return
	}
	limit := 100
	if l := r.URL.Query().Get("limit"); l != "" {
		if limit, err = strconv.Atoi(l); err != nil || limit < 1 {
			fail(w, badRequest("limit %q: want a positive number", l))
			return
		}
	}
	store, err := s.store()
	if err != nil {
		fail(w, err)
		return
	}
	dead, err := store.DeadLetters(r.Context(), q, limit)
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"dead_letters": DeadLetterInfos(q, dead)})
}

// DeadLetterInfos describes a queue's dead letters as the API shows them.
func DeadLetterInfos(queue string, dead []backend.DeadLetter) []DeadLetterInfo {
	out := make([]DeadLetterInfo, 0, len(dead))
	for _, d := range dead {
		out = append(out, DeadLetterInfo{ID: d.Envelope.ID, Queue: queue, Reason: d.Reason, At: d.At, Attempt: d.Envelope.Attempt,
			Headers: d.Envelope.Headers, Payload: strings.ToValidUTF8(string(d.Envelope.Payload), "\uFFFD"),
			PayloadBase64: base64.StdEncoding.EncodeToString(d.Envelope.Payload)})
	}
	return out
}

func (s *server) replay(w http.ResponseWriter, r *http.Request) {
	if err := s.accepting(); err != nil {
		fail(w, err)
		return
	}
	id := r.PathValue("id")
	store, err := s.store()
	if err != nil {
		fail(w, err)
		return
	}
	queues := []string{}
	if q := r.URL.Query().Get("queue"); q != "" {
		if _, err := s.served(q); err != nil {
			fail(w, err)
			return
		}
		queues = append(queues, q)
	} else {
		for _, m := range s.cfg.Registry.Modules() {
			if m.Status == "serving" {
				queues = append(queues, m.Queue)
			}
		}
	}
	for _, q := range queues {
		s.cfg.History.Enqueued(backend.Envelope{ID: id, Queue: q, Attempt: 1}, false) // before: it may run at once
		err := store.ReplayDeadLetter(r.Context(), q, id)
		if err == nil {
			writeJSON(w, http.StatusOK, map[string]string{"id": id, "queue": q})
			return
		}
		s.cfg.History.Forget(id)
		if !errors.Is(err, backend.ErrNotFound) {
			fail(w, err)
			return
		}
	}
	writeError(w, http.StatusNotFound, "no dead letter %q in queues %s", id, strings.Join(queues, ", "))
}

func (s *server) purgeDeadLetters(w http.ResponseWriter, r *http.Request) {
	q, err := s.queueParam(r)
	if err != nil {
		fail(w, err)
		return
	}
	store, err := s.store()
	if err != nil {
		fail(w, err)
		return
	}
	n, err := store.PurgeDeadLetters(r.Context(), q)
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]int{"purged": n})
}

// Checkpointer is implemented by backends that can copy their store, consistently,
// while they run (the pebble backend): POST /v1/backup uses it.
type Checkpointer interface {
	// Checkpoint writes a consistent copy of the store into dir, which must not exist.
	Checkpoint(ctx context.Context, dir string) error
}

// beforeBackupRename, when set (by a test), is called just before a backup is moved
// into place: the window in which another process could make its name.
var beforeBackupRename atomic.Pointer[func(root, name string)]

// BackupRequest is the body of POST /v1/backup.
type BackupRequest struct {
	// Name is the backup's directory inside the host's --backup-dir: one path element
	// (no separator, no "..", not starting with "."), that must not exist yet. The
	// caller chooses only the name; the host chooses where backups go.
	Name string `json:"name"`
}

// checkBackupName refuses a name that is not one plain element inside the backup
// root: a separator, "..", an absolute path, or a leading "." (the host's own
// temporary directories start with ".tmp-").
func checkBackupName(name string) error {
	switch {
	case name == "":
		return badRequest("name is empty: give the backup's name, a directory made inside the host's --backup-dir")
	case !filepath.IsLocal(name) || strings.ContainsAny(name, `/\`) || strings.HasPrefix(name, "."):
		return badRequest("name %q: want one plain name (no separator, no \"..\", not starting with \".\"); the backup goes into the host's --backup-dir", name)
	}
	return nil
}

// backup copies the backend's store into a new directory under Config.BackupDir, while
// jobs run. It never writes outside that root and never removes what it did not make:
// the copy goes into a fresh temporary directory, made through an os.Root (so that a
// symbolic link is not followed out of the root), which is renamed to the name only
// when the copy is whole.
func (s *server) backup(w http.ResponseWriter, r *http.Request) {
	cp, ok := s.cfg.Backend.(Checkpointer)
	if !ok {
		writeError(w, http.StatusNotImplemented, "this backend keeps no data of its own to back up (only the pebble backend does; back RabbitMQ up with its own tools)")
		return
	}
	if s.cfg.BackupDir == "" {
		writeError(w, http.StatusNotImplemented, "backups are off: start run with --backup-dir DIR, the directory backups are written into")
		return
	}
	var req BackupRequest
	if err := s.decode(w, r, &req); err != nil {
		fail(w, err)
		return
	}
	if err := checkBackupName(req.Name); err != nil {
		fail(w, err)
		return
	}
	if !s.cfg.Ready() {
		writeError(w, http.StatusServiceUnavailable, "the host is draining (shutting down) or not started: no backup is taken; take it from the next run")
		return
	}
	// One backup at a time: two of the same name must not both pass the check below.
	select {
	case s.backupSem <- struct{}{}:
		defer func() { <-s.backupSem }()
	case <-r.Context().Done():
		fail(w, r.Context().Err())
		return
	}
	root, err := os.OpenRoot(s.cfg.BackupDir)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "backup directory: %v", err)
		return
	}
	defer root.Close()
	if _, err := root.Lstat(req.Name); err == nil {
		fail(w, &httpError{http.StatusConflict, fmt.Sprintf("backup %q exists in %s: give a new name", req.Name, s.cfg.BackupDir)})
		return
	} else if !errors.Is(err, fs.ErrNotExist) {
		writeError(w, http.StatusInternalServerError, "backup %q in %s: %v", req.Name, s.cfg.BackupDir, err)
		return
	}
	var rnd [8]byte
	rand.Read(rnd[:])
	tmp := fmt.Sprintf(".tmp-%s-%x", req.Name, rnd)
	if err := root.Mkdir(tmp, 0o700); err != nil {
		writeError(w, http.StatusInternalServerError, "backup %q: making its temporary directory in %s: %v", req.Name, s.cfg.BackupDir, err)
		return
	}
	defer root.RemoveAll(tmp) // ours only: a fresh name, made above
	// The store writes into a fresh directory inside tmp, which only this user can
	// enter: nothing of anyone else's is on that path.
	inner := filepath.Join(tmp, "data")
	start := time.Now()
	if err := cp.Checkpoint(r.Context(), filepath.Join(s.cfg.BackupDir, inner)); err != nil {
		writeError(w, http.StatusInternalServerError, "backup %q: %v", req.Name, err)
		return
	}
	if err := root.Chmod(inner, 0o700); err != nil {
		writeError(w, http.StatusInternalServerError, "backup %q: %v", req.Name, err)
		return
	}
	if h := beforeBackupRename.Load(); h != nil {
		(*h)(s.cfg.BackupDir, req.Name)
	}
	// The existence check above was before the copy: another process may have made the
	// name since. The rename refuses to replace it (renameNoReplace).
	if err := renameNoReplace(root, tmp, "data", req.Name); errors.Is(err, fs.ErrExist) {
		fail(w, &httpError{http.StatusConflict, fmt.Sprintf("backup %q exists in %s: made by someone else while the backup was written, and left as it is; give a new name", req.Name, s.cfg.BackupDir)})
		return
	} else if err != nil {
		writeError(w, http.StatusInternalServerError, "backup %q: moving it into place in %s: %v", req.Name, s.cfg.BackupDir, err)
		return
	}
	dir := filepath.Join(s.cfg.BackupDir, req.Name)
	s.log.Info("backup written", "dir", dir, "took", time.Since(start))
	writeJSON(w, http.StatusOK, map[string]any{"name": req.Name, "dir": dir, "took_ms": float64(time.Since(start).Microseconds()) / 1000})
}
