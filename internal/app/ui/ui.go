// Package ui is the web dashboard of `wasmjobs run`, served under /ui/ on the API's
// listener: server-rendered html/template pages, our own CSS and a small script (both
// embedded), and charts drawn by the server as inline SVG. Every page works without
// the script; with it, the parts marked data-live refresh by polling.
package ui

import (
	"context"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/wasmjobs/wasmjobs/internal/telemetry"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/host"
	"github.com/wasmjobs/wasmjobs/internal/app/inspect"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// DefaultMaxUpload caps a module uploaded for validation.
const DefaultMaxUpload = 64 << 20

// DefaultMaxDeadListed is the dead-letters page's default listing cap.
const DefaultMaxDeadListed = 500

// CookieName is the cookie that keeps the token once the login form took it.
const CookieName = "wasmjobs_token"

// HostInfo is what the overview says of the host.
type HostInfo struct {
	Backend     string
	DataDir     string
	Concurrency int
	Started     time.Time
	Version     string
}

// Config is what the dashboard shows and acts on.
type Config struct {
	// Inspector reads and acts on the host (required): the one the API uses, so that
	// the two never answer differently. Replays and retries are refused while it
	// takes no new jobs (inspect.Config.Refusal).
	Inspector *inspect.Inspector
	// Versions is each module's recent version history; nil shows none.
	Versions *Versions
	// Validate loads a candidate module without serving it and returns its version
	// (the modules page's upload); nil hides the upload.
	Validate func(ctx context.Context, name string, wasm []byte) (version string, err error)
	// Token, when set, is asked for once by a login form and kept in a cookie.
	Token string
	// AuthLimiter bounds the wrong tokens tried, at the login form, as a cookie or as a
	// bearer token; the API's (api.Config.AuthLimiter) when both serve one host, so
	// that a guesser cannot add their limits up. Nil means one of the dashboard's own.
	AuthLimiter *inspect.AuthLimiter
	// Loopback applies the API's Host check (inspect.LoopbackOnly).
	Loopback bool
	Host     HostInfo
	// MaxUpload bounds an uploaded module; zero means DefaultMaxUpload.
	MaxUpload int64
	// MaxDeadListed bounds the dead letters the dead-letters page lists; zero means
	// DefaultMaxDeadListed. Purge and replay-all act on all of them whatever it is.
	MaxDeadListed int
	Logger        *slog.Logger
	// TraceURL, when set, links each attempt's trace id to a trace UI: its
	// "{trace_id}" is replaced (telemetry.TraceURL). Empty shows the ids unlinked.
	TraceURL string
}

type server struct {
	cfg   Config
	in    *inspect.Inspector
	limit *inspect.AuthLimiter
	tmpl  *template.Template
	log   *slog.Logger
}

// New returns the dashboard's handler, to be mounted at /ui/.
func New(cfg Config) http.Handler {
	if cfg.MaxUpload <= 0 {
		cfg.MaxUpload = DefaultMaxUpload
	}
	if cfg.MaxDeadListed <= 0 {
		cfg.MaxDeadListed = DefaultMaxDeadListed
	}
	s := &server{cfg: cfg, in: cfg.Inspector, limit: cfg.AuthLimiter, log: cfg.Logger}
	if s.limit == nil {
		s.limit = inspect.NewAuthLimiter()
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.tmpl = template.Must(template.New("").Funcs(template.FuncMap{
		"short": short, "maxAttempts": func() int { return backend.MaxRecordAttempts }, "time": timeTag, "spark": sparkline, "count": count, "pct": pct,
		"payload": payloadText, "query": url.QueryEscape, "ago": ago, "path": url.PathEscape,
		"jobURL": func(id string) string { return jobPath(id, "") }, "jobAction": jobPath,
		"traceURL": func(id string) string { return telemetry.TraceURL(cfg.TraceURL, id) },
	}).ParseFS(templateFS, "templates/*.html"))
	mux := http.NewServeMux()
	static, _ := fs.Sub(staticFS, "static")
	mux.Handle("GET /ui/static/", http.StripPrefix("/ui/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /ui/{$}", s.overview)
	mux.HandleFunc("GET /ui/queues/{queue}", s.queue)
	mux.HandleFunc("GET /ui/jobs/{id}", s.job)
	mux.HandleFunc("POST /ui/jobs/{id}/{action}", s.jobAction)
	// The ids jobPath puts in the query.
	mux.HandleFunc("GET /ui/jobs/{$}", s.job)
	mux.HandleFunc("POST /ui/jobs/{$}", s.jobAction)
	mux.HandleFunc("GET /ui/dead-letters", s.deadLetters)
	mux.HandleFunc("POST /ui/dead-letters/{action}", s.deadAction)
	mux.HandleFunc("GET /ui/modules", s.modules)
	mux.HandleFunc("GET /ui/schedules", s.schedules)
	for _, kind := range []backend.GroupKind{backend.GroupWorkflow, backend.GroupBatch} {
		mux.HandleFunc("GET /ui/"+kind.Plural(), s.groups(kind))
		mux.HandleFunc("GET /ui/"+kind.Plural()+"/{id}", s.group(kind))
		mux.HandleFunc("POST /ui/"+kind.Plural()+"/{id}/cancel", s.cancelGroup(kind))
	}
	mux.HandleFunc("POST /ui/modules/validate", s.validate)
	mux.HandleFunc("POST /ui/modules/{name}/{action}", s.moduleAction)
	mux.HandleFunc("POST /ui/login", s.login)
	mux.HandleFunc("POST /ui/logout", s.logout)
	mux.HandleFunc("/ui/", func(w http.ResponseWriter, r *http.Request) {
		s.fail(w, r, http.StatusNotFound, fmt.Errorf("no such page: %s %s", r.Method, r.URL.Path))
	})
	h := inspect.Guard(s.auth(mux), cfg.Loopback, func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "cross-origin request refused: "+r.Method+" "+r.URL.Path+" comes from another site", http.StatusForbidden)
	})
	// Outermost: the login form and the refusals above are answers of the dashboard
	// too, and a page framed or sniffed is as bad there as anywhere.
	return headers(h)
}

// headers sets what every answer of the dashboard sends, a page, a redirect or a
// refusal: no framing (X-Frame-Options for browsers without frame-ancestors), no
// inline script or style, no sniffing, no referrer to other sites, no caching.
func headers(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'")
		h.Set("X-Frame-Options", "DENY")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "same-origin")
		h.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

// authorized reports whether r carries the token, in the cookie or as a bearer.
// Both are compared, in constant time, whichever is right.
func (s *server) authorized(r *http.Request) bool {
	want := []byte(s.cfg.Token)
	right := 0
	if c, err := r.Cookie(CookieName); err == nil {
		right |= subtle.ConstantTimeCompare([]byte(c.Value), want)
	}
	if got, ok := inspect.BearerToken(r); ok {
		right |= subtle.ConstantTimeCompare([]byte(got), want)
	}
	return right == 1
}

// auth asks for the token where one is set: a page without it answers 401 with the
// login form; the form's POST sets the cookie. A token sent (cookie or bearer: not
// another scheme, such as a proxy's Basic) is looked at only within the limit of wrong
// ones (AuthLimiter); a wrong cookie is cleared, so that the browser does not send it
// again with every page and poll.
// The login and logout forms and the static files pass: they check no token here.
func (s *server) auth(next http.Handler) http.Handler {
	if s.cfg.Token == "" {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ui/login" || r.URL.Path == "/ui/logout" || strings.HasPrefix(r.URL.Path, "/ui/static/") {
			next.ServeHTTP(w, r)
			return
		}
		back := r.URL.RequestURI()
		if r.Method != http.MethodGet {
			back = "/ui/"
		}
		_, noCookie := r.Cookie(CookieName)
		if _, bearer := inspect.BearerToken(r); noCookie == nil || bearer {
			right := s.authorized(r)
			if d := s.limit.Check(r, right); d > 0 {
				s.tooMany(w, r, back, d)
				return
			}
			if right {
				next.ServeHTTP(w, r)
				return
			}
			if noCookie == nil {
				clearCookie(w, r)
			}
		}
		s.render(w, http.StatusUnauthorized, "login", loginData(r, back, ""))
	})
}

