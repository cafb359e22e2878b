package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/wasmjobs/wasmjobs/abi"
	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/host"
	"github.com/wasmjobs/wasmjobs/worker"
)

type invokeFlags struct {
	payload     string
	payloadFile string
	headers     []string
	attempt     int
	maxAttempts int
	timeout     time.Duration
	json        bool
	httpCA      string
}

func newInvokeCommand(g *globals) *cobra.Command {
	f := &invokeFlags{}
	cmd := &cobra.Command{
		Use:   "invoke MODULE [-]",
		Short: "Run one job on a module, without a queue, and show what happened",
		Long: `invoke runs one job on MODULE (a .wasm file) in a fresh host, with the module's
manifest (NAME.toml beside it), and prints the outcome: the code wasmjobs_handle
returned, what the worker would do with it given the attempt (the host's defer for an
outage or a rate limit included), the reason, the staged
delay, the output, the logs, the child jobs that would be published and the outbound
HTTP calls it made.

A module with an [http] grant makes real requests under it, checked as under 'run':
this is the development loop for a handler that calls a local server. --http-ca
trusts a test server's certificate or an internal CA besides the system's roots.

The payload comes from --payload, --payload-file, or standard input with '-'. The job
gets a fresh id and the module's queue.

The exit status is 0 whenever the module ran, whatever the job's result; 2 when the
command is misused or the module cannot be loaded.`,
		Example: `  wasmjobs invoke modules/echo.wasm --payload 'hello'
  echo '{"n": 3}' | wasmjobs invoke modules/count.wasm - --json
  wasmjobs invoke modules/webhook.wasm --payload-file event.json --header Trace-Id=abc --attempt 3`,
		Args: argsBetween(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			payload, err := f.readPayload(cmd.InOrStdin(), args)
			if err != nil {
				return err
			}
			headers, err := parseHeaders(f.headers)
			if err != nil {
				return err
			}
			if f.attempt < 1 || f.maxAttempts < 0 {
				return usagef("--attempt must be 1 or more and --max-attempts 0 or more")
			}
			roots, err := httpRootsFrom(f.httpCA)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			e, err := host.NewEngine(ctx, host.Config{CacheDir: g.cacheDir, HTTP: host.HTTPOptions{RootCAs: roots}})
			if err != nil {
				return err
			}
			defer e.Close(ctx)
			m, err := loadModuleFile(ctx, e, args[0], f.timeout)
			if err != nil {
				return err
			}
			defer m.Retire()

			man := m.Manifest()
			env := backend.NewEnvelope(m.Queue(), payload)
			env.Headers = headers
			job := &worker.Job{Envelope: env, Attempt: f.attempt, MaxAttempts: f.maxAttempts}
			if job.MaxAttempts == 0 {
				job.MaxAttempts = man.MaxAttempts
			}
			if job.MaxAttempts == 0 {
				job.MaxAttempts = abi.DefaultMaxAttempts
			}
			x := m.Run(ctx, job, nil)
			res := m.Settle(&x, job, time.Now()) // the host's own step, an outage's defer say, as a Handler takes it
			settle, reason := worker.Decide(job, res, man.MaxDefers)
			report := newInvokeReport(x, res, settle, reason)
			if f.json {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetEscapeHTML(false)
				return enc.Encode(report)
			}
			report.print(cmd.OutOrStdout(), job)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.payload, "payload", "", "the job's payload, as text")
	fl.StringVar(&f.payloadFile, "payload-file", "", "read the job's payload from a file")
	fl.StringArrayVar(&f.headers, "header", nil, "a job header as key=value (repeatable)")
	fl.IntVar(&f.attempt, "attempt", 1, "the attempt number the job runs as")
	fl.IntVar(&f.maxAttempts, "max-attempts", 0, "attempts allowed (default: the manifest's, else 25)")
	fl.DurationVar(&f.timeout, "timeout", 0, "wall-clock limit of the job (default: the manifest's, else 30s)")
	fl.BoolVar(&f.json, "json", false, "print one JSON object instead of text")
	fl.StringVar(&f.httpCA, "http-ca", "", "PEM file of CA certificates that the module's outbound HTTPS trusts besides the system's, as for run")
	return cmd
}

func (f *invokeFlags) readPayload(stdin io.Reader, args []string) ([]byte, error) {
	sources := 0
	for _, set := range []bool{f.payload != "", f.payloadFile != "", len(args) == 2} {
		if set {
			sources++
		}
	}
	if sources > 1 {
		return nil, usagef("give the payload one way: --payload, --payload-file or -")
	}
	switch {
	case len(args) == 2 && args[1] != "-":
		return nil, usagef("unexpected argument %q: the payload comes from --payload, --payload-file or -", args[1])
	case len(args) == 2:
		b, err := io.ReadAll(stdin)
		if err != nil {
			return nil, fmt.Errorf("reading the payload from standard input: %w", err)
		}
		return b, nil
	case f.payloadFile != "":
		b, err := os.ReadFile(f.payloadFile)
		if err != nil {
			return nil, usagef("--payload-file: %v", err)
		}
		return b, nil
	}
	return []byte(f.payload), nil
}

// parseHeaders turns key=value flags into headers.
func parseHeaders(kvs []string) (map[string]string, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	h := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usagef("--header %q: want key=value", kv)
		}
		h[k] = v
	}
	return h, nil
}

