package ui_test

import (
	"context"
	"errors"
	"fmt"
	"html"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/memory"
	"github.com/wasmjobs/wasmjobs/backend/pebble"
	"github.com/wasmjobs/wasmjobs/internal/app/inspect"
	"github.com/wasmjobs/wasmjobs/internal/app/inspect/inspecttest"
	"github.com/wasmjobs/wasmjobs/internal/app/ui"
	"github.com/wasmjobs/wasmjobs/internal/schedule"
)

// rig is the dashboard over b (nil: a memory backend) and a registry of testdata's
// echo module (no worker: nothing runs, jobs stay where they are put).
func rig(t *testing.T, b backend.Backend, cfg ui.Config) (http.Handler, *inspecttest.Rig) {
	t.Helper()
	return rigWith(t, inspecttest.Options{Backend: b}, cfg)
}

// rigWith is the dashboard of cfg over the rig of o.
func rigWith(t *testing.T, o inspecttest.Options, cfg ui.Config) (http.Handler, *inspecttest.Rig) {
	t.Helper()
	r := inspecttest.New(t, o)
	cfg.Inspector = r.Inspector
	return ui.New(cfg), r
}

// bare is the dashboard of cfg over an Inspector of nothing: no backend, no module.
func bare(cfg ui.Config) http.Handler {
	cfg.Inspector = inspect.New(inspect.Config{})
	return ui.New(cfg)
}

