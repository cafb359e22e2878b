package otel

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
	"go.opentelemetry.io/collector/receiver/receivertest"
)

// The rig: the wasmjobs binary built once from the repository, the test modules built
// from their WAT sources, a real OTLP receiver (the collector's own) with a sink, the
// host as a process, and a loopback server the guests call.

// rig holds what TestMain built: the binary and the modules, shared by every test.
var rig struct {
	root   string // the repository
	binary string
	steps  []byte // testdata/steps.wat
	ack    []byte // the repository's testdata/abi/ack.wat
}

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "wasmjobs-otel-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if err := build(dir); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	return m.Run()
}

// build builds the binary and the modules into dir.
func build(dir string) error {
	// The module sits at test/otel of the repository; go test runs in its directory.
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(root, "cmd", "wasmjobs", "main.go")); err != nil {
		return fmt.Errorf("the repository is not two directories up: %w", err)
	}
	rig.root = root
	rig.binary = filepath.Join(dir, "wasmjobs")
	// -race, as the main module's own tests build it (so after `make test` its packages
	// are compiled already), and so that the span code runs under the race detector.
	cmd := exec.Command("go", "build", "-race", "-o", rig.binary, "./cmd/wasmjobs")
	cmd.Dir = rig.root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building wasmjobs: %w\n%s", err, out)
	}
	if _, err := exec.LookPath("wat2wasm"); err != nil {
		return fmt.Errorf("the test modules are built with wabt's wat2wasm (apt-get install wabt): %w", err)
	}
	for _, m := range []struct {
		src string // WAT
		dst *[]byte
	}{{"testdata/steps.wat", &rig.steps}, {filepath.Join(rig.root, "testdata/abi/ack.wat"), &rig.ack}} {
		wasm := filepath.Join(dir, filepath.Base(m.src)+".wasm")
		if out, err := exec.Command("wat2wasm", m.src, "-o", wasm).CombinedOutput(); err != nil {
			return fmt.Errorf("wat2wasm %s: %w\n%s", m.src, err, out)
		}
		if *m.dst, err = os.ReadFile(wasm); err != nil {
			return err
		}
	}
	return nil
}

// freePort returns a loopback port nobody listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// collector is the collector's OTLP receiver, over gRPC and HTTP on loopback, with
// the spans it received in a sink.
type collector struct {
	grpcPort, httpPort int
	sink               *consumertest.TracesSink
}

// startCollector starts a receiver on two ports picked free, stopped by t's cleanup.
func startCollector(t *testing.T) *collector {
	t.Helper()
	c := &collector{grpcPort: freePort(t), httpPort: freePort(t), sink: new(consumertest.TracesSink)}
	f := otlpreceiver.NewFactory()
	cfg := f.CreateDefaultConfig().(*otlpreceiver.Config)
	cfg.Protocols.GRPC.GetOrInsertDefault().NetAddr.Endpoint = fmt.Sprintf("127.0.0.1:%d", c.grpcPort)
	cfg.Protocols.HTTP.GetOrInsertDefault().ServerConfig.NetAddr.Endpoint = fmt.Sprintf("127.0.0.1:%d", c.httpPort)
	recv, err := f.CreateTraces(context.Background(), receivertest.NewNopSettings(f.Type()), cfg, c.sink)
	if err != nil {
		t.Fatal(err)
	}
	if err := recv.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { recv.Shutdown(context.Background()) })
	return c
}

// env is the host's environment to export to c over proto (grpc or http/protobuf).
func (c *collector) env(proto string) []string {
	port := c.httpPort
	if proto == "grpc" {
		port = c.grpcPort
	}
	return otlpEnv(proto, port)
}

// otlpEnv is the host's environment to export over proto to a loopback port, with the
// batch processor's delay short so that spans arrive within a test's patience.
func otlpEnv(proto string, port int) []string {
	return []string{
		fmt.Sprintf("OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:%d", port),
		"OTEL_EXPORTER_OTLP_PROTOCOL=" + proto,
		"OTEL_BSP_SCHEDULE_DELAY=100",
	}
}

// span is one received span, flattened for the tests' look-ups.
type span struct {
	Name              string
	Kind              ptrace.SpanKind
	Scope             string
	Trace, ID, Parent string // hex; Parent "" for a root
	Attrs             map[string]any
	Links             []link
	Events            []event
	Status            ptrace.StatusCode
	Start             time.Time
}

