package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/wasmjobs/wasmjobs/backend/rabbitmq"
	"github.com/wasmjobs/wasmjobs/internal/app/api"
	"github.com/wasmjobs/wasmjobs/internal/jobspec"
)

type enqueueFlags struct {
	apiFlags
	file        string
	delay       time.Duration
	priority    int
	headers     []string
	maxAttempts int
	count       int
	lines       bool
	quiet       bool
	backend     string
	uniqueKey   string
	uniqueFor   time.Duration
	key         string
	queueType   string
}

func newEnqueueCommand() *cobra.Command {
	f := &enqueueFlags{}
	cmd := &cobra.Command{
		Use:   "enqueue QUEUE [PAYLOAD | --file F | -]",
		Short: "Enqueue jobs through a running host's API",
		Long: `enqueue publishes jobs to QUEUE through the API of a running 'wasmjobs run' (--server)
and prints each job's id.

The payload is PAYLOAD, the content of --file, or standard input with '-'. With --lines
every line of it is a job of its own; with --count N the job is enqueued N times. Large
batches go in requests of 500 jobs, with a progress bar when standard error is a
terminal.

With --backend amqp://... the jobs go straight to the broker, checked as the API would
check them (queue name, reserved wasmjobs- headers, priority, delay, max attempts, and
the default payload limit: only a host knows a module's manifest).

With --unique-key K the job is unique in its queue: while a job of the same key waits,
runs or retries, or finished less than --unique-for ago, the enqueue queues nothing and
prints the id of the job that holds the key, with a note on standard error (the API
answers 200 with "duplicate": true). Exact on the memory, pebble and PostgreSQL backends; a host on
RabbitMQ refuses unique jobs (501), and so does --backend amqp://.

With --key K the jobs share the concurrency key K: a queue whose module sets
key_concurrency = N runs at most N jobs of one key at once, in the order they were
enqueued (a job that retries holds its key until it ends). Unlike --unique-key no job
is dropped.

A host on the memory backend that is draining (after SIGINT or SIGTERM) refuses new
jobs with 503; a durable one (the default, or RabbitMQ) keeps them for the next start.`,
		Example: `  wasmjobs enqueue greet '{"name":"Ada","lang":"fr"}'
  wasmjobs enqueue greet --file job.json --delay 10m --header Trace-Id=abc
  seq 1 10000 | sed 's/.*/{"name":"user &"}/' | wasmjobs enqueue greet - --lines -q
  wasmjobs enqueue report '{"user":7}' --unique-key report-user-7 --unique-for 1h
  wasmjobs enqueue sync '{"account":42}' --key account-42`,
		Args: argsBetween(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.run(cmd, args)
		},
	}
	f.add(cmd)
	fl := cmd.Flags()
	fl.StringVar(&f.file, "file", "", "read the payload from a file")
	fl.DurationVar(&f.delay, "delay", 0, "run the jobs after this delay, such as 90s or 1h30m")
	fl.IntVar(&f.priority, "priority", 0, fmt.Sprintf("0 to %d, higher first", jobspec.PriorityLevels-1))
	fl.StringArrayVar(&f.headers, "header", nil, "a job header as key=value (repeatable)")
	fl.IntVar(&f.maxAttempts, "max-attempts", 0, "attempts allowed (default: the queue's)")
	fl.IntVar(&f.count, "count", 1, "enqueue the job this many times")
	fl.BoolVar(&f.lines, "lines", false, "one job per line of the payload")
	fl.BoolVarP(&f.quiet, "quiet", "q", false, "do not print the jobs' ids")
	fl.StringVar(&f.uniqueKey, "unique-key", "", "make the job unique in its queue under this key: a duplicate queues nothing and prints the id of the job holding the key")
	fl.DurationVar(&f.uniqueFor, "unique-for", 0, "keep the unique key held this long after its job finished, such as 10m (needs --unique-key)")
	fl.StringVar(&f.key, "key", "", "the jobs' concurrency key: a queue with key_concurrency runs that many jobs of one key at once, in enqueue order")
	fl.StringVar(&f.backend, "backend", "", "publish straight to a broker (amqp://..., or a cluster's comma-separated node URLs) instead of through the API; jobs are checked as the API checks them, against the default payload limit")
	fl.StringVar(&f.queueType, "queue-type", string(rabbitmq.Classic), "with --backend: the hosts' --queue-type, whose delay queues hold a --delay")
	return cmd
}

func (f *enqueueFlags) payload(cmd *cobra.Command, args []string) ([]byte, error) {
	n := 0
	for _, set := range []bool{len(args) == 2, f.file != ""} {
		if set {
			n++
		}
	}
	switch {
	case n > 1:
		return nil, usagef("give the payload one way: PAYLOAD, --file or -")
	case f.file != "":
		b, err := os.ReadFile(f.file)
		if err != nil {
			return nil, usagef("--file: %v", err)
		}
		return b, nil
	case len(args) == 2 && args[1] == "-":
		return io.ReadAll(cmd.InOrStdin())
	case len(args) == 2:
		return []byte(args[1]), nil
	}
	return nil, nil
}