// invokeReport is invoke's JSON output.
type invokeReport struct {
	Result       string       `json:"result"`
	Code         *int32       `json:"code"`
	Settle       string       `json:"settle"`
	Reason       string       `json:"reason"`
	DelayMs      *int64       `json:"delay_ms"`
	Output       string       `json:"output"`
	OutputBase64 string       `json:"output_base64"`
	Logs         []reportLog  `json:"logs"`
	Enqueued     []reportJob  `json:"enqueued"`
	Calls        []reportCall `json:"calls"`
	DurationMs   float64      `json:"duration_ms"`
	Module       reportModule `json:"module"`

	outputLen int
}

type reportLog struct {
	Level string `json:"level"`
	Msg   string `json:"msg"`
}

type reportJob struct {
	Queue   string `json:"queue"`
	Payload string `json:"payload"`
	DelayMs int64  `json:"delay_ms"`
	// Await marks a child that a WAIT waits for.
	Await bool `json:"await,omitempty"`
}

// reportCall is one outbound HTTP request of the job: never a header, the query
// string or a body.
type reportCall struct {
	Method     string  `json:"method"`
	Target     string  `json:"target"`
	Path       string  `json:"path"`
	Status     int     `json:"status,omitempty"`
	Error      string  `json:"error,omitempty"`
	DurationMs float64 `json:"duration_ms"`
	Bytes      int64   `json:"bytes"`
}

type reportModule struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// newInvokeReport reports x, which the host made res and the worker would settle
// as settle with reason.
func newInvokeReport(x host.Execution, res worker.Result, settle worker.Outcome, reason string) invokeReport {
	r := invokeReport{
		Result:       x.Ending(),
		Code:         x.Code,
		Settle:       settle.String(),
		Reason:       reason,
		Output:       strings.ToValidUTF8(string(x.Output), "\uFFFD"),
		OutputBase64: base64.StdEncoding.EncodeToString(x.Output),
		Logs:         []reportLog{},
		Enqueued:     []reportJob{},
		Calls:        []reportCall{},
		DurationMs:   float64(x.Duration.Microseconds()) / 1000,
		Module:       reportModule{Name: x.Module, Version: x.Version},
		outputLen:    len(x.Output),
	}
	if res.Outage {
		ms := res.Delay.Milliseconds() // the host's defer, in place of the guest's staged delay
		r.DelayMs = &ms
	} else if x.Delay != nil {
		ms := x.Delay.Milliseconds()
		r.DelayMs = &ms
	}
	for _, l := range x.Logs {
		r.Logs = append(r.Logs, reportLog{Level: strings.ToLower(l.Level.String()), Msg: l.Msg})
	}
	for _, c := range x.Calls {
		r.Calls = append(r.Calls, reportCall{Method: c.Method, Target: c.Target, Path: c.Path, Status: c.Status, Error: c.Error,
			DurationMs: float64(c.Duration.Microseconds()) / 1000, Bytes: c.Bytes})
	}
	if settle == worker.Ack || settle == worker.Wait {
		for _, c := range x.Children {
			r.Enqueued = append(r.Enqueued, reportJob{Queue: c.Queue, Payload: strings.ToValidUTF8(string(c.Payload), "\uFFFD"),
				DelayMs: c.Delay.Milliseconds(), Await: c.Await})
		}
	}
	return r
}

