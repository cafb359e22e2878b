package ui_test

import (
	"context"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/memory"
	"github.com/wasmjobs/wasmjobs/backend/pebble"
	"github.com/wasmjobs/wasmjobs/host"
	"github.com/wasmjobs/wasmjobs/internal/api"
	"github.com/wasmjobs/wasmjobs/internal/schedule"
	"github.com/wasmjobs/wasmjobs/internal/ui"
)

// rig is the dashboard over a memory backend and a registry of testdata's echo module
// (no worker: nothing runs, jobs stay where they are put).
func rig(t *testing.T, b backend.Backend, cfg ui.Config) (http.Handler, *host.Registry) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	wasm, err := os.ReadFile("../../testdata/abi/echo.wasm")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "echo.wasm"), wasm, 0o644)
	e, err := host.NewEngine(ctx, host.Config{NoCache: true})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := host.NewRegistry(host.RegistryConfig{Dir: dir, Engine: e, Queues: noQueues{}})
	if err != nil {
		t.Fatal(err)
	}
	reg.Sync(ctx)
	if err := b.Declare(ctx, backend.QueueConfig{Name: "echo"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		reg.Close()
		reg.Retire()
		b.Close(ctx)
		e.Close(ctx)
	})
	cfg.Backend, cfg.Registry = b, reg
	return ui.New(cfg), reg
}

func serve(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestLoginSetsAStrictCookieAndRedirectsOnlyInside(t *testing.T) {
	t.Parallel()
	h, _ := rig(t, memory.New(memory.Config{}), ui.Config{Token: "s3cret", History: api.NewHistory(10)})
	if w := serve(h, httptest.NewRequest("GET", "http://localhost/ui/modules", nil)); w.Code != 401 || !strings.Contains(w.Body.String(), `id="login"`) {
		t.Fatalf("a page without the token: %d, want 401 with the login form", w.Code)
	}
	post := func(form url.Values) *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", "http://localhost/ui/login", strings.NewReader(form.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.Header.Set("Sec-Fetch-Site", "same-origin")
		return serve(h, r)
	}
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
	h, _ := rig(t, memory.New(memory.Config{}), ui.Config{MaxUpload: 1 << 20,
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
	hist := api.NewHistory(10)
	h, _ := rig(t, noControl{memory.New(memory.Config{})}, ui.Config{History: hist})
	env := backend.NewEnvelope("echo", []byte("x"))
	hist.Enqueued(env, false)
	body := serve(h, httptest.NewRequest("GET", "http://localhost/ui/jobs/"+env.ID, nil)).Body.String()
	if !strings.Contains(body, "Unavailable: the broker cannot find a queued message by id") || strings.Contains(body, `id="cancel"`) {
		t.Errorf("job page on a backend without job control: want the reason and no cancel button:\n%s", body)
	}
	body = serve(h, httptest.NewRequest("GET", "http://localhost/ui/", nil)).Body.String()
	if !strings.Contains(body, `data-count="pending">n/a`) {
		t.Errorf("overview on a backend that cannot count: want n/a, never a made-up 0:\n%s", body)
	}
	r := httptest.NewRequest("POST", "http://localhost/ui/jobs/"+env.ID+"/cancel", nil)
	r.Header.Set("Sec-Fetch-Site", "same-origin")
	if w := serve(h, r); w.Code != http.StatusNotImplemented {
		t.Errorf("cancel on a backend that cannot: %d, want 501", w.Code)
	}
}

func TestPagesAnswerAndRefuseWhatTheyShould(t *testing.T) {
	t.Parallel()
	h, _ := rig(t, memory.New(memory.Config{}), ui.Config{Loopback: true, History: api.NewHistory(10)})
	for _, tc := range []struct {
		method, url, site string
		status            int
	}{
		{"GET", "http://localhost/ui/", "", 200},
		{"GET", "http://localhost/ui/queues/echo", "", 200},
		{"GET", "http://localhost/ui/queues/nope", "", 404},
		{"GET", "http://localhost/ui/queues/echo?state=sleeping", "", 400},
		{"GET", "http://localhost/ui/jobs/NOSUCHJOB", "", 404},
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
	h, _ := rig(t, b, ui.Config{Attempts: api.NewAttempts(10)})
	st, err := api.Jobs{Backend: b}.Get(ctx, env.ID)
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
	h, _ := rig(t, memory.New(memory.Config{}), ui.Config{Schedules: func() []schedule.Status {
		return []schedule.Status{{Name: "echo/nightly", Module: "echo", Queue: "echo", Cron: "0 3 * * *", Timezone: "Europe/Paris", Next: next, Firing: true}}
	}})
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
	h, _ := rig(t, memory.New(memory.Config{}), ui.Config{})
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
