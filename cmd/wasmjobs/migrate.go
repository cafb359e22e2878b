package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/wasmjobs/wasmjobs/backend/postgres"
)

// migrateFlags are the flags of wasmjobs migrate's subcommands.
type migrateFlags struct {
	backend string
	schema  string
	to      int
	timeout time.Duration
}

func newMigrateCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Show or change the version of a PostgreSQL backend's schema, for operators who migrate by hand",
		Long: `migrate reads or changes the version of the tables a PostgreSQL --backend keeps in its
schema (--pg-schema). Hosts migrate the schema up at their start by themselves; an
operator who applies migrations by hand runs migrate up before starting new hosts, and
starts them with --pg-migrate=false, which refuses a schema older than the binary's.

Each migration runs in a transaction of its own, under the lock the hosts' own
migrations take. Stop every host of the schema before going down: a host of a newer
version would misread it. Going below version 2 deletes the finished jobs' records,
which version 1 cannot hold; there is nothing below version 1 (drop the schema with
DROP SCHEMA ... CASCADE to remove it).`,
		Example: `  wasmjobs migrate status --backend postgres://wasmjobs@db.internal/app
  wasmjobs migrate up --backend postgres://wasmjobs@db.internal/app --pg-schema jobs
  wasmjobs migrate down --backend postgres://wasmjobs@db.internal/app --to 2`,
	}
	status := &cobra.Command{
		Use:   "status",
		Short: "Print the schema's version and this binary's",
		Args:  argsBetween(0, 0),
	}
	up := &cobra.Command{
		Use:   "up",
		Short: "Migrate the schema up to this binary's version (or --to)",
		Args:  argsBetween(0, 0),
	}
	down := &cobra.Command{
		Use:   "down",
		Short: "Migrate the schema down one version (or to --to)",
		Args:  argsBetween(0, 0),
	}
	for _, c := range []*cobra.Command{status, up, down} {
		f := &migrateFlags{}
		fl := c.Flags()
		fl.StringVar(&f.backend, "backend", "", "the database: a postgres:// URL (env WASMJOBS_BACKEND)")
		fl.StringVar(&f.schema, "pg-schema", postgres.DefaultSchema, "the schema of wasmjobs' tables (env WASMJOBS_PG_SCHEMA)")
		fl.DurationVar(&f.timeout, "timeout", time.Minute, "give up after this long, connecting and migrating")
		if c != status {
			fl.IntVar(&f.to, "to", 0, "the version to migrate to (default: this binary's for up, one less for down)")
		}
		c.RunE = func(cmd *cobra.Command, _ []string) error { return f.run(cmd, cmd.Name()) }
	}
	cmd.AddCommand(status, up, down)
	return cmd
}

// run runs the subcommand op (status, up or down).
func (f *migrateFlags) run(cmd *cobra.Command, op string) error {
	if err := applyEnv(cmd); err != nil {
		return err
	}
	if !postgres.IsURL(f.backend) {
		return usagef("--backend %q: want a postgres:// URL (migrate is for the PostgreSQL backend's schema)", redact(f.backend))
	}
	if err := postgres.CheckSchema(f.schema); err != nil {
		return usagef("--pg-schema: %v", err)
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
	defer cancel()
	have, err := postgres.SchemaVersionOf(ctx, f.backend, f.schema)
	if err != nil {
		return fmt.Errorf("--backend %s: %w", redact(f.backend), err)
	}
	out := cmd.OutOrStdout()
	if op == "status" {
		fmt.Fprintf(out, "schema %s: version %d; this binary: version %d (%s)\n", f.schema, have, postgres.SchemaVersion, pending(have))
		return nil
	}
	to := f.to
	switch {
	case to == 0 && op == "up":
		to = postgres.SchemaVersion
	case to == 0:
		to = have - 1
	case op == "up" && to < have, op == "down" && to > have:
		return usagef("migrate %s --to %d: the schema is at version %d", op, to, have)
	}
	if to < 1 && op == "down" {
		return usagef("migrate down: schema %s is at version %d, and there is nothing below version 1 (drop the schema with DROP SCHEMA ... CASCADE to remove it)", f.schema, have)
	}
	if to < 1 || to > postgres.SchemaVersion {
		return usagef("migrate %s to version %d: this binary knows versions 1 to %d (the schema is at %d)", op, to, postgres.SchemaVersion, have)
	}
	from, err := postgres.Migrate(ctx, f.backend, f.schema, to, op == "down")
	if err != nil {
		return fmt.Errorf("--backend %s: %w", redact(f.backend), err)
	}
	if from == to || (op == "up" && from > to) || (op == "down" && from < to) {
		fmt.Fprintf(out, "schema %s: at version %d already: nothing to do\n", f.schema, from)
		return nil
	}
	fmt.Fprintf(out, "schema %s: migrated from version %d to %d\n", f.schema, from, to)
	return nil
}

// pending says what a schema at version have lacks of this binary's.
func pending(have int) string {
	switch {
	case have == postgres.SchemaVersion:
		return "up to date"
	case have > postgres.SchemaVersion:
		return "the schema is newer: run a wasmjobs at least as new as the one that migrated it"
	case have == 0:
		return "never migrated: migrate up, or start a host, creates it"
	}
	vs := make([]string, 0, postgres.SchemaVersion-have)
	for v := have + 1; v <= postgres.SchemaVersion; v++ {
		vs = append(vs, fmt.Sprint(v))
	}
	return "to apply: " + strings.Join(vs, ", ")
}
