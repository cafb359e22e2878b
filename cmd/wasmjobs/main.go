// Command wasmjobs is the wasmjobs host: it runs background jobs in WebAssembly
// handlers. `wasmjobs --help` lists its commands.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/host"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// Exit statuses.
const (
	exitOK      = 0
	exitFailure = 1 // the command ran and something failed
	exitUsage   = 2 // bad usage, or a module that cannot be loaded
)

// usageError is a mistake in how the command was called.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error {
	return &usageError{fmt.Errorf(format, args...)}
}

// exitError carries an exit status whose message was already printed.
type exitError struct{ code int }

func (e *exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// run runs the command line args and returns the exit status.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRootCommand(stdin, stdout, stderr)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	var exit *exitError
	if errors.As(err, &exit) {
		return exit.code
	}
	msg := strings.ReplaceAll(strings.TrimSpace(err.Error()), "\n", "; ")
	fmt.Fprintf(stderr, "wasmjobs: %s\n", msg)
	var usage *usageError
	if errors.As(err, &usage) || errors.Is(err, host.ErrInvalidModule) {
		return exitUsage
	}
	return exitFailure
}

// globals are the flags every command shares.
type globals struct {
	cacheDir string
}

func newRootCommand(stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:   "wasmjobs",
		Short: "Run background jobs in sandboxed WebAssembly handlers",
		Long: `wasmjobs consumes jobs from a queue and runs each one by calling a WebAssembly
module's wasmjobs_handle export. Handlers are written in any language that compiles to
Wasm, against one ABI (abi/SPEC.md), and are swapped live by replacing files in the
modules directory.

Try a module without any queue:

  wasmjobs invoke ./modules/resize.wasm --payload '{"url":"..."}'`,
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err} })
	root.PersistentFlags().StringVar(&g.cacheDir, "cache-dir", os.Getenv("WASMJOBS_CACHE_DIR"),
		"where compiled modules are cached across runs (default: the user cache dir; env WASMJOBS_CACHE_DIR)")
	root.AddCommand(newRunCommand(g), newSchedulesCommand(), newGroupCommand(backend.GroupWorkflow), newGroupCommand(backend.GroupBatch), newEnqueueCommand(), newInvokeCommand(g), newModulesCommand(g),
		newQueuesCommand(), newJobsCommand(), newDLQCommand(), newNewCommand(), newBuildCommand(), newBenchCommand(g), newBackupCommand(), newMigrateCommand(), newVersionCommand())
	return root
}

// engine starts a host engine with the shared flags.
func (g *globals) engine(ctx context.Context) (*host.Engine, error) {
	return host.NewEngine(ctx, host.Config{CacheDir: g.cacheDir})
}

// argsBetween validates the count of positional arguments as a usage error.
func argsBetween(lo, hi int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < lo || (hi >= 0 && len(args) > hi) {
			return usagef("%s: want %s, got %d arguments (see --help)", cmd.CommandPath(), cmd.Use, len(args))
		}
		return nil
	}
}