type link struct {
	Trace, ID string
	Attrs     map[string]any
}

type event struct {
	Name  string
	Attrs map[string]any
}

func (s span) String() string {
	return fmt.Sprintf("%s [%s] %s/%s parent %q %v links %v", s.Name, s.Kind, s.Trace, s.ID, s.Parent, s.Attrs, s.Links)
}

// attr returns the attribute k as a string (ints in decimal), "" when absent.
func (s span) attr(k string) string {
	v, ok := s.Attrs[k]
	if !ok {
		return ""
	}
	return fmt.Sprint(v)
}

// linksTo reports whether s links to the span id of trace with the wasmjobs.link kind.
func (s span) linksTo(trace, id, kind string) bool {
	return slices.ContainsFunc(s.Links, func(l link) bool {
		return l.Trace == trace && l.ID == id && fmt.Sprint(l.Attrs["wasmjobs.link"]) == kind
	})
}

// spans returns every span received so far, in start order.
func (c *collector) spans() []span {
	var out []span
	for _, td := range c.sink.AllTraces() {
		for _, rs := range td.ResourceSpans().All() {
			for _, ss := range rs.ScopeSpans().All() {
				for _, s := range ss.Spans().All() {
					sp := span{Name: s.Name(), Kind: s.Kind(), Scope: ss.Scope().Name(), Trace: s.TraceID().String(),
						ID: s.SpanID().String(), Attrs: s.Attributes().AsRaw(), Status: s.Status().Code(), Start: s.StartTimestamp().AsTime()}
					if !s.ParentSpanID().IsEmpty() {
						sp.Parent = s.ParentSpanID().String()
					}
					for _, l := range s.Links().All() {
						sp.Links = append(sp.Links, link{l.TraceID().String(), l.SpanID().String(), l.Attributes().AsRaw()})
					}
					for _, e := range s.Events().All() {
						sp.Events = append(sp.Events, event{e.Name(), e.Attributes().AsRaw()})
					}
					out = append(out, sp)
				}
			}
		}
	}
	slices.SortStableFunc(out, func(a, b span) int { return a.Start.Compare(b.Start) })
	return out
}

