// Package api is the HTTP API of `wasmjobs run`: enqueue jobs, follow them, and inspect
// queues, modules and dead letters. It is a thin layer over an inspect.Inspector, which
// holds the rules and reads the backend. Every response is JSON; every error is
// {"error": "..."} with a 4xx or 5xx status that says whose fault it is
// (inspect.HTTPError).
package api

import (
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
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/wasmjobs/wasmjobs/internal/telemetry"

	"github.com/wasmjobs/wasmjobs/internal/app/inspect"
	"github.com/wasmjobs/wasmjobs/internal/jobspec"
)

// Defaults of Config.
const (
	DefaultMaxBody  = 4 << 20 // a 1 MiB payload in base64 inside JSON fits
	MaxBatch        = inspect.MaxBatch
	DefaultPriority = jobspec.PriorityLevels // jobs may use 0..levels-1
	// DefaultHistory is how many recent jobs GET /v1/jobs/{id} can answer for on a
	// backend without job records: the host's memory of its jobs (inspect.Records).
	DefaultHistory = inspect.DefaultRecords
)

// Config is what the API serves.
type Config struct {
	// Inspector answers and acts on everything the API is asked (required): the
	// backend, the registry, the host's memory of its jobs, rates, schedules, and
	// whether the host takes new jobs (inspect.Config.Refusal: while it has an error,
	// the enqueues, retries and replays answer 503 with it).
	Inspector *inspect.Inspector
	// Metrics serves /metrics; nil leaves it out.
	Metrics http.Handler
	// AuthLimiter bounds the wrong bearer tokens tried (see inspect.AuthLimiter); the
	// dashboard's too (ui.Config.AuthLimiter) when both serve one host. Nil means one
	// of the API's own.
	AuthLimiter *inspect.AuthLimiter
	// Token, when set, is required as "Authorization: Bearer TOKEN" on every request
	// but /healthz and /readyz.
	Token string
	// Ready reports whether the host serves jobs (for /readyz, and a backup is taken
	// only while it is true). Nil means always.
	Ready func() bool
	// Healthy reports what broke the host (a failed store) for /healthz, which then
	// answers 503 with it; nil means always healthy.
	Healthy func() error
	// Loopback says the API listens on a loopback address only. It then refuses a
	// request whose Host header is not a loopback name or address (localhost,
	// 127.0.0.0/8, [::1]), so that a DNS name rebound to 127.0.0.1 by a web page
	// cannot reach it.
	Loopback bool
	// BackupDir is the directory POST /v1/backup writes backups into (run's
	// --backup-dir), absolute; empty turns backups off (501). A request names only
	// the backup, never a path.
	BackupDir string
	// MaxBody bounds request bodies; zero means DefaultMaxBody.
	MaxBody int64
	Logger  *slog.Logger
}

// server serves the API.
type server struct {
	cfg       Config
	in        *inspect.Inspector
	log       *slog.Logger
	limit     *inspect.AuthLimiter
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
	s := &server{cfg: cfg, in: cfg.Inspector, log: cfg.Logger, limit: cfg.AuthLimiter, backupSem: make(chan struct{}, 1)}
	if s.limit == nil {
		s.limit = inspect.NewAuthLimiter()
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /v1/jobs", handler(s.enqueue))
	mux.Handle("POST /v1/jobs/batch", handler(s.enqueueBatch))
	mux.Handle("GET /v1/jobs/{id}", handler(s.getJob))
	mux.HandleFunc("GET /v1/queues", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"queues": s.in.Queues(r.Context())})
	})
	mux.Handle("GET /v1/queues/{queue}/jobs", handler(s.listJobs))
	mux.Handle("POST /v1/jobs/{id}/cancel", s.jobAction(inspect.ActionCancel))
	mux.Handle("POST /v1/jobs/{id}/retry", s.jobAction(inspect.ActionRetry))
	mux.Handle("DELETE /v1/jobs/{id}", s.jobAction(inspect.ActionDelete))
	mux.HandleFunc("GET /v1/rates", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"rates": s.in.Rates()})
	})
	mux.HandleFunc("GET /v1/modules", s.modules)
	mux.Handle("GET /v1/modules/{name}/history", handler(s.moduleHistory))
	mux.Handle("POST /v1/modules/{name}/rollback", handler(s.moduleRollback))
	mux.Handle("POST /v1/modules/{name}/promote", handler(s.modulePromote))
	mux.HandleFunc("GET /v1/schedules", s.schedules)
	mux.Handle("GET /v1/dead-letters", handler(s.deadLetters))
	mux.Handle("DELETE /v1/dead-letters", handler(s.purgeDeadLetters))
	mux.Handle("POST /v1/dead-letters/{id}/replay", handler(s.replay))
	mux.Handle("POST /v1/backup", handler(s.backup))
	s.routeGroups(mux)
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
	return inspect.Guard(requireJSON(s.auth(traceContext(mux))), cfg.Loopback, func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusForbidden, "cross-origin request refused: %s %s comes from another site (Origin %q)", r.Method, r.URL.Path, r.Header.Get("Origin"))
	})
}

