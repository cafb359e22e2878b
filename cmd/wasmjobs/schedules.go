package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/wasmjobs/wasmjobs/internal/app/api"
)

func newSchedulesCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "schedules",
		Short: "Inspect the modules' periodic schedules",
	}
	f := &apiFlags{}
	list := &cobra.Command{
		Use:   "list",
		Short: "List a running host's schedules with their next and last runs",
		Long: `list shows the [[schedule]]s of a running host's modules: the cron line and zone, the
next tick, and the last fired tick with its job's id. FIRING says whether this host
fires them: on RabbitMQ one host leads at a time, and the others know only the ticks
they fired themselves.`,
		Args: argsBetween(0, 0),
		RunE: func(cmd *cobra.Command, args []string) error {
			var out api.SchedulesResponse
			if printed, err := f.call(cmd, "GET", "/v1/schedules", nil, nil, &out); printed || err != nil {
				return err
			}
			tw := table(cmd.OutOrStdout())
			fmt.Fprintln(tw, "SCHEDULE\tCRON\tTIMEZONE\tQUEUE\tNEXT\tLAST\tLAST-ID\tFIRING")
			stamp := func(t time.Time) string {
				if t.IsZero() {
					return "-"
				}
				return t.Local().Format(time.DateTime)
			}
			for _, s := range out.Schedules {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%v\n", s.Name, s.Cron, s.Timezone, s.Queue,
					stamp(s.Next), stamp(s.Last), orDash(s.LastID), s.Firing)
			}
			return tw.Flush()
		},
	}
	f.add(list)
	f.addJSON(list)
	cmd.AddCommand(list)
	return cmd
}
