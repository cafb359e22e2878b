package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/wasmjobs/wasmjobs/internal/app/api"
)

func newBackupCommand() *cobra.Command {
	f := &apiFlags{}
	cmd := &cobra.Command{
		Use:   "backup NAME",
		Short: "Copy a running host's data directory, consistently, into its backup directory",
		Long: `backup asks a running host (--server) to copy its pebble data directory, while it
keeps running, into NAME inside the directory the host was started with as --backup-dir:
queued, delayed and dead-lettered jobs and job records, as of the moment of the copy.
NAME is one plain name (no "/", no ".."), that must not exist yet; the host chooses
where backups go, the caller only their names. A host started without --backup-dir,
or draining, refuses. The backup's directory is made 0700.

Tables are hard-linked where the filesystem allows it, so the copy is quick and small
on the same filesystem; but a hard-linked backup keeps the tables it links on disk,
after the live store has compacted them away, until the backup is deleted.

To restore: stop the host, move its data directory aside, move the backup in its place
(or point --data-dir at it), and start the host.`,
		Example: `  wasmjobs backup nightly-$(date +%F)
  wasmjobs backup before-upgrade --server http://127.0.0.1:8080`,
		Args: argsBetween(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.client(cmd)
			if err != nil {
				return err
			}
			var out struct {
				Dir    string  `json:"dir"`
				TookMs float64 `json:"took_ms"`
			}
			if err := c.do(cmd.Context(), "POST", "/v1/backup", nil, api.BackupRequest{Name: args[0]}, &out); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "backup written to %s in %.0f ms\n", out.Dir, out.TookMs)
			return nil
		},
	}
	f.add(cmd)
	return cmd
}
