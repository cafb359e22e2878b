package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/wasmjobs/wasmjobs/server"
	"github.com/wasmjobs/wasmjobs/wasmjobstest"
)

// tracedHost is a started host whose spans are kept in memory, serving the testdata
// module file as queue "work".
func tracedHost(t *testing.T, file, manifest string) (*wasmjobstest.Host, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	h := wasmjobstest.NewHost(t, wasmjobstest.HostConfig{Server: server.Config{TracerProvider: tp, TraceURL: "https://ui.example/trace/{trace_id}"}, NoStart: true})
	wasm, err := os.ReadFile("../testdata/abi/" + file)
	if err != nil {
		t.Fatal(err)
	}
	h.AddModule("work", wasm, manifest)
	h.Start()
	return h, exp
}

// post sends a JSON request with a traceparent (none when empty) and returns the status
// and the body.
func post(t *testing.T, url, traceparent, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if traceparent != "" {
		req.Header.Set("Traceparent", traceparent)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// spansNamed waits for n spans named name and returns them, oldest first.
func spansNamed(t *testing.T, exp *tracetest.InMemoryExporter, name string, n int) []tracetest.SpanStub {
	t.Helper()
	var got []tracetest.SpanStub
	waitFor(t, fmt.Sprintf("%d spans %q", n, name), func() bool {
		got = got[:0]
		for _, s := range exp.GetSpans() {
			if s.Name == name {
				got = append(got, s)
			}
		}
		return len(got) >= n
	})
	return got
}

const (
	callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	callerSpan  = "00f067aa0ba902b7"
	replayTrace = "0af7651916cd43dd8448eb211c80319c"
	replaySpan  = "b7ad6b7169203331"
)

func TestEnqueueJoinsTheCallersTrace(t *testing.T) {
	t.Parallel()
	h, exp := tracedHost(t, "ack.wasm", "")
	status, body := post(t, h.URL()+"/v1/jobs", "00-"+callerTrace+"-"+callerSpan+"-01", `{"queue": "work", "payload": "x"}`)
	if status != http.StatusAccepted && status != http.StatusOK && status != http.StatusCreated {
		t.Fatalf("POST /v1/jobs: %d %s", status, body)
	}
	var res struct{ ID string }
	json.Unmarshal([]byte(body), &res)
	h.WaitState(res.ID, "succeeded")
	send := spansNamed(t, exp, "send work", 1)[0]
	if send.SpanContext.TraceID().String() != callerTrace || send.Parent.SpanID().String() != callerSpan {
		t.Errorf("send span in trace %s under %s, want the caller's %s under %s", send.SpanContext.TraceID(), send.Parent.SpanID(), callerTrace, callerSpan)
	}
	proc := spansNamed(t, exp, "process work", 1)[0]
	if proc.SpanContext.TraceID().String() == callerTrace || len(proc.Links) != 1 || proc.Links[0].SpanContext.SpanID() != send.SpanContext.SpanID() {
		t.Errorf("process span: trace %s, links %+v; want a trace of its own linking to the send span %s", proc.SpanContext.TraceID(), proc.Links, send.SpanContext.SpanID())
	}
	// The job's record keeps each attempt's trace id, for the dashboard.
	resp, err := http.Get(h.URL() + "/v1/jobs/" + res.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var job struct {
		Attempts []struct {
			TraceID string `json:"trace_id"`
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&job); err != nil {
		t.Fatal(err)
	}
	if len(job.Attempts) != 1 || job.Attempts[0].TraceID != proc.SpanContext.TraceID().String() {
		t.Errorf("the job's attempts %+v, want one with trace id %s", job.Attempts, proc.SpanContext.TraceID())
	}
	// The dashboard's job page shows it, linked to the trace UI of Config.TraceURL.
	page, err := http.Get(h.URL() + "/ui/jobs/" + res.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer page.Body.Close()
	html, _ := io.ReadAll(page.Body)
	tid := proc.SpanContext.TraceID().String()
	if want := `<a href="https://ui.example/trace/` + tid + `" rel="noreferrer"><code>` + tid + `</code></a>`; !strings.Contains(string(html), want) {
		t.Errorf("the job page lacks %s", want)
	}
}

// A replayed dead letter's next run links to its original enqueue and to the request
// that replayed it; replayed again by a request without a trace, its run links to the
// enqueue alone, not to the first replayer.
func TestReplayLinksToTheReplayingRequest(t *testing.T) {
	t.Parallel()
	h, exp := tracedHost(t, "dead_letter.wasm", "max_attempts = 1\nenqueue = [\"child\"]\n")
	status, body := post(t, h.URL()+"/v1/jobs", "00-"+callerTrace+"-"+callerSpan+"-01", `{"queue": "work", "payload": "x"}`)
	var res struct{ ID string }
	if json.Unmarshal([]byte(body), &res); res.ID == "" {
		t.Fatalf("POST /v1/jobs: %d %s", status, body)
	}
	h.WaitState(res.ID, "dead")
	send := spansNamed(t, exp, "send work", 1)[0]
	if status, body := post(t, h.URL()+"/v1/dead-letters/"+res.ID+"/replay", "00-"+replayTrace+"-"+replaySpan+"-01", ""); status >= 300 {
		t.Fatalf("replay: %d %s", status, body)
	}
	procs := spansNamed(t, exp, "process work", 2)
	// The first run's span ends after its settle, which the replay may overtake.
	slices.SortFunc(procs, func(a, b tracetest.SpanStub) int { return a.StartTime.Compare(b.StartTime) })
	links := map[string]string{}
	for _, l := range procs[1].Links {
		links[l.SpanContext.SpanID().String()] = l.SpanContext.TraceID().String()
	}
	if links[send.SpanContext.SpanID().String()] != callerTrace || links[replaySpan] != replayTrace || len(links) != 2 {
		t.Errorf("the replayed run links to %v; want the enqueue's send span %s and the replaying request's %s", links, send.SpanContext.SpanID(), replaySpan)
	}
	h.WaitState(res.ID, "dead")
	if status, body := post(t, h.URL()+"/v1/dead-letters/"+res.ID+"/replay", "", ""); status >= 300 {
		t.Fatalf("second replay: %d %s", status, body)
	}
	procs = spansNamed(t, exp, "process work", 3)
	slices.SortFunc(procs, func(a, b tracetest.SpanStub) int { return a.StartTime.Compare(b.StartTime) })
	if l := procs[2].Links; len(l) != 1 || l[0].SpanContext.SpanID() != send.SpanContext.SpanID() {
		t.Errorf("the run replayed without a trace links to %+v; want the enqueue's send span %s alone", l, send.SpanContext.SpanID())
	}
	// A dead job retried from its page (POST /v1/jobs/{id}/retry) is replayed too.
	h.WaitState(res.ID, "dead")
	if status, body := post(t, h.URL()+"/v1/jobs/"+res.ID+"/retry", "00-"+replayTrace+"-"+callerSpan+"-01", ""); status >= 300 {
		t.Fatalf("retry: %d %s", status, body)
	}
	procs = spansNamed(t, exp, "process work", 4)
	slices.SortFunc(procs, func(a, b tracetest.SpanStub) int { return a.StartTime.Compare(b.StartTime) })
	links = map[string]string{}
	for _, l := range procs[3].Links {
		links[l.SpanContext.SpanID().String()] = l.SpanContext.TraceID().String()
	}
	if links[callerSpan] != replayTrace || len(links) != 2 {
		t.Errorf("the run retried from the job's page links to %v; want the enqueue's send span and the retrying request's %s", links, callerSpan)
	}
}

// A client cannot set the reserved headers the trace context travels in.
func TestClientCannotForgeTheTraceHeaders(t *testing.T) {
	t.Parallel()
	h, _ := tracedHost(t, "ack.wasm", "")
	for _, k := range []string{"wasmjobs-traceparent", "wasmjobs-tracestate", "wasmjobs-replay-traceparent"} {
		status, body := post(t, h.URL()+"/v1/jobs", "", fmt.Sprintf(`{"queue": "work", "payload": "x", "headers": {%q: "00-%s-%s-01"}}`, k, callerTrace, callerSpan))
		if status != http.StatusBadRequest || !strings.Contains(body, "reserved") {
			t.Errorf("header %s: %d %s; want 400 naming the reserved prefix", k, status, body)
		}
	}
}