// traceContext gives the request's context the caller's span, from its W3C
// traceparent and tracestate, if any: the parent of an enqueue's send span, the link of
// a replay.
func traceContext(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Traceparent") != "" {
			r = r.WithContext(telemetry.FromHTTP(r.Context(), r.Header))
		}
		next.ServeHTTP(w, r)
	})
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

// auth requires the bearer token where one is configured. A token sent is looked at
// only within the limit of wrong ones (inspect.AuthLimiter); a request without one (or
// with another scheme, such as a proxy's Basic) tries none and is not counted.
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
		if got, ok := inspect.BearerToken(r); ok {
			right := subtle.ConstantTimeCompare([]byte(got), want) == 1
			if d := s.limit.Check(r, right); d > 0 {
				after := inspect.RetryAfter(d)
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

func badRequest(format string, args ...any) error {
	return inspect.Errorf(inspect.ErrInvalid, format, args...)
}

// handler is an endpoint that answers its error through fail.
type handler func(w http.ResponseWriter, r *http.Request) error

func (h handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := h(w, r); err != nil {
		fail(w, err)
	}
}

// fail answers err with its status (inspect.HTTPError); a publish that failed part
// way also gives the ids the client should know of.
func fail(w http.ResponseWriter, err error) {
	status, msg := inspect.HTTPError(err)
	if pe := (*inspect.PartialError)(nil); errors.As(err, &pe) {
		writeJSON(w, status, map[string]any{"error": msg, "ids": pe.IDs})
		return
	}
	writeError(w, status, "%s", msg)
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
			return inspect.Errorf(inspect.ErrTooLarge, "request body passes the limit of %d bytes", s.cfg.MaxBody)
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
	// key stays held after the job finished.
	UniqueKey string `json:"unique_key,omitempty"`
	UniqueFor string `json:"unique_for,omitempty"`
	// Key is the job's concurrency key: on a queue whose module sets key_concurrency,
	// jobs of one key run at most that many at once, in enqueue order. It is not
	// unique_key: no job of a key is dropped.
	Key string `json:"key,omitempty"`
}

// spec reads a request's job; the Inspector's Enqueue checks it. An unknown queue is
// refused first, before the fields, as it always was.
func (s *server) spec(req EnqueueRequest) (jobspec.Spec, error) {
	spec := jobspec.Spec{Queue: req.Queue, Headers: req.Headers, Priority: req.Priority, MaxAttempts: req.MaxAttempts, UniqueKey: req.UniqueKey, Key: req.Key}
	if req.Queue != "" {
		if _, err := s.in.Served(req.Queue); err != nil {
			return spec, err
		}
	}
	var err error
	switch {
	case req.Payload != nil && req.PayloadBase64 != nil:
		return spec, badRequest("give payload or payload_base64, not both")
	case req.PayloadBase64 != nil:
		spec.Payload, err = base64.StdEncoding.DecodeString(*req.PayloadBase64)
		if err != nil {
			return spec, badRequest("payload_base64: %v", err)
		}
	case req.Payload != nil:
		spec.Payload = []byte(*req.Payload)
	}
	if req.Delay != "" {
		spec.Delay, err = time.ParseDuration(req.Delay)
		if err != nil {
			return spec, badRequest("delay: want a duration such as \"90s\" or \"1h30m\", got %q", req.Delay)
		}
	}
	if req.UniqueFor != "" {
		spec.UniqueFor, err = time.ParseDuration(req.UniqueFor)
		if err != nil {
			return spec, badRequest("unique_for: want a duration such as \"10m\" or \"24h\", got %q", req.UniqueFor)
		}
	}
	return spec, nil
}

// enqueued answers an accepted enqueue: 202 when a job was queued, 200 when every one
// was a duplicate of a job holding its unique key.
func enqueued(w http.ResponseWriter, res inspect.Enqueued, batch bool) {
	status := http.StatusAccepted
	if res.Queued() == 0 {
		status = http.StatusOK
	}
	switch {
	case batch && res.Duplicates != nil:
		writeJSON(w, status, map[string]any{"ids": res.IDs, "duplicates": res.Duplicates})
	case batch:
		writeJSON(w, status, map[string]any{"ids": res.IDs})
	case res.Duplicates != nil && res.Duplicates[0]:
		writeJSON(w, status, map[string]any{"id": res.IDs[0], "duplicate": true})
	default:
		writeJSON(w, status, map[string]any{"id": res.IDs[0]})
	}
}

func (s *server) enqueue(w http.ResponseWriter, r *http.Request) error {
	var req EnqueueRequest
	if err := s.read(w, r, &req); err != nil {
		return err
	}
	spec, err := s.spec(req)
	if err != nil {
		return err
	}
	res, err := s.in.Enqueue(r.Context(), spec)
	if err != nil {
		return err
	}
	enqueued(w, res, false)
	return nil
}

// BatchRequest is the body of POST /v1/jobs/batch.
type BatchRequest struct {
	Jobs []EnqueueRequest `json:"jobs"`
}

func (s *server) enqueueBatch(w http.ResponseWriter, r *http.Request) error {
	var req BatchRequest
	if err := s.read(w, r, &req); err != nil {
		return err
	}
	if len(req.Jobs) == 0 || len(req.Jobs) > MaxBatch {
		return badRequest("jobs: want 1 to %d jobs, got %d", MaxBatch, len(req.Jobs))
	}
	specs := make([]jobspec.Spec, len(req.Jobs))
	for i, j := range req.Jobs {
		var err error
		if specs[i], err = s.spec(j); err != nil {
			return fmt.Errorf("jobs[%d]: %w", i, err)
		}
	}
	res, err := s.in.EnqueueBatch(r.Context(), specs)
	if err != nil {
		return err
	}
	enqueued(w, res, true)
	return nil
}

// read refuses an enqueue while the host takes no new jobs, before its body is read,
// and decodes the body into v.
func (s *server) read(w http.ResponseWriter, r *http.Request, v any) error {
	if err := s.in.Refusal(); err != nil {
		return err
	}
	return s.decode(w, r, v)
}

func (s *server) getJob(w http.ResponseWriter, r *http.Request) error {
	st, err := s.in.Job(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, st)
	return nil
}

func (s *server) listJobs(w http.ResponseWriter, r *http.Request) error {
	q := r.PathValue("queue")
	if _, err := s.in.Served(q); err != nil {
		return err
	}
	f, err := inspect.ParseJobFilter(r.URL.Query())
	if err != nil {
		return err
	}
	var jobs []inspect.JobView
	next := ""
	if id := r.URL.Query().Get("id"); id != "" { // a search by id
		jobs, err = s.in.FindJob(r.Context(), q, id)
	} else {
		jobs, next, err = s.in.Jobs(r.Context(), q, f)
	}
	if err != nil {
		return err
	}
	if jobs == nil {
		jobs = []inspect.JobView{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"jobs": jobs, "next": next})
	return nil
}

func (s *server) jobAction(a inspect.Action) handler {
	return func(w http.ResponseWriter, r *http.Request) error {
		id := r.PathValue("id")
		if err := s.in.Act(r.Context(), id, a); err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, map[string]string{"id": id, "done": string(a)})
		return nil
	}
}

func (s *server) modules(w http.ResponseWriter, r *http.Request) {
	out := map[string]any{"modules": s.in.Modules()}
	if r := s.in.RefusedPushes(); r != nil {
		out["refused_pushes"] = r
	}
	writeJSON(w, http.StatusOK, out)
}

// queueParam reads the required, served queue of a dead-letter request.
func (s *server) queueParam(r *http.Request) (string, error) {
	q := r.URL.Query().Get("queue")
	if q == "" {
		return "", badRequest("the query parameter queue is required")
	}
	if _, err := s.in.Served(q); err != nil {
		return "", err
	}
	return q, nil
}

func (s *server) deadLetters(w http.ResponseWriter, r *http.Request) error {
	q, err := s.queueParam(r)
	if err != nil {
		return err
	}
	limit := 100
	if l := r.URL.Query().Get("limit"); l != "" {
		if limit, err = strconv.Atoi(l); err != nil || limit < 1 {
			return badRequest("limit %q: want a positive number", l)
		}
	}
	dead, err := s.in.DeadLetters(r.Context(), q, limit)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"dead_letters": dead})
	return nil
}

