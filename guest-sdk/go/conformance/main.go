// Command conformance is the conformance handler in Go: its payload names a case of
// the cross-language table (internal/rigs/abitest/sdk.go, and sdk_http.go for the HTTP
// cases). Two cases are the Go SDK's own, for its deadlines: "http-context-deadline:URL"
// and "http-client-timeout:URL" GET URL within 300 ms (a request context's deadline,
// an http.Client's Timeout) and ack with the output "deadline" when the request ended
// with context.DeadlineExceeded, else "error ERR" or "STATUS". A third, "rounds", is
// the end-to-end fan-in's: each run writes "round N" and a line "id|state|reason|output"
// per child of its last wait; rounds 0 and 1 stage the awaited children "page-0" to
// "page-2" and "fail" on the queue "child" and wait, round 2 acks.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	wasmjobs "github.com/wasmjobs/wasmjobs/guest-sdk/go"
	"github.com/wasmjobs/wasmjobs/guest-sdk/go/wjhttp"
)

// httpCase runs an HTTP case of the table (internal/rigs/abitest/sdk_http.go).

// spins counts the case "spin"'s turns, so that its loop does something.
var spins int

func httpCase(job *wasmjobs.Job, kind, url string) error {
	ctx, client := context.Background(), http.DefaultClient
	switch kind {
	case "http-context-deadline":
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
	case "http-client-timeout":
		client = &http.Client{Timeout: 300 * time.Millisecond}
	}
	method, body := http.MethodGet, io.Reader(nil)
	if kind == "http-post" {
		method, body = http.MethodPost, strings.NewReader("ping")
	}
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return wasmjobs.DeadLetter(err.Error())
	}
	if kind == "http-get" || kind == "http-post" {
		req.Header.Set("X-Conformance", "yes")
	}
	if kind == "http-inject" {
		req.Header.Set("X-Inject", "a\nX-Evil: 1")
	}
	if body != nil {
		req.Header.Set("Content-Type", "text/plain")
	}
	resp, err := client.Do(req)
	var herr *wjhttp.Error
	switch {
	case err != nil && errors.Is(err, context.DeadlineExceeded) && (kind == "http-context-deadline" || kind == "http-client-timeout"):
		fmt.Fprint(job, "deadline")
		return nil
	case errors.Is(err, wasmjobs.ErrBadArgument):
		fmt.Fprint(job, "error -2")
		return nil
	case errors.As(err, &herr):
		fmt.Fprintf(job, "error %d", herr.Code)
		return nil
	case err != nil:
		fmt.Fprintf(job, "error %v", err)
		return nil
	}
	defer resp.Body.Close()
	switch {
	case kind == "http-retry-after" && (resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable):
		return wjhttp.RetryAfter(resp)
	case kind == "http-get" || kind == "http-post":
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		fmt.Fprintf(job, "%d\n%s\n%s", resp.StatusCode, strings.Join(resp.Header.Values("X-Reply"), ","), b)
		return nil
	}
	job.Write([]byte(strconv.Itoa(resp.StatusCode)))
	return nil
}

func handle(job *wasmjobs.Job) error {
	p := job.Text()
	switch {
	case p == "ack":
		return nil
	case p == "retry":
		return wasmjobs.Retry("asked to retry", 1500*time.Millisecond)
	case p == "defer":
		return wasmjobs.Defer(2000*time.Millisecond, "asked to defer")
	case p == "dead":
		return wasmjobs.DeadLetter("asked to die")
	case p == "meta":
		h, ok := job.Header("X-Test")
		if !ok {
			h = "-"
		}
		fmt.Fprintf(job, "%s\n%s\n%s\n%d\n%d\n%s\n", job.ID(), job.Queue(), job.Module(), job.Attempt(), job.MaxAttempts(), h)
		return nil
	case p == "trace":
		fmt.Fprintf(job, "%s\n%s\n", job.TraceID(), job.SpanID())
		return nil
	case p == "spin": // until the host stops it
		for spins = 0; ; spins++ {
		}
	case p == "sleep": // an hour in a WASI sleep, until the host stops it
		time.Sleep(time.Hour)
		return nil
	case p == "children":
		return errors.Join(job.Enqueue("child", []byte("c1"), 0), job.Enqueue("child", []byte("c2"), 250*time.Millisecond))
	case p == "fanout":
		fmt.Fprintf(job, "%d %d\n", wasmjobs.Round(), len(wasmjobs.Children()))
		if err := errors.Join(wasmjobs.EnqueueAwaited("child", []byte("c1"), 0), job.Enqueue("child", []byte("c2"), 250*time.Millisecond),
			wasmjobs.EnqueueAwaited("child", []byte("c3"), 0)); err != nil {
			return err
		}
		return wasmjobs.WaitForChildren()
	case p == "fanin":
		children := wasmjobs.Children()
		fmt.Fprintf(job, "%d %d\n", wasmjobs.Round(), len(children))
		for _, c := range children {
			fmt.Fprintf(job, "%s|%s|%s|%s|%s|%t\n", c.ID, c.Queue, c.State, c.Reason, c.Output, c.Truncated)
		}
		return nil
	case p == "rounds":
		fmt.Fprintf(job, "round %d\n", wasmjobs.Round())
		for _, c := range wasmjobs.Children() {
			fmt.Fprintf(job, "%s|%s|%s|%s\n", c.ID, c.State, c.Reason, c.Output)
		}
		if wasmjobs.Round() >= 2 {
			return nil
		}
		for _, page := range []string{"page-0", "page-1", "page-2", "fail"} {
			if err := wasmjobs.EnqueueAwaited("child", []byte(page), 0); err != nil {
				return err
			}
		}
		return wasmjobs.WaitForChildren()
	case p == "log":
		job.Log(wasmjobs.Info, "conformance log line")
		job.Warnf("second line, attempt %d", job.Attempt())
		return nil
	case p == "trap":
		wasmjobs.Trap()
	case strings.HasPrefix(p, "http-"):
		kind, url, _ := strings.Cut(p, ":")
		return httpCase(job, kind, url)
	case strings.HasPrefix(p, "echo:"):
		job.Write(job.Payload()[5:])
		return nil
	}
	return wasmjobs.DeadLetter("unknown case")
}

func init() { wasmjobs.Handle(handle) }

func main() {}