// formPost is a same-origin POST of form (no body when nil) to target, as the
// dashboard's own forms send it.
func formPost(target string, form url.Values) *http.Request {
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	r := httptest.NewRequest("POST", "http://localhost"+target, body)
	if form != nil {
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	r.Header.Set("Sec-Fetch-Site", "same-origin")
	return r
}

func serve(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestLoginSetsAStrictCookieAndRedirectsOnlyInside(t *testing.T) {
	t.Parallel()
	h, _ := rig(t, nil, ui.Config{Token: "s3cret"})
	if w := serve(h, httptest.NewRequest("GET", "http://localhost/ui/modules", nil)); w.Code != 401 || !strings.Contains(w.Body.String(), `id="login"`) {
		t.Fatalf("a page without the token: %d, want 401 with the login form", w.Code)
	}
	post := func(form url.Values) *httptest.ResponseRecorder { return serve(h, formPost("/ui/login", form)) }
	if w := post(url.Values{"token": {"wrong"}, "next": {"/ui/modules"}}); w.Code != 401 || len(w.Result().Cookies()) != 0 {
		t.Errorf("a wrong token: %d with cookies %v, want 401 and none", w.Code, w.Result().Cookies())
	}
	for next, want := range map[string]string{"/ui/modules": "/ui/modules", "https://evil.example/": "/ui/", "//evil.example/ui/": "/ui/"} {
		w := post(url.Values{"token": {"s3cret"}, "next": {next}})
		if w.Code != http.StatusSeeOther || w.Header().Get("Location") != want {
			t.Errorf("login with next %q: %d to %q, want 303 to %q", next, w.Code, w.Header().Get("Location"), want)
		}
		cs := w.Result().Cookies()
		if len(cs) != 1 || cs[0].Name != ui.CookieName || !cs[0].HttpOnly || !cs[0].Secure || cs[0].SameSite != http.SameSiteStrictMode || cs[0].Path != "/ui/" {
			t.Fatalf("login cookie %+v: want one HttpOnly, Secure, SameSite=Strict cookie on /ui/", cs)
		}
		r := httptest.NewRequest("GET", "http://localhost/ui/modules", nil)
		r.AddCookie(cs[0])
		if w := serve(h, r); w.Code != 200 {
			t.Errorf("with the cookie: %d, want 200", w.Code)
		}
	}
}

func TestUploadOverTheCapIsRefused(t *testing.T) {
	t.Parallel()
	h, _ := rig(t, nil, ui.Config{MaxUpload: 1 << 20,
		Validate: func(context.Context, string, []byte) (string, error) {
			t.Error("an upload over the cap was validated")
			return "", nil
		}})
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		f, _ := mw.CreateFormFile("module", "big.wasm")
		f.Write(make([]byte, 2<<20))
		mw.Close()
		pw.Close()
	}()
	r := httptest.NewRequest("POST", "http://localhost/ui/modules/validate", pr)
	r.Header.Set("Content-Type", mw.FormDataContentType())
	if w := serve(h, r); w.Code != http.StatusRequestEntityTooLarge || !strings.Contains(w.Body.String(), "limit of 1 MiB") {
		t.Errorf("a 2 MiB upload under a 1 MiB cap: %d %s, want 413 naming the limit", w.Code, w.Body)
	}
}

// noControl stands for RabbitMQ: no job records, no JobController, no counts.
type noControl struct{ backend.Backend }

func TestWhatTheBackendCannotDoIsShownUnavailable(t *testing.T) {
	t.Parallel()
	h, rg := rig(t, noControl{memory.New(memory.Config{})}, ui.Config{})
	env := backend.NewEnvelope("echo", []byte("x"))
	rg.Records.Enqueued(env, false)
	body := serve(h, httptest.NewRequest("GET", "http://localhost/ui/jobs/"+env.ID, nil)).Body.String()
	if !strings.Contains(body, "Unavailable: the broker cannot find a queued message by id") || strings.Contains(body, `id="cancel"`) {
		t.Errorf("job page on a backend without job control: want the reason and no cancel button:\n%s", body)
	}
	body = serve(h, httptest.NewRequest("GET", "http://localhost/ui/", nil)).Body.String()
	if !strings.Contains(body, `data-count="pending"><abbr title="the backend cannot count this`) || !strings.Contains(body, "n/a: the broker does not count") {
		t.Errorf("overview on a backend that cannot count: want n/a with the reason, never a made-up 0:\n%s", body)
	}
	if w := serve(h, formPost("/ui/jobs/"+env.ID+"/cancel", nil)); w.Code != http.StatusNotImplemented {
		t.Errorf("cancel on a backend that cannot: %d, want 501", w.Code)
	}
}

func TestPagesAnswerAndRefuseWhatTheyShould(t *testing.T) {
	t.Parallel()
	h, _ := rig(t, nil, ui.Config{Loopback: true})
	for _, tc := range []struct {
		method, url, site string
		status            int
	}{
		{"GET", "http://localhost/ui/", "", 200},
		{"GET", "http://localhost/ui/queues/echo", "", 200},
		{"GET", "http://localhost/ui/queues/nope", "", 404},
		{"GET", "http://localhost/ui/queues/echo?state=sleeping", "", 400},
		{"GET", "http://localhost/ui/jobs/NOSUCHJOB", "", 404},
		{"GET", "http://localhost/ui/jobs/", "", 404},
		{"GET", "http://localhost/ui/jobs/?id=..", "", 404},
		{"GET", "http://localhost/ui/dead-letters?queue=echo", "", 200},
		{"GET", "http://localhost/ui/modules", "", 200},
		{"GET", "http://localhost/ui/static/app.js", "", 200},
		{"GET", "http://rebound.example/ui/", "", 403},                        // DNS rebinding
		{"POST", "http://localhost/ui/dead-letters/purge", "cross-site", 403}, // another site's form
		{"POST", "http://localhost/ui/dead-letters/purge", "same-origin", 303},
	} {
		r := httptest.NewRequest(tc.method, tc.url, strings.NewReader("queue=echo"))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if tc.site != "" {
			r.Header.Set("Sec-Fetch-Site", tc.site)
		}
		if w := serve(h, r); w.Code != tc.status {
			t.Errorf("%s %s (Sec-Fetch-Site %q): %d, want %d", tc.method, tc.url, tc.site, w.Code, tc.status)
		}
	}
}

// A job's page lists its attempts from the backend's job record, each with the version
// that ran it, after the store was closed and opened again (a host restart): the host's
// in-memory log of attempts is empty then.
func TestJobPageListsRecordedAttemptsAfterARestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "data")
	b, err := pebble.Open(ctx, pebble.Config{Dir: dir, BallastSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	q := backend.QueueConfig{Name: "echo", Prefetch: 1}
	if err := b.Declare(ctx, q); err != nil {
		t.Fatal(err)
	}
	env := backend.NewEnvelope("echo", []byte("flaky"))
	if err := b.Publish(ctx, env, 0); err != nil {
		t.Fatal(err)
	}
	s, err := b.Consume(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	versions := []string{"1111aaaa", "2222bbbb", "3333cccc"}
	for i, v := range versions {
		d := (<-s.Deliveries()).(backend.AtomicDelivery)
		got, err := d.Envelope()
		if err != nil {
			t.Fatal(err)
		}
		run := &backend.JobRecord{Module: "echo", ModuleVersion: v, StartedAt: time.Now(), FinishedAt: time.Now()}
		if i == len(versions)-1 {
			err = d.AckWith(ctx, nil, run)
		} else {
			next := got
			next.Attempt, next.Reason = got.Attempt+1, fmt.Sprintf("boom %d", i+1)
			err = d.RetryWith(ctx, next, 0, run)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	s.Drop()
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	b, err = pebble.Open(ctx, pebble.Config{Dir: dir, BallastSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	h, rg := rig(t, b, ui.Config{})
	st, err := rg.Inspector.Job(ctx, env.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Attempts) != 3 || st.Attempts[0].Version != versions[0] || st.Attempts[0].Settle != "retry" ||
		st.Attempts[0].Reason != "boom 1" || st.Attempts[2].Settle != "ack" || st.Attempts[2].Attempt != 3 {
		t.Errorf("GET /v1/jobs/{id}'s attempts after a reopen = %+v, want 3: retry (boom 1), retry, ack, with their versions", st.Attempts)
	}
	w := serve(h, httptest.NewRequest("GET", "http://localhost/ui/jobs/"+env.ID, nil))
	body := w.Body.String()
	if w.Code != 200 || strings.Count(body, `<td class="n">`) < 3 {
		t.Fatalf("job page: %d\n%s", w.Code, body)
	}
	_, table, _ := strings.Cut(body, `id="attempts"`)
	table, _, _ = strings.Cut(table, "</table>")
	for i, v := range versions {
		row := fmt.Sprintf(`<td class="n">%d</td>`, i+1)
		if !strings.Contains(table, row) || !strings.Contains(table, `title="`+v+`"`) {
			t.Errorf("the attempts table lacks attempt %d run by %s:\n%s", i+1, v, table)
		}
	}
	if !strings.Contains(table, "boom 2") || !strings.Contains(body, "kept across restarts") {
		t.Errorf("the attempts table lacks the second failure's reason or the note that records keep them:\n%s", table)
	}
}

// The schedules page lists each schedule with its cron, zone, next run (a time tag
// with the UTC value on hover) and whether this host fires.
func TestSchedulesPageListsEachSchedule(t *testing.T) {
	t.Parallel()
	next := time.Date(2030, 1, 2, 3, 0, 0, 0, time.UTC)
	h, _ := rigWith(t, inspecttest.Options{Inspect: func(c *inspect.Config) {
		c.Schedules = func() []schedule.Status {
			return []schedule.Status{{Name: "echo/nightly", Module: "echo", Queue: "echo", Cron: "0 3 * * *", Timezone: "Europe/Paris", Next: next, Firing: true}}
		}
	}}, ui.Config{})
	w := serve(h, httptest.NewRequest("GET", "http://localhost/ui/schedules", nil))
	body := w.Body.String()
	for _, want := range []string{`data-schedule="echo/nightly"`, "0 3 * * *", "Europe/Paris", `datetime="2030-01-02T03:00:00Z"`, `title="2030-01-02 03:00:00.000 UTC"`, `class="firing">yes`, `href="/ui/schedules" aria-current="page"`} {
		if !strings.Contains(body, want) {
			t.Errorf("schedules page (%d) lacks %q:\n%s", w.Code, want, body)
		}
	}
}

// The modules page's promote and rollback are form posts under the same cross-origin
// protection as the other actions, and answer the registry's errors.
func TestModuleActionsRefuseCrossSiteAndAnswerErrors(t *testing.T) {
	t.Parallel()
	h, _ := rig(t, nil, ui.Config{})
	post := func(path, site string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", "http://localhost"+path, nil)
		r.Header.Set("Sec-Fetch-Site", site)
		return serve(h, r)
	}
	if w := post("/ui/modules/echo/promote", "cross-site"); w.Code != http.StatusForbidden {
		t.Errorf("a cross-site promote: %d, want 403", w.Code)
	}
	if w := post("/ui/modules/echo/promote", "same-origin"); w.Code != http.StatusConflict || !strings.Contains(w.Body.String(), "no canary") {
		t.Errorf("promote without a canary: %d %s, want 409 saying no canary", w.Code, w.Body.String())
	}
	if w := post("/ui/modules/nosuch/rollback", "same-origin"); w.Code != http.StatusNotFound {
		t.Errorf("rollback of an unknown module: %d, want 404", w.Code)
	}
	if w := post("/ui/modules/echo/explode", "same-origin"); w.Code != http.StatusNotFound {
		t.Errorf("an unknown action: %d, want 404", w.Code)
	}
}

func TestLoginCookieIsSecureWhereBrowsersKeepIt(t *testing.T) {
	t.Parallel()
	h, _ := rig(t, nil, ui.Config{Token: "s3cret"})
	for _, tc := range []struct {
		url      string
		tls      bool
		secure   bool
		noteSaid bool
	}{
		{url: "http://localhost:8080/ui/login", secure: true},
		{url: "http://127.0.0.1:8080/ui/login", secure: true},
		{url: "http://[::1]:8080/ui/login", secure: true},
		{url: "https://jobs.example/ui/login", tls: true, secure: true},
		// --insecure-http beyond loopback: a Secure cookie would be dropped by the browser.
		{url: "http://jobs.example:8080/ui/login", secure: false, noteSaid: true},
		{url: "http://10.0.0.5:8080/ui/login", secure: false, noteSaid: true},
	} {
		r := httptest.NewRequest("POST", tc.url, strings.NewReader(url.Values{"token": {"s3cret"}}.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.Header.Set("Sec-Fetch-Site", "same-origin")
		if !tc.tls {
			r.TLS = nil
		}
		w := serve(h, r)
		cs := w.Result().Cookies()
		if w.Code != http.StatusSeeOther || len(cs) != 1 || cs[0].Secure != tc.secure {
			t.Errorf("login at %s: %d, cookies %+v; want 303 and one cookie with Secure %v", tc.url, w.Code, cs, tc.secure)
		}
		g := httptest.NewRequest("GET", strings.Replace(tc.url, "/ui/login", "/ui/", 1), nil)
		if !tc.tls {
			g.TLS = nil
		}
		body := serve(h, g).Body.String()
		if said := strings.Contains(body, `id="insecure"`); said != tc.noteSaid {
			t.Errorf("login page at %s says the cookie is not Secure: %v, want %v", tc.url, said, tc.noteSaid)
		}
	}
}

func TestUnknownJobActionIs404NamingTheValidOnes(t *testing.T) {
	t.Parallel()
	b := memory.New(memory.Config{})
	h, rg := rig(t, b, ui.Config{})
	env := backend.NewEnvelope("echo", []byte("x"))
	rg.Records.Enqueued(env, false)
	if err := b.Publish(context.Background(), env, 0); err != nil {
		t.Fatal(err)
	}
	post := func(path string) *httptest.ResponseRecorder { return serve(h, formPost(path, nil)) }
	if w := post("/ui/jobs/" + env.ID + "/explode"); w.Code != http.StatusNotFound || !strings.Contains(w.Body.String(), "want cancel, retry or delete") {
		t.Errorf("an unknown action: %d %s, want 404 naming cancel, retry and delete", w.Code, w.Body)
	}
	if w := post("/ui/jobs/" + env.ID + "/delete"); w.Code != http.StatusSeeOther || !strings.HasPrefix(w.Header().Get("Location"), "/ui/queues/echo?") {
		t.Errorf("delete of a pending job: %d to %q, want 303 to its queue", w.Code, w.Header().Get("Location"))
	}
	// Deleted and forgotten: nothing says which queue it was in; back to the overview.
	other := backend.NewEnvelope("echo", []byte("y"))
	if err := b.Publish(context.Background(), other, 0); err != nil {
		t.Fatal(err)
	}
	if w := post("/ui/jobs/" + other.ID + "/delete"); w.Code != http.StatusSeeOther || !strings.HasPrefix(w.Header().Get("Location"), "/ui/?") {
		t.Errorf("delete of a job the history does not know: %d to %q, want 303 to /ui/", w.Code, w.Header().Get("Location"))
	}
}

// deadLetters dead-letters n jobs of queue echo on b.
func deadLetters(t *testing.T, b backend.Backend, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range n {
		if err := b.Publish(ctx, backend.NewEnvelope("echo", []byte("x")), 0); err != nil {
			t.Fatal(err)
		}
	}
	s, err := b.Consume(ctx, backend.QueueConfig{Name: "echo"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Drop()
	for range n {
		select {
		case d := <-s.Deliveries():
			if err := d.DeadLetter(ctx, "broken"); err != nil {
				t.Fatal(err)
			}
		case <-ctx.Done():
			t.Fatal("the jobs were not delivered")
		}
	}
}

func TestDeadLetterConfirmationCountsAllNotTheListed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		b    func() backend.Backend
		want string
	}{
		{"with counts", func() backend.Backend { return memory.New(memory.Config{}) }, "(<span id=\"dead-total\">5</span>)"},
		{"without counts", func() backend.Backend { return noCounts{memory.New(memory.Config{})} }, "(<span id=\"dead-total\">at least 3</span>)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := tc.b()
			h, _ := rig(t, b, ui.Config{MaxDeadListed: 3})
			deadLetters(t, b, 5)
			for _, confirm := range []string{"purge", "replay-all"} {
				body := serve(h, httptest.NewRequest("GET", "http://localhost/ui/dead-letters?queue=echo&confirm="+confirm, nil)).Body.String()
				if !strings.Contains(body, tc.want) {
					t.Errorf("confirm %s with 5 dead letters and a listing cap of 3: want %s in\n%s", confirm, tc.want, body)
				}
			}
		})
	}
}

// noCounts is a backend with dead letters but no counts.
type noCounts struct{ backend.Backend }

func (n noCounts) DeadLetters(ctx context.Context, q string, max int) ([]backend.DeadLetter, error) {
	return n.Backend.(backend.DeadLetterStore).DeadLetters(ctx, q, max)
}

func (n noCounts) ReplayDeadLetter(ctx context.Context, q, id string) error {
	return n.Backend.(backend.DeadLetterStore).ReplayDeadLetter(ctx, q, id)
}

func (n noCounts) PurgeDeadLetters(ctx context.Context, q string) (int, error) {
	return n.Backend.(backend.DeadLetterStore).PurgeDeadLetters(ctx, q)
}

func TestUploadRejectionReasonIsBounded(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", 5000)
	h, _ := rig(t, nil, ui.Config{
		Validate: func(context.Context, string, []byte) (string, error) { return "", errors.New(long) }})
	var body strings.Builder
	mw := multipart.NewWriter(&body)
	f, _ := mw.CreateFormFile("module", "m.wasm")
	f.Write([]byte("\x00asm"))
	mw.Close()
	r := httptest.NewRequest("POST", "http://localhost/ui/modules/validate", strings.NewReader(body.String()))
	r.Header.Set("Content-Type", mw.FormDataContentType())
	r.Header.Set("Sec-Fetch-Site", "same-origin")
	page := serve(h, r).Body.String()
	// The script polls a page's own URL, here /ui/modules/validate, which GET has not.
	if strings.Contains(page, "data-live") {
		t.Errorf("the answer to an upload has live parts: its poll would GET the upload's URL")
	}
	if n := strings.Count(page, "é"); n == 0 || n > 300 {
		t.Errorf("a rejection of 5000 runes shows %d of them, want some and at most 300 bytes' worth", n)
	}
}

// partialCounts counts as RabbitMQ's backend does: pending and dead, but -1 (cannot
// tell) for unacknowledged, delayed and deferred messages.
type partialCounts struct{ *memory.Backend }

func (p partialCounts) QueueStats(ctx context.Context, queue string) (backend.QueueStats, error) {
	st, err := p.Backend.QueueStats(ctx, queue)
	st.Unacked, st.Delayed, st.Deferred = -1, -1, -1
	return st, err
}

// A backend that counts some things and not others shows the reason beside its n/a
// cells, not only a backend that counts nothing.
func TestCountsABackendCannotTellSayWhy(t *testing.T) {
	t.Parallel()
	b := memory.New(memory.Config{})
	if err := b.Declare(context.Background(), backend.QueueConfig{Name: "echo"}); err != nil {
		t.Fatal(err)
	}
	h, _ := rig(t, partialCounts{b}, ui.Config{})
	body := serve(h, httptest.NewRequest("GET", "http://localhost/ui/", nil)).Body.String()
	if !strings.Contains(body, `data-count="pending">0`) || !strings.Contains(body, `<abbr title="the backend cannot count this`) ||
		!strings.Contains(body, "n/a: the broker does not count") {
		t.Errorf("overview with some counts unknown: want the known ones and n/a with the reason:\n%s", body)
	}
}

// Every answer of the dashboard carries its security headers: the pages, and the
// login form, the refusals (cross-site, a foreign Host), the errors and the redirects,
// which are written before (or around) the pages' own handlers.
func TestEveryResponseCarriesTheSecurityHeaders(t *testing.T) {
	t.Parallel()
	h, _ := rig(t, nil, ui.Config{Token: "s3cret", Loopback: true})
	cookie := &http.Cookie{Name: ui.CookieName, Value: "s3cret"}
	for _, tc := range []struct {
		name, method, url, site, body string
		cookie                        bool
		status                        int
	}{
		{name: "a page", method: "GET", url: "http://localhost/ui/", cookie: true, status: 200},
		{name: "a static file", method: "GET", url: "http://localhost/ui/static/app.js", status: 200},
		{name: "a missing static file", method: "GET", url: "http://localhost/ui/static/nope.js", status: 404},
		{name: "an unknown page", method: "GET", url: "http://localhost/ui/nope", cookie: true, status: 404},
		{name: "the login form", method: "GET", url: "http://localhost/ui/modules", status: 401},
		{name: "a wrong token", method: "POST", url: "http://localhost/ui/login", site: "same-origin", body: "token=wrong", status: 401},
		{name: "a login", method: "POST", url: "http://localhost/ui/login", site: "same-origin", body: "token=s3cret", status: 303},
		{name: "a cross-site form", method: "POST", url: "http://localhost/ui/dead-letters/purge", site: "cross-site", body: "queue=echo", cookie: true, status: 403},
		{name: "a foreign Host", method: "GET", url: "http://rebound.example/ui/", cookie: true, status: 403},
		{name: "a logout", method: "POST", url: "http://localhost/ui/logout", site: "same-origin", cookie: true, status: 303},
		{name: "too many wrong tokens", method: "POST", url: "http://localhost/ui/login", site: "same-origin", body: "token=s3cret", status: 429},
	} {
		if tc.status == http.StatusTooManyRequests {
			for range inspect.ClientAuthBurst {
				serve(h, formPost("/ui/login", url.Values{"token": {"wrong"}}))
			}
		}
		r := httptest.NewRequest(tc.method, tc.url, strings.NewReader(tc.body))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if tc.site != "" {
			r.Header.Set("Sec-Fetch-Site", tc.site)
		}
		if tc.cookie {
			r.AddCookie(cookie)
		}
		w := serve(h, r)
		if w.Code != tc.status {
			t.Errorf("%s (%s %s): %d, want %d", tc.name, tc.method, tc.url, w.Code, tc.status)
		}
		for k, want := range map[string]string{
			"Content-Security-Policy": "frame-ancestors 'none'",
			"X-Frame-Options":         "DENY",
			"X-Content-Type-Options":  "nosniff",
			"Referrer-Policy":         "same-origin",
		} {
			if got := w.Header().Get(k); !strings.Contains(got, want) {
				t.Errorf("%s (%s %s, %d): %s %q, want %q", tc.name, tc.method, tc.url, w.Code, k, got, want)
			}
		}
	}
}

// dotSegment reports whether a browser takes seg, a path segment, for "." or ".."
// (the WHATWG URL standard: also when a dot is written %2e) and resolves it away.
func dotSegment(seg string) bool {
	switch strings.ToLower(seg) {
	case ".", "%2e", "..", ".%2e", "%2e.", "%2e%2e":
		return true
	}
	return false
}

// follow goes where a browser goes for the link href of a dashboard page: the link
// must be a path of the dashboard with no dot segment, and a browser sends no
// fragment.
func follow(t *testing.T, h http.Handler, method, href string) *httptest.ResponseRecorder {
	t.Helper()
	u, err := url.Parse(href)
	if err != nil || u.Host != "" || !strings.HasPrefix(u.EscapedPath(), "/ui/") {
		t.Fatalf("link %q: %v, want a path of the dashboard", href, err)
	}
	for _, seg := range strings.Split(u.EscapedPath(), "/") {
		if dotSegment(seg) {
			t.Errorf("link %q has the dot segment %q: a browser resolves it away", href, seg)
		}
	}
	target := u.EscapedPath()
	if u.RawQuery != "" {
		target += "?" + u.RawQuery
	}
	r := httptest.NewRequest(method, "http://localhost"+target, nil)
	r.Header.Set("Sec-Fetch-Site", "same-origin")
	return serve(h, r)
}

// A running job's page has a cancel button, on a backend that cannot act on a waiting
// job too (RabbitMQ's position): pressing it stops the job and its page says cancelled.
func TestCancelARunningJobFromItsPage(t *testing.T) {
	t.Parallel()
	h, rg := rigWith(t, inspecttest.Options{Backend: noControl{memory.New(memory.Config{})}, Run: true,
		Modules: []inspecttest.Module{{Name: "spin", Wasm: "hostile/loop", Manifest: `timeout = "1m"`}}}, ui.Config{})
	env := backend.NewEnvelope("spin", nil)
	rg.Records.Enqueued(env, false)
	if err := rg.Backend.Publish(context.Background(), env, 0); err != nil {
		t.Fatal(err)
	}
	page := "/ui/jobs/" + env.ID
	deadline := time.Now().Add(10 * time.Second)
	var body string
	for body = serve(h, httptest.NewRequest("GET", "http://localhost"+page, nil)).Body.String(); !strings.Contains(body, `id="state">running`); {
		if time.Now().After(deadline) {
			t.Fatalf("the job never ran:\n%s", body)
		}
		time.Sleep(5 * time.Millisecond)
		body = serve(h, httptest.NewRequest("GET", "http://localhost"+page, nil)).Body.String()
	}
	if !strings.Contains(body, `id="cancel"`) {
		t.Fatalf("a running job's page has no cancel button:\n%s", body)
	}
	if w := serve(h, formPost(page+"/cancel", nil)); w.Code != http.StatusSeeOther {
		t.Fatalf("cancel of the running job: %d %s, want 303", w.Code, w.Body)
	}
	body = serve(h, httptest.NewRequest("GET", "http://localhost"+page, nil)).Body.String()
	if !strings.Contains(body, `id="state">cancelled`) || strings.Contains(body, `id="cancel"`) {
		t.Errorf("the job's page after its cancel: want cancelled and no cancel button:\n%s", body)
	}
}

// A job id is whatever its publisher chose (a foreign publisher on RabbitMQ): the
// links to its page and the forms of its actions carry it escaped, and reach it.
func TestJobIDsAnyPublisherChoseAreLinkedEscaped(t *testing.T) {
	t.Parallel()
	b := memory.New(memory.Config{})
	h, rg := rig(t, b, ui.Config{})
	ids := []string{"a/b", "../../etc/passwd", "..", ".", "q?x=1", "frag#ment", "100%", "%2F", "sp ace", "a/../b", "dots..", "é/ü"}
	for _, id := range ids {
		env := backend.NewEnvelope("echo", []byte("x"))
		env.ID = id
		rg.Records.Enqueued(env, false)
		if err := b.Publish(context.Background(), env, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	body := serve(h, httptest.NewRequest("GET", "http://localhost/ui/queues/echo", nil)).Body.String()
	links := map[string]string{}
	for _, m := range regexp.MustCompile(`<a href="([^"]*)"><code>([^<]*)</code></a>`).FindAllStringSubmatch(body, -1) {
		links[html.UnescapeString(m[2])] = html.UnescapeString(m[1])
	}
	for _, id := range ids {
		href, ok := links[id]
		if !ok {
			t.Errorf("the queue page has no link to job %q:\n%s", id, body)
			continue
		}
		w := follow(t, h, "GET", href)
		if want := "<h1>Job <code>" + html.EscapeString(id) + "</code></h1>"; w.Code != 200 || !strings.Contains(w.Body.String(), want) {
			t.Errorf("job %q's link %q: %d, want 200 with its page", id, href, w.Code)
			continue
		}
		m := regexp.MustCompile(`<form method="post" action="([^"]*)"><button type="submit" id="cancel">`).FindStringSubmatch(w.Body.String())
		if m == nil {
			t.Errorf("job %q's page has no cancel form", id)
			continue
		}
		action := html.UnescapeString(m[1])
		w = follow(t, h, "POST", action)
		if w.Code != http.StatusSeeOther {
			t.Errorf("job %q's cancel %q: %d %s, want 303", id, action, w.Code, w.Body)
			continue
		}
		w = follow(t, h, "GET", w.Header().Get("Location"))
		if w.Code != 200 || !strings.Contains(w.Body.String(), `id="state">cancelled`) || !strings.Contains(w.Body.String(), html.EscapeString(id)) {
			t.Errorf("job %q after its cancel: %d, want its page saying cancelled", id, w.Code)
		}
	}
}

// Wrong tokens are limited, per client and over all clients, at the login form and as
// a cookie: past the limit a client is answered 429 with Retry-After, and its token is
// not looked at (the right one is refused too) until the limit has refilled.
func TestWrongTokensAreLimited(t *testing.T) {
	t.Parallel()
	login := func(h http.Handler, addr, token string) *httptest.ResponseRecorder {
		r := formPost("/ui/login", url.Values{"token": {token}})
		r.RemoteAddr = addr
		return serve(h, r)
	}
	page := func(h http.Handler, addr, cookie string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "http://localhost/ui/schedules", nil) // a page that needs no backend
		r.AddCookie(&http.Cookie{Name: ui.CookieName, Value: cookie})
		r.RemoteAddr = addr
		return serve(h, r)
	}
	refused := func(t *testing.T, what string, w *httptest.ResponseRecorder, retry string) {
		t.Helper()
		if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != retry || len(w.Result().Cookies()) != 0 {
			t.Errorf("%s: %d, Retry-After %q, cookies %v; want 429, Retry-After %s and no cookie", what, w.Code, w.Header().Get("Retry-After"), w.Result().Cookies(), retry)
		}
	}
	t.Run("per client", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			h := bare(ui.Config{Token: "s3cret"})
			for i := range 5 {
				if w := login(h, "192.0.2.1:4000", fmt.Sprint("guess", i)); w.Code != 401 {
					t.Fatalf("wrong token %d: %d, want 401", i+1, w.Code)
				}
			}
			refused(t, "the right token after 5 wrong ones", login(h, "192.0.2.1:4001", "s3cret"), "12")
			refused(t, "a cookie after 5 wrong tokens", page(h, "192.0.2.1:4002", "s3cret"), "12")
			if w := login(h, "192.0.2.2:4000", "s3cret"); w.Code != http.StatusSeeOther {
				t.Errorf("another client's right token: %d, want 303", w.Code)
			}
			// An IPv6 client is its /64: another address of it is the same client.
			for i := range 5 {
				page(h, fmt.Sprintf("[2001:db8::%d]:4000", i+1), "wrong")
			}
			refused(t, "another address of an IPv6 /64 after 5 wrong cookies", login(h, "[2001:db8::99]:4000", "s3cret"), "12")
			time.Sleep(12 * time.Second)
			if w := login(h, "192.0.2.1:4003", "s3cret"); w.Code != http.StatusSeeOther {
				t.Errorf("the right token once the limit refilled: %d, want 303", w.Code)
			}
			if w := login(h, "192.0.2.1:4003", "wrong"); w.Code != 401 {
				t.Errorf("a wrong token with one attempt refilled: %d, want 401", w.Code)
			}
			refused(t, "the right token past the refill", login(h, "192.0.2.1:4004", "s3cret"), "12")
		})
	})
	t.Run("over all clients", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			h := bare(ui.Config{Token: "s3cret"})
			for i := range 20 {
				if w := login(h, fmt.Sprintf("198.51.100.%d:4000", i+1), "wrong"); w.Code != 401 {
					t.Fatalf("wrong token from client %d: %d, want 401", i+1, w.Code)
				}
			}
			refused(t, "a new client's right token after 20 wrong ones from others", login(h, "203.0.113.1:4000", "s3cret"), "1")
			time.Sleep(time.Second)
			if w := login(h, "203.0.113.1:4000", "s3cret"); w.Code != http.StatusSeeOther {
				t.Errorf("a new client's right token a second later: %d, want 303", w.Code)
			}
		})
	})
}

// A user signed in is not held off by other clients' wrong tokens: while a guesser
// spread over many addresses keeps the limit over all clients empty, their cookie
// still opens the pages. And only a bearer Authorization header is a token tried: a
// proxy's Basic header on every page before sign-in counts nothing.
func TestARightTokenIsNotRefusedForOthersWrongOnes(t *testing.T) {
	t.Parallel()
	page := func(h http.Handler, addr, cookie, auth string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "http://localhost/ui/schedules", nil) // a page that needs no backend
		if cookie != "" {
			r.AddCookie(&http.Cookie{Name: ui.CookieName, Value: cookie})
		}
		if auth != "" {
			r.Header.Set("Authorization", auth)
		}
		r.RemoteAddr = addr
		return serve(h, r)
	}
	t.Run("signed in", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			h := bare(ui.Config{Token: "s3cret"})
			const user = "192.0.2.7:4000"
			if w := page(h, user, "s3cret", ""); w.Code != 200 {
				t.Fatalf("a page with the cookie: %d, want 200", w.Code)
			}
			for i := range 60 * 10 { // 60 addresses, each a wrong cookie a minute, for 10 minutes
				if i >= 20 {
					time.Sleep(time.Second)
				}
				page(h, fmt.Sprintf("198.51.100.%d:4000", i%60+1), "wrong", "")
			}
			if w := page(h, user, "s3cret", ""); w.Code != 200 {
				t.Errorf("a signed-in user's page while others guess: %d (Retry-After %q), want 200", w.Code, w.Header().Get("Retry-After"))
			}
		})
	})
	t.Run("basic", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			h := bare(ui.Config{Token: "s3cret"})
			const proxy = "192.0.2.1:4000"
			for i := range 20 {
				if w := page(h, proxy, "", "Basic dXNlcjpwYXNz"); w.Code != 401 {
					t.Fatalf("page %d with a Basic header and no cookie: %d, want 401 with the login form", i+1, w.Code)
				}
			}
			if w := page(h, proxy, "s3cret", ""); w.Code != 200 {
				t.Errorf("the cookie after 20 pages with a Basic header: %d, want 200", w.Code)
			}
		})
	})
}

