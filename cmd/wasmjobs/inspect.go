package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/rabbitmq"
	"github.com/wasmjobs/wasmjobs/host"
	"github.com/wasmjobs/wasmjobs/internal/app/fleet"
	"github.com/wasmjobs/wasmjobs/internal/app/inspect"
	"github.com/wasmjobs/wasmjobs/internal/telemetry"
)

func encodeBase64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// printJSON indents raw JSON to w.
func printJSON(w io.Writer, raw json.RawMessage) error {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return err
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

func table(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0) }

func count(n int) string {
	if n < 0 {
		return "-"
	}
	return strconv.Itoa(n)
}

func newQueuesCommand() *cobra.Command {
	f := &apiFlags{}
	list := &cobra.Command{
		Use:   "list [QUEUE...]",
		Short: "List the served queues with their pending, running, deferred and dead jobs",
		Long: `list shows the queues a running host serves, with their jobs by state. With --backend
it asks the broker instead, about the QUEUEs named (the broker cannot list them itself),
and knows only their pending jobs and dead letters.

A count shown as - is one the backend cannot tell (RabbitMQ does not count delayed or
deferred jobs); ? means counting failed, and ERROR says why (the command then exits 1).`,
		Args: argsBetween(0, -1),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case f.backend != "" && len(args) == 0:
				return usagef("queues list --backend: name the queues to show")
			case f.backend == "" && len(args) > 0:
				return usagef("queues list: name queues only with --backend; a host lists its own")
			}
			var raw json.RawMessage
			err := f.via(cmd, func(b *rabbitmq.Backend) error {
				out := struct {
					Queues []inspect.QueueInfo `json:"queues"`
				}{Queues: []inspect.QueueInfo{}}
				for _, q := range args {
					st, err := b.QueueStats(cmd.Context(), q)
					if err != nil {
						return err
					}
					out.Queues = append(out.Queues, inspect.QueueInfo{Name: q, Module: "-", Running: -1, QueueStats: &st})
				}
				var err error
				raw, err = json.Marshal(out)
				return err
			}, func(c *client) error {
				return c.do(cmd.Context(), "GET", "/v1/queues", nil, nil, &raw)
			})
			if err != nil {
				return err
			}
			var out struct{ Queues []inspect.QueueInfo }
			if printed, err := f.show(cmd, raw, &out); printed || err != nil {
				return err
			}
			tw := table(cmd.OutOrStdout())
			fmt.Fprintln(tw, "QUEUE\tMODULE\tPENDING\tRUNNING\tDELAYED\tDEFERRED\tDEAD\tERROR")
			failed := 0
			for _, q := range out.Queues {
				pending, delayed, deferred, dead := "?", "?", "?", "?" // counting failed: see ERROR
				if st := q.QueueStats; st != nil {
					pending, delayed, deferred, dead = count(st.Pending), count(st.Delayed), count(st.Deferred), count(st.Dead)
				} else {
					failed++
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", q.Name, q.Module, pending, count(q.Running), delayed, deferred, dead, orDash(q.Error))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if failed > 0 {
				return fmt.Errorf("counting the messages of %d of %d queues failed (see ERROR)", failed, len(out.Queues))
			}
			return nil
		},
	}
	f.add(list)
	f.addJSON(list)
	f.addBackend(list)
	cmd := &cobra.Command{Use: "queues", Short: "Inspect the queues of a running host, or of a broker"}
	cmd.AddCommand(list)
	return cmd
}

func newModulesListCommand() *cobra.Command {
	f := &apiFlags{}
	var stream string
	var window time.Duration
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List a running host's modules: version, queue, status, and why a version was rejected",
		Args:  argsBetween(0, 0),
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.backend != "" {
				return fleetList(cmd, f.backend, stream, window, f.json)
			}
			var out struct{ Modules []host.ModuleStatus }
			if printed, err := f.call(cmd, "GET", "/v1/modules", nil, nil, &out); printed || err != nil {
				return err
			}
			tw := table(cmd.OutOrStdout())
			fmt.Fprintln(tw, "MODULE\tSTATUS\tVERSION\tQUEUE\tLOADED\tIN-FLIGHT\tERROR")
			for _, m := range out.Modules {
				loaded := "-"
				if !m.LoadedAt.IsZero() {
					loaded = m.LoadedAt.Local().Format(time.DateTime)
				}
				version := m.Version
				if len(version) > 12 {
					version = version[:12]
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", m.Name, m.Status, orDash(version), orDash(m.Queue), loaded, m.InFlight, m.Error)
				if c := m.Canary; c != nil {
					fmt.Fprintf(tw, "  canary\t%d%%\t%s\t\t%s\t\t%d of %d jobs failed (current: %d of %d)\n", c.Percent, short(c.Version),
						c.StartedAt.Local().Format(time.DateTime), c.Failed, c.Jobs, c.CurrentFailed, c.CurrentJobs)
				}
				if v := m.LastRollout; v != nil {
					fmt.Fprintf(tw, "  %s\t\t%s\t\t%s\t\t%s\n", v.Kind, short(v.Version), v.At.Local().Format(time.DateTime), v.Reason)
				}
				if p := m.Pinned; p != nil {
					fmt.Fprintf(tw, "  pinned\t\t%s\t\t%s\t\tuntil the files (%s) change: %s\n", short(p.Version), p.At.Local().Format(time.DateTime), short(p.FileVersion), p.Reason)
				}
			}
			return tw.Flush()
		},
	}
	f.add(cmd)
	f.addJSON(cmd)
	cmd.Flags().StringVar(&f.backend, "backend", "", "list what every host on this RabbitMQ broker serves (amqp://...), from their heartbeats on the modules stream, instead of one host's API")
	cmd.Flags().StringVar(&stream, "stream", fleet.DefaultStream, "with --backend: the modules stream (env WASMJOBS_MODULE_STREAM)")
	cmd.Flags().DurationVar(&window, "window", 3*fleet.DefaultHeartbeat, "with --backend: hosts whose last heartbeat is older are left out")
	return cmd
}

