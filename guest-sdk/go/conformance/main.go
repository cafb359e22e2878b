// Command conformance is the conformance handler in Go: its payload names a case of
// the cross-language table (internal/abitest/sdk.go).
package main

import (
	"errors"
	"fmt"
	"strings"
	"time"

	wasmjobs "github.com/wasmjobs/wasmjobs/guest-sdk/go"
)

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
	case p == "children":
		return errors.Join(job.Enqueue("child", []byte("c1"), 0), job.Enqueue("child", []byte("c2"), 250*time.Millisecond))
	case p == "log":
		job.Log(wasmjobs.Info, "conformance log line")
		job.Warnf("second line, attempt %d", job.Attempt())
		return nil
	case p == "trap":
		wasmjobs.Trap()
	case strings.HasPrefix(p, "echo:"):
		job.Write(job.Payload()[5:])
		return nil
	}
	return wasmjobs.DeadLetter("unknown case")
}

func init() { wasmjobs.Handle(handle) }

func main() {}