// tooMany answers a client past the limit of wrong tokens with the login form, 429
// and when to come back.
func (s *server) tooMany(w http.ResponseWriter, r *http.Request, next string, d time.Duration) {
	after := inspect.RetryAfter(d)
	w.Header().Set("Retry-After", after)
	s.render(w, http.StatusTooManyRequests, "login", loginData(r, next,
		"Too many wrong tokens, from your address or from all of them together: no token is looked at before "+after+" s from now."))
}

func (s *server) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	next := r.FormValue("next")
	if !strings.HasPrefix(next, "/ui/") || strings.HasPrefix(next, "//") {
		next = "/ui/"
	}
	if s.cfg.Token == "" {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	right := subtle.ConstantTimeCompare([]byte(r.FormValue("token")), []byte(s.cfg.Token)) == 1
	if d := s.limit.Check(r, right); d > 0 {
		s.tooMany(w, r, next, d)
		return
	}
	if !right {
		s.render(w, http.StatusUnauthorized, "login", loginData(r, next, "That is not the token this host was started with."))
		return
	}
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: s.cfg.Token, Path: "/ui/", HttpOnly: true, Secure: secureCookie(r), SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// logout clears the login cookie. It needs no token (clearing a cookie gives nothing
// away), but it is a POST under the cross-origin protection: another site cannot sign
// the user out. The cookie holds the token itself: a copy of it taken elsewhere stays
// good until the host is started with another token.
func (s *server) logout(w http.ResponseWriter, r *http.Request) {
	clearCookie(w, r)
	http.Redirect(w, r, "/ui/", http.StatusSeeOther)
}

// clearCookie tells the browser to drop the login cookie.
func clearCookie(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: CookieName, Path: "/ui/", MaxAge: -1, HttpOnly: true, Secure: secureCookie(r), SameSite: http.SameSiteStrictMode})
}