// short cuts a version to its first 12 digits, as listings show it.
func short(v string) string {
	if len(v) > 12 {
		return v[:12]
	}
	return v
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func newJobsCommand() *cobra.Command {
	f := &apiFlags{}
	get := &cobra.Command{
		Use:   "get ID",
		Short: "Show a job's latest state known to a running host",
		Args:  argsBetween(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.client(cmd)
			if err != nil {
				return err
			}
			var raw json.RawMessage
			if err := c.do(cmd.Context(), "GET", "/v1/jobs/"+url.PathEscape(args[0]), nil, nil, &raw); err != nil {
				return err
			}
			return printJSON(cmd.OutOrStdout(), raw)
		},
	}
	f.add(get)
	cmd := &cobra.Command{Use: "jobs", Short: "Follow jobs"}
	cmd.AddCommand(get)
	return cmd
}

func newDLQCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "dlq", Short: "Inspect, replay and purge dead letters"}
	lf := &apiFlags{}
	var limit int
	list := &cobra.Command{
		Use:   "list QUEUE",
		Short: "List a queue's dead letters, oldest first, with why they died",
		Args:  argsBetween(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var raw json.RawMessage
			err := lf.via(cmd, func(b *rabbitmq.Backend) error {
				dead, err := b.DeadLetters(cmd.Context(), args[0], limit)
				if err != nil {
					return err
				}
				raw, err = json.Marshal(map[string]any{"dead_letters": inspect.DeadLetterInfos(args[0], dead)})
				return err
			}, func(c *client) error {
				q := url.Values{"queue": {args[0]}, "limit": {strconv.Itoa(limit)}}
				return c.do(cmd.Context(), "GET", "/v1/dead-letters", q, nil, &raw)
			})
			if err != nil {
				return err
			}
			var out struct {
				DeadLetters []inspect.DeadLetterInfo `json:"dead_letters"`
			}
			if printed, err := lf.show(cmd, raw, &out); printed || err != nil {
				return err
			}
			tw := table(cmd.OutOrStdout())
			fmt.Fprintln(tw, "ID\tATTEMPT\tDIED\tREASON")
			for _, d := range out.DeadLetters {
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", d.ID, d.Attempt, d.At.Local().Format(time.DateTime), strings.ReplaceAll(d.Reason, "\n", " "))
			}
			return tw.Flush()
		},
	}
	lf.add(list)
	lf.addJSON(list)
	lf.addBackend(list)
	list.Flags().IntVar(&limit, "limit", 100, "list at most this many")

	rf := &apiFlags{}
	replay := &cobra.Command{
		Use:   "replay QUEUE ID...",
		Short: "Put dead letters back on their queue as fresh jobs (attempt 1)",
		Args:  argsBetween(2, -1),
		RunE: func(cmd *cobra.Command, args []string) error {
			replayAll := func(replay func(id string) error) error {
				for _, id := range args[1:] {
					if err := replay(id); err != nil {
						return err
					}
					fmt.Fprintf(cmd.OutOrStdout(), "replayed %s\n", id)
				}
				return nil
			}
			return rf.via(cmd, func(b *rabbitmq.Backend) error {
				// Untraced, the replay drops the link an earlier replayer left.
				ctx := backend.WithReplayHeaders(cmd.Context(), telemetry.InjectReplay(cmd.Context()))
				return replayAll(func(id string) error { return b.ReplayDeadLetter(ctx, args[0], id) })
			}, func(c *client) error {
				return replayAll(func(id string) error {
					return c.do(cmd.Context(), "POST", "/v1/dead-letters/"+url.PathEscape(id)+"/replay", url.Values{"queue": {args[0]}}, nil, nil)
				})
			})
		},
	}
	rf.add(replay)
	rf.addBackend(replay)

	pf := &apiFlags{}
	purge := &cobra.Command{
		Use:   "purge QUEUE",
		Short: "Delete every dead letter of a queue",
		Args:  argsBetween(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var out struct {
				Purged int `json:"purged"`
			}
			err := pf.via(cmd, func(b *rabbitmq.Backend) (err error) {
				out.Purged, err = b.PurgeDeadLetters(cmd.Context(), args[0])
				return err
			}, func(c *client) error {
				return c.do(cmd.Context(), "DELETE", "/v1/dead-letters", url.Values{"queue": {args[0]}}, nil, &out)
			})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "purged %d dead letters of %s\n", out.Purged, args[0])
			return nil
		},
	}
	pf.add(purge)
	pf.addBackend(purge)
	cmd.AddCommand(list, replay, purge)
	return cmd
}

// progress draws a progress bar on a terminal for large batches, and nothing otherwise.
type progress struct {
	w     io.Writer
	total int
	on    bool
}

func newProgress(w io.Writer, total int) *progress {
	p := &progress{w: w, total: total}
	if f, ok := w.(*os.File); ok && total >= 1000 {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			p.on = true
		}
	}
	return p
}

func (p *progress) set(n int) {
	if !p.on {
		return
	}
	const width = 40
	filled := width * n / p.total
	fmt.Fprintf(p.w, "\r[%s%s] %d/%d", strings.Repeat("#", filled), strings.Repeat(".", width-filled), n, p.total)
}

func (p *progress) done() {
	if p.on {
		fmt.Fprintln(p.w)
	}
}
