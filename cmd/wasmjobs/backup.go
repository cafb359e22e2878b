package main

import (
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/wasmjobs/wasmjobs/internal/api"
)

func newBackupCommand() *cobra.Command {
	f := &apiFlags{}
	cmd := &cobra.Command{
		Use:   "backup DIR",
		Short: "Copy a running host's data directory, consistently, into DIR",
		Long: `backup asks a running host (--server) to copy its pebble data directory into DIR
while it keeps running: queued, delayed and dead-lettered jobs and job records, as of the
moment of the copy. DIR is a path on the host's machine; it must not exist or be empty.
Tables are hard-linked where the filesystem allows it, so the copy is quick and small
on the same filesystem.

To restore: stop the host, move its data directory aside, move the backup in its place
(or point --data-dir at it), and start the host.`,
		Example: `  wasmjobs backup /var/backups/wasmjobs-$(date +%F)
  wasmjobs backup ./backup --server http://127.0.0.1:8080`,
		Args: argsBetween(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.client(cmd)
			if err != nil {
				return err
			}
			dir, err := filepath.Abs(args[0])
			if err != nil {
				return usagef("DIR %q: %v", args[0], err)
			}
			var out struct {
				Dir    string  `json:"dir"`
				TookMs float64 `json:"took_ms"`
			}
			if err := c.do(cmd.Context(), "POST", "/v1/backup", nil, api.BackupRequest{Dir: dir}, &out); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "backup written to %s in %.0f ms\n", out.Dir, out.TookMs)
			return nil
		},
	}
	f.add(cmd)
	return cmd
}