// waitSpans polls the sink until cond holds of its spans, for up to 30 s, and returns
// them. Past that the test fails, with the spans it saw, and goes on with them, so
// that its checks say what is missing.
func (c *collector) waitSpans(t *testing.T, what string, cond func([]span) bool) []span {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := c.spans()
		if cond(got) {
			return got
		}
		if time.Now().After(deadline) {
			t.Errorf("timed out waiting for %s; the collector has %d spans:\n%s", what, len(got), dump(got))
			return got
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func dump(spans []span) string {
	var b strings.Builder
	for _, s := range spans {
		fmt.Fprintf(&b, "  %v\n", s)
	}
	return b.String()
}

// named returns the spans called name, in start order.
func named(spans []span, name string) []span {
	var out []span
	for _, s := range spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// withAttr returns the spans whose attribute k is v.
func withAttr(spans []span, k, v string) []span {
	var out []span
	for _, s := range spans {
		if s.attr(k) == v {
			out = append(out, s)
		}
	}
	return out
}

// count returns how many spans are called name.
func count(name string) func([]span) int {
	return func(spans []span) int { return len(named(spans, name)) }
}

// under reports whether s descends from the span id anc (the same trace, through
// parents among spans).
func under(spans []span, s span, anc string) bool {
	byID := make(map[string]span, len(spans))
	for _, x := range spans {
		byID[x.ID] = x
	}
	for seen := 0; s.Parent != "" && seen < len(spans); seen++ {
		if s.Parent == anc {
			return true
		}
		p, ok := byID[s.Parent]
		if !ok || p.Trace != s.Trace {
			return false
		}
		s = p
	}
	return false
}

// callerSpan is a span of the test's own, a client's, as a W3C traceparent.
type callerSpan struct{ Trace, ID string }

func newCaller(t *testing.T) callerSpan {
	t.Helper()
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return callerSpan{hex.EncodeToString(b[:16]), hex.EncodeToString(b[16:])}
}

func (c callerSpan) traceparent() string { return "00-" + c.Trace + "-" + c.ID + "-01" }

// host is a `wasmjobs run` process.
type host struct {
	t    *testing.T
	cmd  *exec.Cmd
	url  string
	mu   sync.Mutex
	logs bytes.Buffer
	done chan error
}

var servingLine = regexp.MustCompile(`msg="wasmjobs serving" api=(https?://\S+)`)

// hostConfig is how a test starts a host.
type hostConfig struct {
	modules string   // the modules directory
	data    string   // the pebble backend's data directory; "" for a temporary one
	env     []string // the OTEL_* environment, nil for tracing off
	flags   []string // more flags of run (--backend, --drain-timeout)
}

// startHost starts `wasmjobs run` and waits until it serves; t's cleanup kills it. On
// the default backend it sets cfg.data to a temporary directory when empty, so that a
// second start with cfg finds the first one's data.
func startHost(t *testing.T, cfg *hostConfig) *host {
	t.Helper()
	// Port 0: the host binds a free port itself and logs its URL, which is read below,
	// so no other process can take the port between a pick and the bind.
	args := []string{"run", "--modules", cfg.modules, "--listen", "127.0.0.1:0", "--log-level", "debug"}
	if !slices.Contains(cfg.flags, "--backend") {
		if cfg.data == "" {
			cfg.data = t.TempDir()
		}
		args = append(args, "--data-dir", cfg.data)
	}
	h := &host{t: t, cmd: exec.Command(rig.binary, append(args, cfg.flags...)...), done: make(chan error, 1)}
	// The environment is the test's, without any OTEL_* of the machine's: a developer's
	// own collector settings would change what the host exports. The race detector
	// sleeps a second at exit unless told not to.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OTEL_") && !strings.HasPrefix(kv, "TRACEPARENT=") {
			h.cmd.Env = append(h.cmd.Env, kv)
		}
	}
	h.cmd.Env = append(h.cmd.Env, "WASMJOBS_CACHE_DIR="+t.TempDir(), "GORACE=atexit_sleep_ms=0")
	h.cmd.Env = append(h.cmd.Env, cfg.env...)
	stderr, err := h.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := h.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			h.mu.Lock()
			h.logs.WriteString(sc.Text() + "\n")
			h.mu.Unlock()
			if m := servingLine.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case urls <- m[1]:
				default:
				}
			}
		}
		h.done <- h.cmd.Wait()
	}()
	t.Cleanup(func() {
		h.cmd.Process.Kill()
		<-h.done
		if t.Failed() {
			t.Logf("host log:\n%s", h.log())
		}
	})
	select {
	case h.url = <-urls:
	case err := <-h.done:
		h.done <- err
		t.Fatalf("wasmjobs run exited: %v\n%s", err, h.log())
	case <-time.After(60 * time.Second):
		t.Fatalf("wasmjobs run did not start:\n%s", h.log())
	}
	return h
}

func (h *host) log() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.logs.String()
}

