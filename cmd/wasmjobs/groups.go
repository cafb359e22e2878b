package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/internal/app/inspect"
)

// newGroupCommand is `wasmjobs workflows` or `wasmjobs batches`: create, get, list and
// cancel groups of kind through a running host's API.
func newGroupCommand(kind backend.GroupKind) *cobra.Command {
	plural := kind.Plural()
	path := "/v1/" + plural
	cmd := &cobra.Command{
		Use:   plural,
		Short: fmt.Sprintf("Create, follow and cancel %s on a running host", plural),
	}
	f := &apiFlags{}
	create := &cobra.Command{
		Use:   "create FILE",
		Short: fmt.Sprintf("Create a %s from a JSON file (- reads standard input), as POST %s takes it", kind, path),
		Args:  argsBetween(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			in := cmd.InOrStdin()
			if args[0] != "-" {
				file, err := os.Open(args[0])
				if err != nil {
					return err
				}
				defer file.Close()
				in = file
			}
			var body json.RawMessage
			data, err := io.ReadAll(io.LimitReader(in, 64<<20))
			if err == nil {
				err = json.Unmarshal(data, &body)
			}
			if err != nil {
				return usagef("%s: want the JSON body of POST %s: %v", args[0], path, err)
			}
			var out struct {
				ID string `json:"id"`
			}
			if printed, err := f.call(cmd, "POST", path, nil, body, &out); printed || err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), out.ID)
			return nil
		},
	}
	get := &cobra.Command{
		Use:   "get ID",
		Short: fmt.Sprintf("Show a %s and the state of each of its jobs", kind),
		Args:  argsBetween(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return showGroup(cmd, f, kind, "GET", path+"/"+url.PathEscape(args[0]))
		},
	}
	cancel := &cobra.Command{
		Use:   "cancel ID",
		Short: fmt.Sprintf("Cancel a %s: the jobs that have not ended are cancelled, running ones stopped", kind),
		Args:  argsBetween(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return showGroup(cmd, f, kind, "POST", path+"/"+url.PathEscape(args[0])+"/cancel")
		},
	}
	var limit int
	var cursor string
	list := &cobra.Command{
		Use:   "list",
		Short: fmt.Sprintf("List the %s, newest first", plural),
		Args:  argsBetween(0, 0),
		RunE: func(cmd *cobra.Command, args []string) error {
			q := url.Values{}
			if limit > 0 {
				q.Set("limit", fmt.Sprint(limit))
			}
			if cursor != "" {
				q.Set("cursor", cursor)
			}
			var out map[string]json.RawMessage
			if printed, err := f.call(cmd, "GET", path, q, nil, &out); printed || err != nil {
				return err
			}
			tw := table(cmd.OutOrStdout())
			if kind == backend.GroupBatch {
				var batches []inspect.BatchView
				if err := json.Unmarshal(out[plural], &batches); err != nil {
					return fmt.Errorf("decoding the API's answer: %w", err)
				}
				fmt.Fprintln(tw, "ID\tSTATE\tTOTAL\tPENDING\tSUCCEEDED\tDEAD\tCANCELLED\tCREATED")
				for _, b := range batches {
					fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\n", b.ID, b.State, b.Total, b.Pending, b.Succeeded, b.Dead, b.Cancelled, when(b.CreatedAt))
				}
			} else {
				var wfs []inspect.WorkflowView
				if err := json.Unmarshal(out[plural], &wfs); err != nil {
					return fmt.Errorf("decoding the API's answer: %w", err)
				}
				fmt.Fprintln(tw, "ID\tSTATE\tTASKS\tCREATED")
				for _, w := range wfs {
					fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", w.ID, w.State, len(w.Tasks), when(w.CreatedAt))
				}
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			var next string
			if json.Unmarshal(out["next"], &next) == nil && next != "" {
				fmt.Fprintf(cmd.OutOrStdout(), "more: --cursor %s\n", next)
			}
			return nil
		},
	}
	list.Flags().IntVar(&limit, "limit", 0, "the most to list (default the API's page)")
	list.Flags().StringVar(&cursor, "cursor", "", "continue a listing (the cursor a page printed)")
	for _, c := range []*cobra.Command{create, get, cancel, list} {
		f.add(c)
		f.addJSON(c)
		cmd.AddCommand(c)
	}
	return cmd
}

// showGroup prints the group the API answers method path with: a workflow's tasks, a
// batch's counts and callbacks.
func showGroup(cmd *cobra.Command, f *apiFlags, kind backend.GroupKind, method, path string) error {
	w := cmd.OutOrStdout()
	if kind == backend.GroupBatch {
		var b inspect.BatchView
		if printed, err := f.call(cmd, method, path, nil, nil, &b); printed || err != nil {
			return err
		}
		fmt.Fprintf(w, "batch %s: %s, %d jobs: %d pending, %d succeeded, %d dead, %d cancelled\n",
			b.ID, b.State, b.Total, b.Pending, b.Succeeded, b.Dead, b.Cancelled)
		for _, role := range []string{backend.RoleOnComplete, backend.RoleOnSuccess} {
			if id, ok := b.Callbacks[role]; ok {
				fmt.Fprintf(w, "%s: %s (%s)\n", role, id, b.CallbackStates[role])
			}
		}
		if len(b.Unsucceeded) > 0 {
			fmt.Fprintf(w, "did not succeed: %s\n", strings.Join(b.Unsucceeded, " "))
		}
		return nil
	}
	var wf inspect.WorkflowView
	if printed, err := f.call(cmd, method, path, nil, nil, &wf); printed || err != nil {
		return err
	}
	fmt.Fprintf(w, "workflow %s: %s\n", wf.ID, wf.State)
	tw := table(w)
	fmt.Fprintln(tw, "TASK\tJOB\tQUEUE\tSTATE\tDEPENDS-ON\tREASON")
	for _, t := range wf.Tasks {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", t.Name, t.ID, t.Queue, t.State, orDash(strings.Join(t.DependsOn, ",")), orDash(t.Reason))
	}
	return tw.Flush()
}

// when is a time for a table, "-" when unset.
func when(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format(time.DateTime)
}
