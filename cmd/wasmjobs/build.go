package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/wasmjobs/wasmjobs/internal/tools/jsbuild"
)

func newBuildCommand() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "build ENTRY.{js,ts}",
		Short: "Build a JavaScript or TypeScript handler into one .wasm",
		Long: `build bundles a JavaScript or TypeScript handler (its default export handles a job) with
esbuild, built into this binary, checks its types with tsc when TypeScript is installed
in the project, and writes one .wasm: the QuickJS engine of npm's quickjs-wasi, found in
the project's node_modules, with the bundle in the custom section "wasmjobs.js".

The engine is the one thing it needs from npm: npm install quickjs-wasi@` + jsbuild.EngineVersion + `
(a project made by 'wasmjobs new --lang typescript' lists it in package.json).`,
		Example: `  wasmjobs new --lang typescript resize && cd resize && npm install
  wasmjobs build handler.ts -o resize.wasm`,
		Args: argsBetween(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			entry := args[0]
			ext := filepath.Ext(entry)
			if ext != ".js" && ext != ".mjs" && ext != ".ts" && ext != ".mts" {
				return usagef("build: %s: want a .js or .ts entry file", entry)
			}
			if _, err := os.Stat(entry); err != nil {
				return usagef("build: %v", err)
			}
			if out == "" {
				out = strings.TrimSuffix(entry, ext) + ".wasm"
			}
			wasm, checked, err := jsbuild.Build(entry)
			if errors.Is(err, jsbuild.ErrNoEngine) {
				return usagef("build: %v", err)
			}
			if err != nil {
				return fmt.Errorf("build: %w", err)
			}
			if err := os.WriteFile(out, wasm, 0o644); err != nil {
				return fmt.Errorf("build: %w", err)
			}
			note := ""
			if strings.HasSuffix(ext, "ts") && !checked {
				note = " (types not checked: npm install typescript for tsc)"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s (%d bytes)%s\n", out, len(wasm), note)
			return nil
		},
	}
	cmd.Flags().StringVarP(&out, "out", "o", "", "the .wasm to write (default: ENTRY with .wasm)")
	return cmd
}
