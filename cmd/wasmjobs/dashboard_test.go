package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// chromium is Debian's headless browser, which .ci/run installs.
const chromium = "/usr/bin/chromium"

// browser starts a headless Chromium for one test and fails the test on any console
// error or uncaught exception of the pages it loads.
func browser(t *testing.T, allowStatus bool) context.Context {
	t.Helper()
	path := chromium
	if _, err := os.Stat(path); err != nil {
		if p, err := exec.LookPath("chromium"); err == nil {
			path = p
		} else if os.Getenv("CI") == "true" {
			t.Fatalf("chromium is missing (CI installs it: apt-get install chromium): %v", err)
		} else {
			t.Skipf("no chromium here (apt-get install chromium): %v", err)
		}
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path),
		chromedp.NoSandbox, chromedp.Flag("disable-gpu", true), chromedp.WindowSize(1280, 900))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	ctx, cancelT := context.WithTimeout(ctx, 90*time.Second)
	var mu sync.Mutex
	var problems []string
	messages := chromedp.Console(ctx)
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleWarning || m.IsException() {
				if allowStatus && m.Source == "network" {
					continue // the status of a page the test asked for on purpose
				}
				mu.Lock()
				problems = append(problems, m.String())
				mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		cancelT()
		cancel()
		cancelA()
		mu.Lock()
		defer mu.Unlock()
		for _, p := range problems {
			t.Errorf("the page logged %s", p)
		}
	})
	return ctx
}