// secureCookie reports whether the login cookie can be Secure on r's connection:
// under TLS, or on a loopback host, where browsers keep a Secure cookie over plain
// HTTP. Elsewhere over plain HTTP (--insecure-http) a browser drops a Secure cookie,
// and no login would ever hold; the login page says the cookie is not Secure there.
func secureCookie(r *http.Request) bool {
	if r.TLS != nil {
		return true
	}
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// loginData is what the login form shows.
func loginData(r *http.Request, next, problem string) map[string]any {
	d := map[string]any{"Next": next, "Insecure": !secureCookie(r)}
	if problem != "" {
		d["Error"] = problem
	}
	return d
}

// page is what every page template gets.
type page struct {
	Title string
	Nav   string
	Done  string
	Data  any
	// Logout shows the sign-out button: a host with a token, on a page past the login.
	Logout bool
}

func (s *server) render(w http.ResponseWriter, status int, name string, data any) {
	p, ok := data.(page)
	if !ok {
		p = page{Title: name, Data: data}
	}
	p.Logout = s.cfg.Token != "" && name != "login"
	var b strings.Builder
	if err := s.tmpl.ExecuteTemplate(&b, name, p); err != nil {
		s.log.Error("rendering a dashboard page", "page", name, "error", err)
		http.Error(w, "rendering the page failed: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	io.WriteString(w, b.String())
}

func (s *server) fail(w http.ResponseWriter, r *http.Request, status int, err error) {
	s.render(w, status, "error", page{Title: http.StatusText(status), Data: map[string]any{"Status": status, "Error": err.Error()}})
}

// failErr answers err with the status the API gives it (inspect.HTTPError).
func (s *server) failErr(w http.ResponseWriter, r *http.Request, err error) {
	status, _ := inspect.HTTPError(err)
	s.fail(w, r, status, err)
}

type queueRow struct {
	inspect.QueueInfo
	Rates inspect.RateSeries
}

func (s *server) overview(w http.ResponseWriter, r *http.Request) {
	qs := s.in.Queues(r.Context())
	rows := make([]queueRow, len(qs))
	for i, q := range qs {
		rows[i] = queueRow{QueueInfo: q, Rates: s.in.QueueRates(q.Name)}
	}
	// A backend may count some things and not others (RabbitMQ: no unacked, delayed or
	// deferred counts): the note says why a cell is n/a wherever one is.
	canCount := s.in.Can().Count
	for _, q := range qs {
		if st := q.QueueStats; st != nil && (st.Pending < 0 || st.Unacked < 0 || st.Delayed < 0 || st.Deferred < 0 || st.Dead < 0) {
			canCount = false
		}
	}
	s.render(w, http.StatusOK, "overview", page{Title: "Overview", Nav: "overview", Data: map[string]any{
		"Queues": rows, "Host": s.cfg.Host, "Uptime": time.Since(s.cfg.Host.Started).Truncate(time.Second), "CanCount": canCount,
		"Now": time.Now(),
	}})
}

// States are the tabs of the queue page.
var States = []backend.JobState{"", backend.JobPending, backend.JobRunning, backend.JobDelayed, backend.JobRetrying,
	backend.JobDeferred, backend.JobWaiting, backend.JobSucceeded, backend.JobDead, backend.JobCancelled}

func (s *server) queue(w http.ResponseWriter, r *http.Request) {
	q := r.PathValue("queue")
	if !s.served(q) {
		s.fail(w, r, http.StatusNotFound, fmt.Errorf("no module serves queue %q", q))
		return
	}
	f, err := inspect.ParseJobFilter(r.URL.Query())
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, err)
		return
	}
	data := map[string]any{"Queue": q, "State": string(f.State), "States": States, "Cursor": f.Cursor}
	if id := strings.TrimSpace(r.URL.Query().Get("id")); id != "" {
		data["Search"] = id
		if jobs, err := s.in.FindJob(r.Context(), q, id); err != nil {
			data["Unavailable"] = err.Error()
		} else if len(jobs) > 0 {
			data["Jobs"] = jobs
		}
	} else {
		jobs, next, err := s.in.Jobs(r.Context(), q, f)
		if err != nil {
			data["Unavailable"] = err.Error()
		}
		data["Jobs"], data["Next"] = jobs, next
	}
	if !s.in.Can().List {
		data["FromHistory"] = true
	}
	if st, err := s.in.Stats(r.Context(), q); err == nil {
		data["Stats"] = st
	}
	s.render(w, http.StatusOK, "queue", page{Title: "Queue " + q, Nav: "overview", Data: data})
}

// served reports whether a module serves queue q.
func (s *server) served(q string) bool {
	_, err := s.in.Served(q)
	return err == nil
}

// jobPath is the dashboard's path of job id's page, or of one of its actions: the id
// escaped into one path segment (a publisher chooses ids, and one can hold '/', '?',
// '#' or '%'), which the routes' {id} gets back unescaped. An id that escapes to "."
// or ".." goes into the query instead: a browser resolves a dot segment away, even
// written %2e.
func jobPath(id, action string) string {
	seg := url.PathEscape(id)
	if seg == "." || seg == ".." {
		q := url.Values{"id": {id}}
		if action != "" {
			q.Set("action", action)
		}
		return "/ui/jobs/?" + q.Encode()
	}
	if action != "" {
		return "/ui/jobs/" + seg + "/" + action
	}
	return "/ui/jobs/" + seg
}

// jobParams are the job id and the action r names, from the path, or from the query
// where jobPath put them.
func jobParams(r *http.Request) (id, action string) {
	if id := r.PathValue("id"); id != "" {
		return id, r.PathValue("action")
	}
	q := r.URL.Query()
	return q.Get("id"), q.Get("action")
}

func (s *server) job(w http.ResponseWriter, r *http.Request) {
	id, _ := jobParams(r)
	st, err := s.in.Job(r.Context(), id)
	if err != nil {
		s.failErr(w, r, err)
		return
	}
	// A backend's job records keep the attempts across restarts; the host's own
	// memory (since it started) stands in where the backend keeps none.
	can := s.in.Can()
	data := map[string]any{"Job": st, "Attempts": st.Attempts, "AttemptsRecorded": can.Records}
	// Job records keep no payload: the backend gives it while it holds the job (waiting
	// or dead); a broker's dead letters can be read, bounded as the dead-letters page
	// is, since this page is polled.
	if payload, headers, ok := s.in.Payload(r.Context(), st, s.cfg.MaxDeadListed); ok {
		data["Payload"] = payloadText(base64.StdEncoding.EncodeToString(payload))
		data["Headers"] = headers
	}
	data["Records"] = can.Records
	data["CanAct"] = can.Act
	data["CanCancel"] = can.Act && (st.State == "pending" || st.State == "delayed" || st.State == "deferred" || st.State == "retrying") ||
		can.CancelRunning && st.State == "running" // stopped where it runs, whatever the backend
	data["CanRetry"] = can.Act && (st.State == "retrying" || st.State == "dead" || st.State == "delayed" || st.State == "deferred")
	data["CanDelete"] = can.Act && st.State != "running"
	s.render(w, http.StatusOK, "job", page{Title: "Job " + id, Nav: "overview", Done: r.URL.Query().Get("done"), Data: data})
}

func (s *server) jobAction(w http.ResponseWriter, r *http.Request) {
	id, action := jobParams(r)
	a := inspect.Action(action)
	switch a {
	case inspect.ActionCancel, inspect.ActionRetry, inspect.ActionDelete:
	default:
		s.fail(w, r, http.StatusNotFound, fmt.Errorf("unknown action %q: want cancel, retry or delete", a))
		return
	}
	// The queue is only where a delete goes back to; Act says what is wrong with the id.
	st, getErr := s.in.Job(r.Context(), id)
	if err := s.in.Act(r.Context(), id, a); err != nil {
		s.failErr(w, r, err)
		return
	}
	if a == inspect.ActionDelete {
		back := "/ui/queues/" + url.PathEscape(st.Queue)
		if getErr != nil || st.Queue == "" {
			back = "/ui/"
		}
		http.Redirect(w, r, back+"?done=deleted+"+url.QueryEscape(id), http.StatusSeeOther)
		return
	}
	u := jobPath(id, "")
	if strings.Contains(u, "?") {
		u += "&"
	} else {
		u += "?"
	}
	http.Redirect(w, r, u+"done="+string(a), http.StatusSeeOther)
}

func (s *server) deadLetters(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query().Get("queue")
	data := map[string]any{"Queue": q, "Queues": s.in.ServedQueues(), "Confirm": r.URL.Query().Get("confirm")}
	if q != "" {
		if dead, err := s.in.DeadLetters(r.Context(), q, s.cfg.MaxDeadListed); errors.Is(err, inspect.ErrUnavailable) {
			data["Unavailable"] = err.Error()
		} else if err != nil {
			s.failErr(w, r, err)
			return
		} else {
			data["Dead"] = dead
			data["Total"] = s.deadTotal(r.Context(), q, len(dead))
		}
	}
	s.render(w, http.StatusOK, "dead", page{Title: "Dead letters", Nav: "dead", Done: r.URL.Query().Get("done"), Data: data})
}

// deadTotal says how many dead letters queue q holds, for the confirmation of a purge
// or replay-all (which act on all of them): the backend's count where it keeps one,
// else the listed number, "at least" when the listing reached its cap.
func (s *server) deadTotal(ctx context.Context, q string, listed int) string {
	if st, err := s.in.Stats(ctx, q); err == nil && st.Dead >= 0 {
		return fmt.Sprint(max(st.Dead, listed))
	}
	if listed >= s.cfg.MaxDeadListed {
		return fmt.Sprintf("at least %d", listed)
	}
	return fmt.Sprint(listed)
}

// deadAction replays one dead letter, replays all of a queue's, or purges them, as
// the API's replay and purge do (the Inspector's, with its bookkeeping), once the
// operator confirmed an action on all of them.
func (s *server) deadAction(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	q, action := r.FormValue("queue"), r.PathValue("action")
	if !s.in.Can().DeadLetters {
		s.fail(w, r, http.StatusNotImplemented, errors.New("this backend cannot list dead letters"))
		return
	}
	if !s.served(q) {
		s.fail(w, r, http.StatusNotFound, fmt.Errorf("no module serves queue %q", q))
		return
	}
	if action == "replay" || action == "replay-all" {
		if err := s.in.Refusal(); err != nil {
			s.failErr(w, r, err)
			return
		}
	}
	if (action == "replay-all" || action == "purge") && r.FormValue("confirm") != "yes" {
		http.Redirect(w, r, "/ui/dead-letters?queue="+url.QueryEscape(q)+"&confirm="+action, http.StatusSeeOther)
		return
	}
	var done string
	switch action {
	case "replay":
		id := r.FormValue("id")
		if _, err := s.in.ReplayDeadLetter(r.Context(), id, q); err != nil {
			s.failErr(w, r, err)
			return
		}
		done = "replayed " + id
	case "replay-all":
		n, err := s.in.ReplayAll(r.Context(), q)
		if err != nil {
			s.failErr(w, r, err)
			return
		}
		done = fmt.Sprintf("replayed %d", n)
	case "purge":
		n, err := s.in.PurgeDeadLetters(r.Context(), q)
		if err != nil {
			s.failErr(w, r, err)
			return
		}
		done = fmt.Sprintf("purged %d", n)
	default:
		s.fail(w, r, http.StatusNotFound, fmt.Errorf("unknown action %q: want replay, replay-all or purge", action))
		return
	}
	http.Redirect(w, r, "/ui/dead-letters?queue="+url.QueryEscape(q)+"&done="+url.QueryEscape(done), http.StatusSeeOther)
}

// schedules lists each schedule with its next and last run and whether this host
// fires it, as GET /v1/schedules does.
func (s *server) schedules(w http.ResponseWriter, r *http.Request) {
	s.render(w, http.StatusOK, "schedules", page{Title: "Schedules", Nav: "schedules", Data: map[string]any{"Schedules": s.in.Schedules()}})
}

// moduleRow is one module on the modules page: its status with the rollout state (a
// canary under way, the last verdict, the pin), the versions kept for a rollback, and
// this host's log of its loads and swaps.
type moduleRow struct {
	host.ModuleStatus
	// Kept are the versions kept for a rollback, newest first (Registry.History).
	Kept    []host.HistoryEntry
	History []VersionEvent
}

func (s *server) moduleRows() []moduleRow {
	var rows []moduleRow
	for _, m := range s.in.Modules() {
		kept, _ := s.in.ModuleHistory(m.Name) // a module without a kept version has none
		rows = append(rows, moduleRow{ModuleStatus: m, Kept: kept, History: s.cfg.Versions.Of(m.Name)})
	}
	return rows
}

func (s *server) modules(w http.ResponseWriter, r *http.Request) {
	s.render(w, http.StatusOK, "modules", page{Title: "Modules", Nav: "modules", Done: r.URL.Query().Get("done"), Data: map[string]any{
		"Modules": s.moduleRows(), "CanValidate": s.cfg.Validate != nil, "MaxUpload": s.cfg.MaxUpload >> 20}})
}

// moduleAction promotes a module's canary now, or rolls the module back (to the form's
// version, else to the canary's end or the version before), as POST
// /v1/modules/{name}/promote and /rollback do.
func (s *server) moduleAction(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	var done string
	var err error
	switch r.PathValue("action") {
	case "promote":
		var v host.Verdict
		if v, err = s.in.Promote(r.Context(), name); err == nil {
			done = fmt.Sprintf("promoted %s to %s", name, short(v.Version))
		}
	case "rollback":
		var pin host.Pin
		if pin, err = s.in.Rollback(r.Context(), name, r.FormValue("to")); err == nil {
			done = fmt.Sprintf("rolled %s back to %s (pinned)", name, short(pin.Version))
		}
	default:
		s.fail(w, r, http.StatusNotFound, fmt.Errorf("unknown action %q: want promote or rollback", r.PathValue("action")))
		return
	}
	if err != nil {
		s.failErr(w, r, err)
		return
	}
	http.Redirect(w, r, "/ui/modules?done="+url.QueryEscape(done), http.StatusSeeOther)
}

func (s *server) validate(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Validate == nil {
		s.fail(w, r, http.StatusNotImplemented, errors.New("this host cannot validate uploads"))
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxUpload+64<<10)
	file, hdr, err := r.FormFile("module")
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			s.fail(w, r, http.StatusRequestEntityTooLarge, fmt.Errorf("the upload passes the limit of %d MiB", s.cfg.MaxUpload>>20))
			return
		}
		s.fail(w, r, http.StatusBadRequest, fmt.Errorf("want a .wasm file in the form field module: %w", err))
		return
	}
	defer file.Close()
	wasm, err := io.ReadAll(io.LimitReader(file, s.cfg.MaxUpload+1))
	if err != nil || int64(len(wasm)) > s.cfg.MaxUpload {
		s.fail(w, r, http.StatusRequestEntityTooLarge, fmt.Errorf("the upload passes the limit of %d MiB", s.cfg.MaxUpload>>20))
		return
	}
	name := strings.TrimSuffix(hdr.Filename, ".wasm")
	res := map[string]any{"File": hdr.Filename, "Size": len(wasm)}
	if v, err := s.cfg.Validate(r.Context(), name, wasm); err != nil {
		res["Error"] = clip(err.Error(), maxReason)
	} else {
		res["Version"] = v
	}
	s.render(w, http.StatusOK, "modules", page{Title: "Modules", Nav: "modules", Data: map[string]any{
		"Modules": s.moduleRows(), "CanValidate": true, "MaxUpload": s.cfg.MaxUpload >> 20, "Result": res}})
}

