package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/wasmjobs/wasmjobs/host"
)

func newModulesCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "modules",
		Short: "Inspect and check handler modules",
	}
	validate := &cobra.Command{
		Use:   "validate PATH...",
		Short: "Check that modules load: ABI v1 exports, imports, manifest, initialisation",
		Long: `validate loads each module as 'wasmjobs run' would: it reads the manifest beside it
(NAME.toml), compiles the module, checks its exports and imports against ABI v1, and
runs _initialize and wasmjobs_init. It prints one line per module, OK with the module's
version (the sha256 of its bytes) or the problem, and exits 1 if any module is invalid.`,
		Args: argsBetween(1, -1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			e, err := g.engine(ctx)
			if err != nil {
				return err
			}
			defer e.Close(ctx)
			bad := 0
			for _, path := range args {
				m, err := loadModuleFile(ctx, e, path, 0)
				if err != nil {
					bad++
					fmt.Fprintf(cmd.OutOrStdout(), "%s: %s\n", path, strings.ReplaceAll(err.Error(), "\n", "; "))
					continue
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s: OK version %s queue %s\n", path, m.Version(), m.Queue())
				m.Retire()
			}
			if bad > 0 {
				return &exitError{code: exitFailure}
			}
			return nil
		},
	}
	cmd.AddCommand(validate, newModulesListCommand())
	cmd.AddCommand(newModulesRolloutCommands()...)
	cmd.AddCommand(newModulesFleetCommands(g)...)
	return cmd
}

// moduleName is a module file's name without .wasm.
func moduleName(path string) string {
	return strings.TrimSuffix(filepath.Base(path), ".wasm")
}

// loadModuleFile reads a module file and its manifest and loads it; a positive timeout
// overrides the manifest's.
func loadModuleFile(ctx context.Context, e *host.Engine, path string, timeout time.Duration) (*host.Module, error) {
	wasm, err := os.ReadFile(path)
	if err != nil {
		return nil, usagef("%v", err)
	}
	man, err := host.ReadManifest(path)
	if err != nil {
		return nil, fmt.Errorf("%w %s: %v", host.ErrInvalidModule, moduleName(path), err)
	}
	if timeout > 0 {
		man.Limits.Timeout = timeout
	}
	return e.Load(ctx, moduleName(path), wasm, man)
}