// print writes the report for a person.
func (r invokeReport) print(w io.Writer, job *worker.Job) {
	code := "no code returned"
	if r.Code != nil {
		code = fmt.Sprintf("code %d", *r.Code)
	}
	fmt.Fprintf(w, "module    %s (version %.12s)\n", r.Module.Name, r.Module.Version)
	fmt.Fprintf(w, "job       %s on queue %s, attempt %d of %d\n", job.Envelope.ID, job.Envelope.Queue, job.Attempt, job.MaxAttempts)
	fmt.Fprintf(w, "result    %s (%s) in %.3f ms\n", r.Result, code, r.DurationMs)
	fmt.Fprintf(w, "settle    %s\n", r.Settle)
	if r.Reason != "" {
		fmt.Fprintf(w, "reason    %s\n", r.Reason)
	}
	if r.DelayMs != nil {
		fmt.Fprintf(w, "delay     %v\n", time.Duration(*r.DelayMs)*time.Millisecond)
	}
	if r.outputLen > 0 {
		fmt.Fprintf(w, "output    (%d bytes)\n", r.outputLen)
		for _, line := range strings.Split(strings.TrimRight(r.Output, "\n"), "\n") {
			fmt.Fprintf(w, "  %s\n", line)
		}
	}
	if len(r.Logs) > 0 {
		fmt.Fprintf(w, "logs      (%d lines)\n", len(r.Logs))
		for _, l := range r.Logs {
			fmt.Fprintf(w, "  %-5s %s\n", l.Level, l.Msg)
		}
	}
	if len(r.Calls) > 0 {
		fmt.Fprintf(w, "calls     (%d)\n", len(r.Calls))
		for _, c := range r.Calls {
			result := c.Error // a status, an error, or both (a body cut short)
			if c.Status != 0 {
				result = strings.TrimSpace(strconv.Itoa(c.Status) + " " + c.Error)
			}
			fmt.Fprintf(w, "  %s %s%s: %s in %.3f ms, %d bytes read\n", c.Method, c.Target, c.Path, result, c.DurationMs, c.Bytes)
		}
	}
	if len(r.Enqueued) > 0 {
		fmt.Fprintf(w, "enqueued  (%d jobs)\n", len(r.Enqueued))
		const shown = 20
		for i, c := range r.Enqueued {
			if i == shown {
				fmt.Fprintf(w, "  ... and %d more\n", len(r.Enqueued)-shown)
				break
			}
			delay := ""
			if c.DelayMs > 0 {
				delay = fmt.Sprintf(" after %v", time.Duration(c.DelayMs)*time.Millisecond)
			}
			awaited := ""
			if c.Await {
				awaited = " (awaited)"
			}
			fmt.Fprintf(w, "  %s%s%s: %s\n", c.Queue, delay, awaited, c.Payload)
		}
	}
	if r.Settle == worker.Wait.String() {
		fmt.Fprintln(w, "wait      the job would wait for its awaited children, then run again at round 1;")
		fmt.Fprintln(w, "          invoke runs one run and resumes nothing: serve it with `wasmjobs run` on a backend that keeps waiting jobs")
	}
}