// maxReason bounds the bytes of an upload's rejection shown: the text can come from
// the module (its names, a compiler's message about its code).
const maxReason = 300

// clip cuts s to at most n bytes, on a rune boundary, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// short is a version's first 12 hex digits.
func short(v string) string {
	if len(v) > 12 {
		return v[:12]
	}
	return v
}

// timeTag renders t in UTC, with the UTC value on hover; the script shows it in the
// browser's zone.
func timeTag(t time.Time) template.HTML {
	if t.IsZero() {
		return "—"
	}
	u := t.UTC()
	return template.HTML(fmt.Sprintf(`<time datetime="%s" title="%s">%s</time>`,
		u.Format(time.RFC3339Nano), u.Format("2006-01-02 15:04:05.000 UTC"), u.Format("2006-01-02 15:04:05 UTC")))
}

func ago(d time.Duration) string { return d.String() }

// count shows a count, or "n/a" for one the backend cannot tell (-1), with the reason
// on hover.
func count(n int) template.HTML {
	if n < 0 {
		return `<abbr title="the backend cannot count this (RabbitMQ does not count unacknowledged, delayed or deferred messages)">n/a</abbr>`
	}
	return template.HTML(fmt.Sprint(n))
}

func pct(f float64) string { return fmt.Sprintf("%.0f%%", f*100) }

// payloadText shows a payload as text when it is valid UTF-8 without control bytes,
// else as hex.
func payloadText(b64 string) string {
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return "(undecodable: " + err.Error() + ")"
	}
	if utf8.Valid(raw) && !strings.ContainsFunc(string(raw), func(r rune) bool { return r < 0x20 && r != '\n' && r != '\t' && r != '\r' }) {
		return string(raw)
	}
	return "hex: " + hex.EncodeToString(raw)
}