func (s *server) replay(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	q, err := s.in.ReplayDeadLetter(r.Context(), id, r.URL.Query().Get("queue"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]string{"id": id, "queue": q})
	return nil
}

func (s *server) purgeDeadLetters(w http.ResponseWriter, r *http.Request) error {
	q, err := s.queueParam(r)
	if err != nil {
		return err
	}
	n, err := s.in.PurgeDeadLetters(r.Context(), q)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]int{"purged": n})
	return nil
}

// schedules lists the schedules of the serving modules with their next tick and the
// last fired one this host knows of.
func (s *server) schedules(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, SchedulesResponse{Schedules: s.in.Schedules()})
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
func (s *server) backup(w http.ResponseWriter, r *http.Request) error {
	cp, err := s.in.Checkpointer()
	if err != nil {
		return err
	}
	if s.cfg.BackupDir == "" {
		return inspect.Errorf(inspect.ErrUnavailable, "backups are off: start run with --backup-dir DIR, the directory backups are written into")
	}
	var req BackupRequest
	if err := s.decode(w, r, &req); err != nil {
		return err
	}
	if err := checkBackupName(req.Name); err != nil {
		return err
	}
	if !s.cfg.Ready() {
		return inspect.Errorf(inspect.ErrDraining, "the host is draining (shutting down) or not started: no backup is taken; take it from the next run")
	}
	// One backup at a time: two of the same name must not both pass the check below.
	select {
	case s.backupSem <- struct{}{}:
		defer func() { <-s.backupSem }()
	case <-r.Context().Done():
		return r.Context().Err()
	}
	root, err := os.OpenRoot(s.cfg.BackupDir)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "backup directory: %v", err)
		return nil
	}
	defer root.Close()
	if _, err := root.Lstat(req.Name); err == nil {
		return inspect.Errorf(inspect.ErrConflict, "backup %q exists in %s: give a new name", req.Name, s.cfg.BackupDir)
	} else if !errors.Is(err, fs.ErrNotExist) {
		writeError(w, http.StatusInternalServerError, "backup %q in %s: %v", req.Name, s.cfg.BackupDir, err)
		return nil
	}
	var rnd [8]byte
	rand.Read(rnd[:])
	tmp := fmt.Sprintf(".tmp-%s-%x", req.Name, rnd)
	if err := root.Mkdir(tmp, 0o700); err != nil {
		writeError(w, http.StatusInternalServerError, "backup %q: making its temporary directory in %s: %v", req.Name, s.cfg.BackupDir, err)
		return nil
	}
	defer root.RemoveAll(tmp) // ours only: a fresh name, made above
	// The store writes into a fresh directory inside tmp, which only this user can
	// enter: nothing of anyone else's is on that path.
	inner := filepath.Join(tmp, "data")
	start := time.Now()
	if err := cp.Checkpoint(r.Context(), filepath.Join(s.cfg.BackupDir, inner)); err != nil {
		writeError(w, http.StatusInternalServerError, "backup %q: %v", req.Name, err)
		return nil
	}
	if err := root.Chmod(inner, 0o700); err != nil {
		writeError(w, http.StatusInternalServerError, "backup %q: %v", req.Name, err)
		return nil
	}
	if h := beforeBackupRename.Load(); h != nil {
		(*h)(s.cfg.BackupDir, req.Name)
	}
	// The existence check above was before the copy: another process may have made the
	// name since. The rename refuses to replace it (renameNoReplace).
	if err := renameNoReplace(root, tmp, "data", req.Name); errors.Is(err, fs.ErrExist) {
		return inspect.Errorf(inspect.ErrConflict, "backup %q exists in %s: made by someone else while the backup was written, and left as it is; give a new name", req.Name, s.cfg.BackupDir)
	} else if err != nil {
		writeError(w, http.StatusInternalServerError, "backup %q: moving it into place in %s: %v", req.Name, s.cfg.BackupDir, err)
		return nil
	}
	dir := filepath.Join(s.cfg.BackupDir, req.Name)
	s.log.Info("backup written", "dir", dir, "took", time.Since(start))
	writeJSON(w, http.StatusOK, map[string]any{"name": req.Name, "dir": dir, "took_ms": float64(time.Since(start).Microseconds()) / 1000})
	return nil
}