func do(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func value[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

func (h *hostProc) enqueueJSON(body string) string {
	h.t.Helper()
	code, out := h.post("/v1/jobs", body)
	if code != http.StatusAccepted {
		h.t.Fatalf("enqueue %s: %d %s", body, code, out)
	}
	var r struct{ ID string }
	json.Unmarshal([]byte(out), &r)
	return r.ID
}

type jobView struct {
	State      string
	Attempt    int
	Output     string
	FinishedAt time.Time `json:"finished_at"`
	Module     struct{ Name, Version string }
}

func (h *hostProc) job(id string) jobView {
	var j jobView
	h.get("/v1/jobs/"+id, &j)
	return j
}

// TestDashboardInChromium drives the dashboard of a real `wasmjobs run` (the durable
// default backend) in headless Chromium: the overview's counts are those of
// /v1/queues, a job page shows its output and module version, cancel, retry now,
// replay and purge from the pages are seen by the API, and no page logs an error.
func TestDashboardInChromium(t *testing.T) {
	dir := t.TempDir()
	installModule(t, dir, "abi/echo", "echo", "v1")
	installModule(t, dir, "abi/dead_letter", "dead", "v1")
	writeManifest(t, dir, "spin", `timeout = "1m"`)
	installModule(t, dir, "hostile/loop", "spin", "v1")
	h := startHost(t, dir)
	ctx := browser(t, false)
	ui := strings.Replace(h.url, "127.0.0.1", "localhost", 1) + "/ui/"

	done := h.enqueueJSON(`{"queue":"echo","payload":"hello from the dashboard"}`)
	cancelMe := h.enqueueJSON(`{"queue":"echo","payload":"later","delay":"1h"}`)
	retryMe := h.enqueueJSON(`{"queue":"echo","payload":"retried now","delay":"1h"}`)
	var dead []string
	for i := range 3 {
		dead = append(dead, h.enqueueJSON(fmt.Sprintf(`{"queue":"dead","payload":"doomed %d"}`, i)))
	}
	waitFor(t, "the jobs to settle", func() bool {
		for _, id := range append([]string{done}, dead...) {
			if s := h.job(id).State; s != "succeeded" && s != "dead" {
				return false
			}
		}
		return true
	})

	// The overview's counts are those of /v1/queues.
	var qs struct {
		Queues []struct {
			Name                             string
			Pending, Delayed, Deferred, Dead int
		}
	}
	h.get("/v1/queues", &qs)
	do(t, ctx, "overview", chromedp.Navigate(ui), chromedp.WaitVisible(`tr[data-queue="echo"]`))
	cells := value(t, ctx, "overview counts", chromedp.Evaluate[map[string]string](`(() => { const o = {}; document.querySelectorAll('tr[data-queue] td[data-count]').forEach(td => {
			o[td.closest('tr').dataset.queue + '.' + td.dataset.count] = td.textContent.trim() }); return o })()`))
	for _, q := range qs.Queues {
		for name, want := range map[string]int{"pending": q.Pending, "delayed": q.Delayed, "deferred": q.Deferred, "dead": q.Dead} {
			if got := cells[q.Name+"."+name]; got != fmt.Sprint(want) {
				t.Errorf("overview %s %s = %q, /v1/queues says %d", q.Name, name, got, want)
			}
		}
	}
	if cells["echo.delayed"] != "2" || cells["dead.dead"] != "3" {
		t.Errorf("overview cells %v: want echo delayed 2 and dead dead 3", cells)
	}
	// The counts refresh by themselves: a job enqueued now shows without a reload.
	h.enqueueJSON(`{"queue":"echo","payload":"live","delay":"1h"}`)
	value(t, ctx, "the live count", chromedp.Poll[bool](`document.querySelector('tr[data-queue="echo"] td[data-count="delayed"]').textContent.trim() === "3"`,
		chromedp.WithPollingTimeout(20*time.Second)))

	// A job page shows the output and the module version.
	j := h.job(done)
	do(t, ctx, "job page", chromedp.Navigate(ui+"jobs/"+done), chromedp.WaitVisible(`#output`))
	output := value(t, ctx, "output", chromedp.Text(`#output`))
	version := value(t, ctx, "version", chromedp.AttributeValue(`#version`, "title")).Value
	when := value(t, ctx, "time", chromedp.Text(`dd time`))
	utc := value(t, ctx, "time's title", chromedp.AttributeValue(`dd time`, "title")).Value
	if output != "hello from the dashboard" || version != j.Module.Version || version == "" {
		t.Errorf("job page: output %q, version %q; want the payload echoed and version %q", output, version, j.Module.Version)
	}
	if !strings.HasSuffix(utc, "UTC") || when == "" {
		t.Errorf("time shown %q with hover %q: want the UTC value on hover", when, utc)
	}

	// Cancel and retry now from the job page.
	do(t, ctx, "a waiting job", chromedp.Navigate(ui+"jobs/"+cancelMe), chromedp.WaitVisible(`#payload`))
	if p := value(t, ctx, "payload", chromedp.Text(`#payload`)); p != "later" {
		t.Errorf("a delayed job's page shows payload %q, want \"later\"", p)
	}
	do(t, ctx, "cancel", chromedp.Click(`#cancel`), chromedp.WaitVisible(`p.flash`))
	if s := h.job(cancelMe).State; s != "cancelled" {
		t.Errorf("after Cancel on the page the API says %s, want cancelled", s)
	}
	// A running job has the button too: pressing it stops the job where it spins.
	spinning := h.enqueueJSON(`{"queue":"spin","payload":""}`)
	waitFor(t, "the spinning job to run", func() bool { return h.job(spinning).State == "running" })
	do(t, ctx, "cancel a running job", chromedp.Navigate(ui+"jobs/"+spinning), chromedp.Click(`#cancel`), chromedp.WaitVisible(`p.flash`))
	if j := h.job(spinning); j.State != "cancelled" {
		t.Errorf("after Cancel on a running job's page the API says %s, want cancelled", j.State)
	}
	do(t, ctx, "retry now", chromedp.Navigate(ui+"jobs/"+retryMe), chromedp.Click(`#retry`), chromedp.WaitVisible(`p.flash`))
	waitFor(t, "the retried job to run", func() bool { return h.job(retryMe).Output == "retried now" })

	// Replay one dead letter, then purge the rest with the confirmation step.
	before := h.job(dead[0]).FinishedAt
	do(t, ctx, "replay", chromedp.Navigate(ui+"dead-letters?queue=dead"),
		chromedp.Click(fmt.Sprintf(`tr[data-id="%s"] button.replay`, dead[0])), chromedp.WaitVisible(`p.flash`))
	waitFor(t, "the replayed job to run again", func() bool {
		j := h.job(dead[0])
		return j.State == "dead" && j.FinishedAt.After(before)
	})
	do(t, ctx, "attempts", chromedp.Navigate(ui+"jobs/"+dead[0]), chromedp.WaitVisible(`#attempts`))
	if n := value(t, ctx, "attempts", chromedp.Evaluate[int](`document.querySelectorAll('#attempts tbody tr').length`)); n != 2 {
		t.Errorf("the replayed dead job's page lists %d attempts, want 2 (the first run and the replay)", n)
	}
	do(t, ctx, "purge", chromedp.Navigate(ui+"dead-letters?queue=dead"), chromedp.Click(`#purge`),
		chromedp.WaitVisible(`#confirm-purge`), chromedp.Click(`#confirm`), chromedp.WaitVisible(`p.flash`))
	var dl struct {
		DeadLetters []any `json:"dead_letters"`
	}
	h.get("/v1/dead-letters?queue=dead", &dl)
	if len(dl.DeadLetters) != 0 {
		t.Errorf("after Purge on the page the API lists %d dead letters, want none", len(dl.DeadLetters))
	}

	// The modules page and a queue page render (and log no error).
	do(t, ctx, "modules", chromedp.Navigate(ui+"modules"), chromedp.WaitVisible(`#modules`))
	mods := value(t, ctx, "modules", chromedp.Text(`#modules`))
	if !strings.Contains(mods, "echo") || !strings.Contains(mods, "loaded") {
		t.Errorf("modules page: %q; want module echo with its history (loaded)", mods)
	}
	do(t, ctx, "queue", chromedp.Navigate(ui+"queues/echo"), chromedp.WaitVisible(`table.jobs`))
	rows := value(t, ctx, "queue rows", chromedp.Evaluate[int](`document.querySelectorAll('table.jobs tbody a').length`))
	if rows != 4 {
		t.Errorf("queue page lists %d jobs, want the 4 of echo", rows)
	}

	// A candidate uploaded on the modules page is validated, not served.
	wasm, _ := filepath.Abs("../../testdata/abi/echo.wasm")
	junk := filepath.Join(t.TempDir(), "junk.wasm")
	os.WriteFile(junk, []byte("not a module"), 0o644)
	for file, want := range map[string]string{wasm: "OK, version", junk: "rejected: "} {
		do(t, ctx, "upload", chromedp.Navigate(ui+"modules"), chromedp.SetUploadFiles(`#module`, []string{file}),
			chromedp.Submit(`#module`), chromedp.WaitVisible(`#result`))
		if got := value(t, ctx, "upload result", chromedp.Text(`#result`)); !strings.Contains(got, want) {
			t.Errorf("uploading %s: %q, want %q", filepath.Base(file), got, want)
		}
	}
	var mods2 struct{ Modules []struct{ Name string } }
	h.get("/v1/modules", &mods2)
	if len(mods2.Modules) != 3 {
		t.Errorf("after the uploads the host serves %d modules, want the same 3", len(mods2.Modules))
	}
	if status := h.get("/ui/jobs/NOSUCHJOB", nil); status != http.StatusNotFound {
		t.Errorf("an unknown job's page answered %d, want 404", status)
	}
}

// TestDashboardRefusesCrossSiteAndAsksForTheToken: with a token set, a page without
// the cookie shows the login form, and the token opens it; a form posted from another
// site is refused and changes nothing.
func TestDashboardRefusesCrossSiteAndAsksForTheToken(t *testing.T) {
	dir := t.TempDir()
	installModule(t, dir, "abi/echo", "echo", "v1")
	h := startHost(t, dir, "--token", "s3cret")
	ctx := browser(t, true) // the login page answers 401, the refused post 403: on purpose
	ui := strings.Replace(h.url, "127.0.0.1", "localhost", 1) + "/ui/"

	req, _ := http.NewRequest("POST", h.url+"/v1/jobs", strings.NewReader(`{"queue":"echo","payload":"x","delay":"1h"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var enq struct{ ID string }
	json.NewDecoder(resp.Body).Decode(&enq)
	resp.Body.Close()

	do(t, ctx, "login", chromedp.Navigate(ui), chromedp.WaitVisible(`#login`))
	heading := value(t, ctx, "heading", chromedp.Text(`h1`))
	if heading != "Sign in" {
		t.Fatalf("a page without the cookie shows %q, want the login form", heading)
	}
	do(t, ctx, "sign in", chromedp.SendKeys(`#token`, "s3cret"), chromedp.Submit(`#token`),
		chromedp.WaitVisible(`tr[data-queue="echo"]`))
	heading = value(t, ctx, "heading", chromedp.Text(`h1`))
	if heading != "Overview" {
		t.Fatalf("after signing in: %q, want the overview", heading)
	}

	// Another site's page posts a form to the dashboard's cancel action.
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `<!doctype html><form id="f" method="post" action="%sjobs/%s/cancel"></form><script>document.getElementById('f').submit()</script>`, ui, enq.ID)
	}))
	defer evil.Close()
	do(t, ctx, "cross-site post", chromedp.Navigate(evil.URL))
	value(t, ctx, "the post's answer", chromedp.Poll[bool](`location.href.includes('/cancel') && document.body.innerText.length > 0`))
	body := value(t, ctx, "body", chromedp.Text(`body`))
	if !strings.Contains(body, "cross-origin request refused") {
		t.Errorf("a cross-site POST got %q, want it refused", body)
	}
	var j jobView
	req, _ = http.NewRequest("GET", h.url+"/v1/jobs/"+enq.ID, nil)
	req.Header.Set("Authorization", "Bearer s3cret")
	if resp, err := http.DefaultClient.Do(req); err == nil {
		json.NewDecoder(resp.Body).Decode(&j)
		resp.Body.Close()
	}
	if j.State != "delayed" {
		t.Errorf("after the refused cross-site cancel the job is %q, want still delayed", j.State)
	}
}