func (f *enqueueFlags) run(cmd *cobra.Command, args []string) error {
	if f.backend != "" && !isAMQP(f.backend) {
		return usagef("--backend %q: want an amqp:// URL (or enqueue through --server)", f.backend)
	}
	if err := checkBackendFlags(cmd, f.backend, f.queueType); err != nil {
		return err
	}
	if f.count < 1 {
		return usagef("--count %d: want 1 or more", f.count)
	}
	if f.delay < 0 {
		return usagef("--delay %v: want a positive delay", f.delay)
	}
	if f.uniqueFor != 0 && f.uniqueKey == "" {
		return usagef("--unique-for %v without --unique-key: give the key the hold is for", f.uniqueFor)
	}
	if f.uniqueKey != "" && f.backend != "" {
		return usagef("--unique-key with --backend %s: RabbitMQ cannot keep unique keys (hosts share no lock and cannot look a job up by key); enqueue through a host on the pebble, memory or PostgreSQL backend (--server)", f.backend)
	}
	headers, err := parseHeaders(f.headers)
	if err != nil {
		return err
	}
	payload, err := f.payload(cmd, args)
	if err != nil {
		return err
	}
	payloads := [][]byte{payload}
	if f.lines {
		payloads = nil
		sc := bufio.NewScanner(bytes.NewReader(payload))
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			if line := sc.Bytes(); len(bytes.TrimSpace(line)) > 0 {
				payloads = append(payloads, bytes.Clone(line))
			}
		}
		if err := sc.Err(); err != nil {
			return fmt.Errorf("reading lines: %w", err)
		}
		if len(payloads) == 0 {
			return usagef("--lines: the input has no lines")
		}
	}
	if f.backend != "" {
		return f.direct(cmd, args[0], headers, payloads)
	}
	c, err := f.client(cmd)
	if err != nil {
		return err
	}
	total := len(payloads) * f.count
	var delay string
	if f.delay > 0 {
		delay = f.delay.String()
	}
	job := func(p []byte) api.EnqueueRequest {
		s := string(p)
		req := api.EnqueueRequest{Queue: args[0], Headers: headers, Delay: delay, Priority: f.priority, MaxAttempts: f.maxAttempts, UniqueKey: f.uniqueKey, Key: f.key}
		if f.uniqueFor != 0 {
			req.UniqueFor = f.uniqueFor.String()
		}
		if strings.ToValidUTF8(s, "") == s {
			req.Payload = &s
		} else {
			b64 := encodeBase64(p)
			req.PayloadBase64 = &b64
		}
		return req
	}
	out := bufio.NewWriter(cmd.OutOrStdout())
	defer out.Flush()
	bar := newProgress(cmd.ErrOrStderr(), total)
	batch := make([]api.EnqueueRequest, 0, 500)
	sent := 0
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		var ids struct {
			IDs        []string `json:"ids"`
			ID         string   `json:"id"`
			Duplicates []bool   `json:"duplicates"`
			Duplicate  bool     `json:"duplicate"`
		}
		var err error
		if total == 1 {
			err = c.do(cmd.Context(), "POST", "/v1/jobs", nil, batch[0], &ids)
			ids.IDs, ids.Duplicates = []string{ids.ID}, []bool{ids.Duplicate}
		} else {
			err = c.do(cmd.Context(), "POST", "/v1/jobs/batch", nil, api.BatchRequest{Jobs: batch}, &ids)
		}
		if err != nil {
			return fmt.Errorf("after %d of %d jobs: %w", sent, total, err)
		}
		if !f.quiet {
			for i, id := range ids.IDs {
				fmt.Fprintln(out, id)
				if i < len(ids.Duplicates) && ids.Duplicates[i] {
					fmt.Fprintf(cmd.ErrOrStderr(), "duplicate: job %s holds unique key %q of queue %s; nothing was queued\n", id, f.uniqueKey, args[0])
				}
			}
		}
		sent += len(batch)
		bar.set(sent)
		batch = batch[:0]
		return nil
	}
	for range f.count {
		for _, p := range payloads {
			batch = append(batch, job(p))
			if len(batch) == cap(batch) {
				if err := flush(); err != nil {
					return err
				}
			}
		}
	}
	if err := flush(); err != nil {
		return err
	}
	bar.done()
	return nil
}

// direct publishes straight to the broker of --backend, as the API would.
func (f *enqueueFlags) direct(cmd *cobra.Command, queue string, headers map[string]string, payloads [][]byte) error {
	// The API validates what it is sent; straight to the broker, nobody would. The same
	// check, with the default payload limit: the module's manifest may raise it, and
	// only a host knows the manifest.
	specs := make([]jobspec.Spec, len(payloads))
	for i, p := range payloads {
		specs[i] = jobspec.Spec{Queue: queue, Payload: p, Headers: headers, Delay: f.delay, Priority: f.priority, MaxAttempts: f.maxAttempts, Key: f.key}
		if err := jobspec.Validate(specs[i], 0); err != nil {
			if len(payloads) > 1 {
				return usagef("line %d: %v", i+1, err)
			}
			return usagef("%v", err)
		}
	}
	ctx := cmd.Context()
	b, err := openBackend(ctx, backendSpec{spec: f.backend, queueType: rabbitmq.QueueType(f.queueType)}, nil)
	if err != nil {
		return err
	}
	defer b.Close(context.Background())
	out := bufio.NewWriter(cmd.OutOrStdout())
	defer out.Flush()
	bar := newProgress(cmd.ErrOrStderr(), len(payloads)*f.count)
	sent := 0
	for range f.count {
		for _, spec := range specs {
			env := spec.Envelope()
			if err := b.Publish(ctx, env, spec.Delay); err != nil {
				return fmt.Errorf("after %d jobs: %w", sent, err)
			}
			if !f.quiet {
				fmt.Fprintln(out, env.ID)
			}
			sent++
			bar.set(sent)
		}
	}
	bar.done()
	return nil
}
