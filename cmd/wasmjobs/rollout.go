package main

import (
	"fmt"
	"net/url"
	"time"

	"github.com/spf13/cobra"

	"github.com/wasmjobs/wasmjobs/host"
)

// newModulesRolloutCommands returns `modules history`, `modules rollback` and `modules
// promote`, which talk to a running host's API.
func newModulesRolloutCommands() []*cobra.Command {
	hf := &apiFlags{}
	history := &cobra.Command{
		Use:   "history NAME",
		Short: "List the versions of a module a running host keeps for a rollback, newest first",
		Long: `history lists the versions of the module NAME that the host keeps (the last 5 by
default, the manifest's rollout.history): each version (the sha256 of the bytes, or of
the bytes' and the manifest's sha256s when there is a manifest), when it came, its
state (current, canary, previous, rolled_back, superseded), whether a rollback pinned
it, and why it left service.`,
		Args: argsBetween(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var out struct{ Versions []host.HistoryEntry }
			if printed, err := hf.call(cmd, "GET", "/v1/modules/"+url.PathEscape(args[0])+"/history", nil, nil, &out); printed || err != nil {
				return err
			}
			tw := table(cmd.OutOrStdout())
			fmt.Fprintln(tw, "VERSION\tSTATE\tPINNED\tADDED\tREASON")
			for _, v := range out.Versions {
				pinned := "-"
				if v.Pinned {
					pinned = "pinned"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", v.Version, v.State, pinned, v.AddedAt.Local().Format(time.DateTime), orDash(v.Reason))
			}
			return tw.Flush()
		},
	}
	hf.add(history)
	hf.addJSON(history)

	rf := &apiFlags{}
	var to string
	rollback := &cobra.Command{
		Use:   "rollback NAME [--to VERSION]",
		Short: "Put a module back on an earlier version and pin it there until its files change",
		Long: `rollback ends the canary of the module NAME if one is under way, else puts the
version that served before the current one back in service; --to names any version of
'modules history' (in full, or 6 or more of its first digits). The version chosen is
pinned: it serves, after a restart too, until the module's files change, and the next
change starts a canary from it. The files are never edited.`,
		Args: argsBetween(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var body any
			if to != "" {
				body = map[string]string{"to": to}
			}
			var out struct{ Pinned host.Pin }
			if printed, err := rf.call(cmd, "POST", "/v1/modules/"+url.PathEscape(args[0])+"/rollback", nil, body, &out); printed || err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: serving %s, pinned until the files change (they hold %s)\n", args[0], out.Pinned.Version, out.Pinned.FileVersion)
			return nil
		},
	}
	rollback.Flags().StringVar(&to, "to", "", "the version to go back to (see 'modules history')")
	rf.add(rollback)
	rf.addJSON(rollback)

	pf := &apiFlags{}
	promote := &cobra.Command{
		Use:   "promote NAME",
		Short: "End a module's canary now: its new version serves every job",
		Args:  argsBetween(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var out struct{ Verdict host.Verdict }
			if printed, err := pf.call(cmd, "POST", "/v1/modules/"+url.PathEscape(args[0])+"/promote", nil, nil, &out); printed || err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %s promoted (%s)\n", args[0], out.Verdict.Version, out.Verdict.Reason)
			return nil
		},
	}
	pf.add(promote)
	pf.addJSON(promote)
	return []*cobra.Command{history, rollback, promote}
}