// A wrong cookie (the token changed with a restart) is cleared along with the login
// form, so that the browser does not send it, and count it, with every page and poll.
func TestAWrongCookieIsCleared(t *testing.T) {
	t.Parallel()
	h := bare(ui.Config{Token: "s3cret"})
	r := httptest.NewRequest("GET", "http://localhost/ui/", nil)
	r.AddCookie(&http.Cookie{Name: ui.CookieName, Value: "old"})
	w := serve(h, r)
	cs := w.Result().Cookies()
	if w.Code != 401 || len(cs) != 1 || cs[0].Name != ui.CookieName || cs[0].MaxAge >= 0 || cs[0].Path != "/ui/" {
		t.Errorf("a page with a wrong cookie: %d, cookies %+v; want 401 and the cookie cleared on /ui/", w.Code, cs)
	}
}

// The layout's sign-out button posts to /ui/logout, which clears the cookie, under the
// cross-origin protection of the other forms.
func TestLogoutClearsTheCookie(t *testing.T) {
	t.Parallel()
	h, _ := rig(t, nil, ui.Config{Token: "s3cret"})
	cookie := &http.Cookie{Name: ui.CookieName, Value: "s3cret"}
	r := httptest.NewRequest("GET", "http://localhost/ui/modules", nil)
	r.AddCookie(cookie)
	if body := serve(h, r).Body.String(); !strings.Contains(body, `<form method="post" action="/ui/logout"`) || !strings.Contains(body, `id="logout"`) {
		t.Errorf("a page of a host with a token has no sign-out form:\n%s", body)
	}
	post := func(site string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", "http://localhost/ui/logout", nil)
		r.Header.Set("Sec-Fetch-Site", site)
		r.AddCookie(cookie)
		return serve(h, r)
	}
	if w := post("cross-site"); w.Code != http.StatusForbidden || len(w.Result().Cookies()) != 0 {
		t.Errorf("a cross-site logout: %d, cookies %v; want 403 and none", w.Code, w.Result().Cookies())
	}
	w := post("same-origin")
	cs := w.Result().Cookies()
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/ui/" || len(cs) != 1 || cs[0].Name != ui.CookieName ||
		cs[0].Value != "" || cs[0].MaxAge >= 0 || cs[0].Path != "/ui/" || !cs[0].HttpOnly {
		t.Errorf("logout: %d to %q, cookies %+v; want 303 to /ui/ clearing the HttpOnly cookie on /ui/", w.Code, w.Header().Get("Location"), cs)
	}
	open, _ := rig(t, nil, ui.Config{})
	if body := serve(open, httptest.NewRequest("GET", "http://localhost/ui/modules", nil)).Body.String(); strings.Contains(body, `id="logout"`) {
		t.Errorf("a host without a token shows a sign-out button")
	}
}
