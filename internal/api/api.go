// Package api is the HTTP API of `wasmjobs run`: enqueue jobs, follow them, and inspect
// queues, modules and dead letters. Every response is JSON; every error is
// {"error": "..."} with a 4xx or 5xx status that says whose fault it is.
package api

import (
	"context"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/host"
	"github.com/wasmjobs/wasmjobs/worker"
)

// Defaults of Config.
const (
	DefaultMaxBody  = 4 << 20 // a 1 MiB payload in base64 inside JSON fits
	MaxBatch        = 1000
	DefaultPriority = worker.DefaultPriorityLevels // jobs may use 0..levels-1
)

// Config is what the API serves.
type Config struct {
	Backend  backend.Backend
	Registry *host.Registry
	// Running reports the running jobs per queue (worker.Worker.Running).
	Running func() map[string]int
	History *History
	// Metrics serves /metrics; nil leaves it out.
	Metrics http.Handler
	// Token, when set, is required as "Authorization: Bearer TOKEN" on every request
	// but /healthz and /readyz.
	Token string
	// Ready reports whether the host serves jobs (for /readyz).
	Ready func() bool
	// MaxBody bounds request bodies; zero means DefaultMaxBody.
	MaxBody int64
	Logger  *slog.Logger
}

// server serves the API.
type server struct {
	cfg Config
	log *slog.Logger
}

// New returns the API's handler.
func New(cfg Config) http.Handler {
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = DefaultMaxBody
	}
	if cfg.Ready == nil {
		cfg.Ready = func() bool { return true }
	}
	s := &server{cfg: cfg, log: cfg.Logger}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/jobs", s.enqueue)
	mux.HandleFunc("POST /v1/jobs/batch", s.enqueueBatch)
	mux.HandleFunc("GET /v1/jobs/{id}", s.getJob)
	mux.HandleFunc("GET /v1/queues", s.queues)
	mux.HandleFunc("GET /v1/modules", s.modules)
	mux.HandleFunc("GET /v1/dead-letters", s.deadLetters)
	mux.HandleFunc("DELETE /v1/dead-letters", s.purgeDeadLetters)
	mux.HandleFunc("POST /v1/dead-letters/{id}/replay", s.replay)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
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
	return s.auth(mux)
}

// auth requires the bearer token where one is configured.
func (s *server) auth(next http.Handler) http.Handler {
	if s.cfg.Token == "" {
		return next
	}
	want := []byte("Bearer " + s.cfg.Token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" && r.URL.Path != "/readyz" &&
			subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="wasmjobs"`)
			writeError(w, http.StatusUnauthorized, "missing or wrong bearer token")
			return
		}
		next.ServeHTTP(w, r)
	})
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

// envelope validates a request and makes its job.
func (s *server) envelope(req EnqueueRequest) (backend.Envelope, time.Duration, error) {
	if req.Queue == "" {
		return backend.Envelope{}, 0, badRequest("queue is required")
	}
	mod, err := s.served(req.Queue)
	if err != nil {
		return backend.Envelope{}, 0, err
	}
	var payload []byte
	switch {
	case req.Payload != nil && req.PayloadBase64 != nil:
		return backend.Envelope{}, 0, badRequest("give payload or payload_base64, not both")
	case req.PayloadBase64 != nil:
		payload, err = base64.StdEncoding.DecodeString(*req.PayloadBase64)
		if err != nil {
			return backend.Envelope{}, 0, badRequest("payload_base64: %v", err)
		}
	case req.Payload != nil:
		payload = []byte(*req.Payload)
	}
	if limit := s.payloadLimit(mod.Name); len(payload) > limit {
		return backend.Envelope{}, 0, &httpError{http.StatusRequestEntityTooLarge,
			fmt.Sprintf("payload of %d bytes passes queue %s's limit of %d bytes", len(payload), req.Queue, limit)}
	}
	var delay time.Duration
	if req.Delay != "" {
		delay, err = time.ParseDuration(req.Delay)
		if err != nil {
			return backend.Envelope{}, 0, badRequest("delay: want a duration such as \"90s\" or \"1h30m\", got %q", req.Delay)
		}
		if delay < 0 {
			return backend.Envelope{}, 0, badRequest("delay %q is negative", req.Delay)
		}
	}
	if req.Priority < 0 || req.Priority >= DefaultPriority {
		return backend.Envelope{}, 0, badRequest("priority %d: want 0 to %d", req.Priority, DefaultPriority-1)
	}
	if req.MaxAttempts < 0 {
		return backend.Envelope{}, 0, badRequest("max_attempts %d: want 0 (the queue's) or more", req.MaxAttempts)
	}
	for k := range req.Headers {
		if k == "" {
			return backend.Envelope{}, 0, badRequest("headers: empty key")
		}
		if strings.HasPrefix(k, "wasmjobs-") {
			return backend.Envelope{}, 0, badRequest("headers: %q: the prefix wasmjobs- is reserved", k)
		}
	}
	env := backend.NewEnvelope(req.Queue, payload)
	env.Headers, env.Priority, env.MaxAttempts = req.Headers, uint8(req.Priority), req.MaxAttempts
	return env, delay, nil
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
	return nil
}

func (s *server) enqueue(w http.ResponseWriter, r *http.Request) {
	var req EnqueueRequest
	if err := s.decode(w, r, &req); err != nil {
		fail(w, err)
		return
	}
	env, delay, err := s.envelope(req)
	if err != nil {
		fail(w, err)
		return
	}
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
	for i, j := range req.Jobs {
		var err error
		if envs[i], delays[i], err = s.envelope(j); err != nil {
			var he *httpError
			if errors.As(err, &he) {
				he.msg = fmt.Sprintf("jobs[%d]: %s", i, he.msg)
			}
			fail(w, err)
			return
		}
	}
	ids := make([]string, 0, len(envs))
	for i, env := range envs {
		if err := s.publish(r.Context(), env, delays[i]); err != nil {
			writeJSON(w, http.StatusServiceUnavailable, map[string]any{"error": err.Error(), "ids": ids})
			return
		}
		ids = append(ids, env.ID)
	}
	writeJSON(w, http.StatusAccepted, map[string]any{"ids": ids})
}

func (s *server) getJob(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	st, ok := s.cfg.History.Get(id)
	if !ok {
		writeError(w, http.StatusNotFound, "job %q is not in this host's recent history", id)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// QueueInfo describes a served queue in GET /v1/queues.
type QueueInfo struct {
	Name    string `json:"name"`
	Module  string `json:"module"`
	Running int    `json:"running"`
	backend.QueueStats
}

func (s *server) queues(w http.ResponseWriter, r *http.Request) {
	running := map[string]int{}
	if s.cfg.Running != nil {
		running = s.cfg.Running()
	}
	out := []QueueInfo{}
	for _, m := range s.cfg.Registry.Modules() {
		if m.Status != "serving" {
			continue
		}
		qi := QueueInfo{Name: m.Queue, Module: m.Name, Running: running[m.Queue],
			QueueStats: backend.QueueStats{Pending: -1, Unacked: -1, Delayed: -1, Deferred: -1, Dead: -1}}
		if sr, ok := s.cfg.Backend.(backend.StatsReader); ok {
			if st, err := sr.QueueStats(r.Context(), m.Queue); err == nil {
				qi.QueueStats = st
			}
		}
		out = append(out, qi)
	}
	writeJSON(w, http.StatusOK, map[string]any{"queues": out})
}

func (s *server) modules(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"modules": s.cfg.Registry.Modules()})
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