// send sends a request with the header's name and value pairs and returns the status
// and the answer.
func (h *host) send(method, path, body string, header ...string) (int, string) {
	h.t.Helper()
	req, err := http.NewRequest(method, h.url+path, strings.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// enqueue posts job (a JSON object) to /v1/jobs with the header pairs and returns
// the job's id.
func (h *host) enqueue(job string, header ...string) string {
	h.t.Helper()
	status, body := h.send("POST", "/v1/jobs", job, header...)
	var out struct{ ID string }
	if err := json.Unmarshal([]byte(body), &out); status != http.StatusAccepted || err != nil || out.ID == "" {
		h.t.Fatalf("POST /v1/jobs %s: %d %s", job, status, body)
	}
	return out.ID
}

// get decodes GET path's JSON answer into out.
func (h *host) get(path string, out any) {
	h.t.Helper()
	status, body := h.send("GET", path, "")
	if err := json.Unmarshal([]byte(body), out); status != http.StatusOK || err != nil {
		h.t.Fatalf("GET %s: %d %v: %s", path, status, err, body)
	}
}

// waitState polls the job's state until it is want, for up to 30 s.
func (h *host) waitState(id, want string) {
	h.t.Helper()
	var st struct{ State string }
	waitFor(h.t, "job "+id+" "+want, func() bool { h.get("/v1/jobs/"+id, &st); return st.State == want })
}

// metric returns the value of the /metrics sample line that starts with series
// (name and labels), -1 when there is none.
func (h *host) metric(series string) float64 {
	h.t.Helper()
	_, page := h.send("GET", "/metrics", "")
	for line := range strings.Lines(page) {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil {
				h.t.Fatalf("metric %s: %v", series, err)
			}
			return v
		}
	}
	return -1
}

// signal sends sig to the host and waits up to within for its exit; it returns the
// how long the exit took and its error.
func (h *host) signal(sig syscall.Signal, within time.Duration) (time.Duration, error) {
	h.t.Helper()
	start := time.Now()
	h.cmd.Process.Signal(sig)
	select {
	case err := <-h.done:
		h.done <- err // for the cleanup
		return time.Since(start), err
	case <-time.After(within):
		h.t.Fatalf("the host did not exit within %v of %v:\n%s", within, sig, h.log())
		return 0, nil
	}
}

// waitFor polls cond for up to 30 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// modulesDir is a host's modules directory.
type modulesDir string

// add writes wasm as name.wasm, with a custom section making its bytes (so its
// version) unique to tag, and manifest as name.toml unless it is empty; each file
// appears whole (written aside, then renamed), as a deploy would make it.
func (d modulesDir) add(t *testing.T, name string, wasm []byte, tag, manifest string) {
	t.Helper()
	if manifest != "" {
		d.write(t, name+".toml", []byte(manifest))
	}
	sec := append([]byte{4}, "test"...)
	sec = append(sec, tag...)
	d.write(t, name+".wasm", append(append(slices.Clip(wasm), 0, byte(len(sec))), sec...))
}

func (d modulesDir) write(t *testing.T, name string, b []byte) {
	t.Helper()
	tmp := filepath.Join(string(d), ".tmp-"+name)
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(string(d), name)); err != nil {
		t.Fatal(err)
	}
}

// module is one that a test's host serves: name.wasm, with its manifest.
type module struct {
	name     string
	wasm     []byte
	manifest string
}

// tracedHost starts a collector and a host exporting to it over proto, serving mods
// (each tagged "1") from a new modules directory, with more flags of run; it returns
// the host's config, for a second start or a change of its modules.
func tracedHost(t *testing.T, proto string, mods []module, flags ...string) (*collector, *host, hostConfig) {
	t.Helper()
	c := startCollector(t)
	dir := modulesDir(t.TempDir())
	for _, m := range mods {
		dir.add(t, m.name, m.wasm, "1", m.manifest)
	}
	cfg := hostConfig{modules: string(dir), env: c.env(proto), flags: flags}
	return c, startHost(t, &cfg), cfg
}

// grant is a manifest granting outbound GETs to srv.
func grant(srv *stepServer) string {
	return fmt.Sprintf("[http]\nallow = [%q]\n", "http://"+srv.Listener.Addr().String())
}

// stepServer is the loopback server the steps guest asks what to do: its answer for
// the nth call (from 1) comes from answer, and it keeps each call's traceparent.
type stepServer struct {
	*httptest.Server
	mu     sync.Mutex
	calls  []call
	answer func(n int, r *http.Request) string
}

// call is one request the server received.
type call struct {
	Path, Traceparent string
}

func newStepServer(t *testing.T, answer func(n int, r *http.Request) string) *stepServer {
	t.Helper()
	s := &stepServer{answer: answer}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.calls = append(s.calls, call{r.URL.Path, r.Header.Get("Traceparent")})
		n := len(s.calls)
		s.mu.Unlock()
		io.WriteString(w, s.answer(n, r))
	}))
	t.Cleanup(s.Close)
	return s
}

// script answers the calls in turn, then "ack" to every later one.
func script(answers ...string) func(int, *http.Request) string {
	return func(n int, _ *http.Request) string {
		if n <= len(answers) {
			return answers[n-1]
		}
		return "ack"
	}
}

func (s *stepServer) received() []call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

// jobJSON is the body of POST /v1/jobs for queue with payload.
func jobJSON(queue, payload string, more ...string) string {
	b, _ := json.Marshal(map[string]string{"queue": queue, "payload": payload})
	if len(more) == 0 {
		return string(b)
	}
	return strings.TrimSuffix(string(b), "}") + "," + strings.Join(more, ",") + "}"
}