// TestRunServesTLS: with --tls-cert and --tls-key the API and the dashboard answer over
// TLS, and / redirects to /ui/.
func TestRunServesTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	installModule(t, dir, "abi/echo", "echo", "v1")
	certDir := t.TempDir()
	cert, key := filepath.Join(certDir, "cert.pem"), filepath.Join(certDir, "key.pem")
	writeSelfSigned(t, cert, key)
	h := startHost(t, dir, "--tls-cert", cert, "--tls-key", key)
	if !strings.HasPrefix(h.url, "https://") {
		t.Fatalf("the host says it serves %s, want https://", h.url)
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := client.Get(h.url + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Request.URL.Path != "/ui/" || resp.TLS == nil {
		t.Errorf("GET / over TLS: %d at %s (TLS %v), want 200 at /ui/", resp.StatusCode, resp.Request.URL.Path, resp.TLS != nil)
	}
}

func writeSelfSigned(t *testing.T, certFile, keyFile string) {
	t.Helper()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), DNSNames: []string{"localhost"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &priv.PublicKey, priv)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}), 0o600)
}

// TestDashboardShowsRolloutsSchedulesAndRecordedAttempts runs the real binary on
// pebble with a module that has a schedule and a canary rollout: a trapping version is
// rolled back by itself, and the modules page shows the verdict with its reason and
// both rates; the schedules page lists the schedule with its next run; after a restart
// a job that failed on the canary and succeeded on the version before lists both
// attempts, each with its version, from its record.
func TestDashboardShowsRolloutsSchedulesAndRecordedAttempts(t *testing.T) {
	dir, data := t.TempDir(), filepath.Join(t.TempDir(), "data")
	man := "max_attempts = 3\nbackoff_base = \"1ms\"\nbackoff_cap = \"1ms\"\n\n[rollout]\ncanary_percent = 100\ncanary_min_jobs = 5\ncanary_jobs = 1000\ncanary_time = \"1h\"\n\n" +
		"[[schedule]]\nname = \"hourly\"\ncron = \"0 * * * *\"\ntimezone = \"Europe/Paris\"\npayload = \"\"\n"
	writeManifest(t, dir, "work", man)
	installModule(t, dir, "abi/sleep_ms", "work", "v1")
	h := startHost(t, dir, "--data-dir", data)
	ctx := browser(t, false)
	var st moduleState
	get := func(out *moduleState) { *out = moduleState{}; h.get("/v1/modules", out) }
	get(&st)
	v1 := st.Modules[0].Version
	installModule(t, dir, "hostile/trap", "work", "bad")
	waitFor(t, "the canary", func() bool { get(&st); return st.Modules[0].Canary != nil })
	bad := st.Modules[0].Canary.Version
	var ids []string
	for range 6 {
		ids = append(ids, h.enqueueJSON(`{"queue":"work","payload":""}`))
	}
	waitFor(t, "the rollback", func() bool { get(&st); return st.Modules[0].LastRollout != nil })
	waitFor(t, "the jobs", func() bool {
		for _, id := range ids {
			if h.job(id).State != "succeeded" {
				return false
			}
		}
		return true
	})
	ui := strings.Replace(h.url, "127.0.0.1", "localhost", 1) + "/ui/"
	do(t, ctx, "modules", chromedp.Navigate(ui+"modules"), chromedp.WaitVisible(`#verdict-work`))
	// The page refreshes #modules by itself: read it in one script, not node by node.
	page := value(t, ctx, "modules page", chromedp.Evaluate[map[string]string](`(() => {
		const o = {verdict: document.querySelector('#verdict-work').textContent, pin: document.querySelector('dd.pin').textContent};
		document.querySelectorAll('table.kept tr[data-version]').forEach(tr => { o[tr.dataset.version] = tr.textContent }); return o })()`))
	verdict := page["verdict"]
	for _, want := range []string{"rolled_back", "canary failure rate 1.000", "100% failed of 5", "0% failed of"} {
		if !strings.Contains(verdict, want) {
			t.Errorf("the modules page's last rollout %q lacks %q", verdict, want)
		}
	}
	if pin := page["pin"]; !strings.Contains(pin, v1[:12]) {
		t.Errorf("the modules page's pin %q, want %s", pin, v1[:12])
	}
	kept := page
	if !strings.Contains(kept[bad], "rolled_back") || !strings.Contains(kept[bad], "canary failure rate") || !strings.Contains(kept[v1], "current") {
		t.Errorf("kept versions %v: want %s rolled back with its reason and %s current", kept, bad, v1)
	}

	do(t, ctx, "schedules", chromedp.Navigate(ui+"schedules"), chromedp.WaitVisible(`tr[data-schedule="work/hourly"]`))
	row := value(t, ctx, "schedule row", chromedp.Text(`tr[data-schedule="work/hourly"]`))
	next := value(t, ctx, "next run", chromedp.AttributeValue(`tr[data-schedule="work/hourly"] td.next time`, "datetime")).Value
	at, err := time.Parse(time.RFC3339Nano, next)
	if err != nil || !at.After(time.Now()) || at.After(time.Now().Add(time.Hour)) || at.Minute() != 0 || at.Second() != 0 {
		t.Errorf("next run %q (%v): want the next full hour", next, err)
	}
	for _, want := range []string{"0 * * * *", "Europe/Paris", "yes"} {
		if !strings.Contains(row, want) {
			t.Errorf("schedule row %q lacks %q", row, want)
		}
	}

	stopHost(t, h, syscall.SIGTERM)
	h = startHost(t, dir, "--data-dir", data)
	ui = strings.Replace(h.url, "127.0.0.1", "localhost", 1) + "/ui/"
	do(t, ctx, "attempts after a restart", chromedp.Navigate(ui+"jobs/"+ids[0]), chromedp.WaitVisible(`#attempts`))
	versions := value(t, ctx, "attempt versions", chromedp.Evaluate[[]string](`[...document.querySelectorAll('#attempts tbody tr')].map(tr => tr.cells[1].textContent.trim() + " " + tr.querySelector('code').title + " " + (tr.querySelector('.role') || {}).textContent)`))
	// The ack's role is "current" when the retry ran while the canary still ran, and
	// none when it ran after the rollback (no rollout then: a loaded machine).
	want, after := []string{"retry " + bad + " canary", "ack " + v1 + " current"}, []string{"retry " + bad + " canary", "ack " + v1 + " undefined"}
	if !slices.Equal(versions, want) && !slices.Equal(versions, after) {
		t.Errorf("after a restart the job page lists attempts %q, want %q (or the ack with no role, run after the rollback)", versions, want)
	}
	stopHost(t, h, syscall.SIGTERM)
}
