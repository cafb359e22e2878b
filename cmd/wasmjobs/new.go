package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/wasmjobs/wasmjobs/internal/tools/scaffold"
)

func newNewCommand() *cobra.Command {
	var lang, dir string
	cmd := &cobra.Command{
		Use:   "new --lang LANG NAME",
		Short: "Make a new handler project in Go, Rust, C, AssemblyScript, JavaScript or TypeScript",
		Long: `new makes the directory NAME with a handler that greets the name in its payload, a
copy of the language's wasmjobs SDK, a manifest (NAME.toml), a README and build.sh,
which builds NAME.wasm in one command. The module passes 'wasmjobs modules validate'.

Toolchains: Go needs only Go; C needs clang and wasi-libc; Rust needs rustc with the
wasm32 standard library; AssemblyScript needs Node.js (build.sh installs asc with npm);
JavaScript and TypeScript need Node.js (build.sh installs the QuickJS engine, esbuild and
tsc with npm; 'wasmjobs build handler.ts' then builds without Node.js).`,
		Example: `  wasmjobs new --lang go resize
  cd resize && ./build.sh && wasmjobs invoke resize.wasm --payload Ada`,
		Args: argsBetween(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if lang == "" {
				return usagef("--lang is required: one of %s", strings.Join(scaffold.Languages, ", "))
			}
			root, err := scaffold.New(dir, lang, args[0])
			if err != nil {
				return usagef("%v", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "made %s\n  cd %s && ./build.sh && wasmjobs modules validate %s.wasm\n", root, root, args[0])
			return nil
		},
	}
	cmd.Flags().StringVar(&lang, "lang", "", "go, rust, c, assemblyscript, javascript or typescript")
	cmd.Flags().StringVar(&dir, "dir", ".", "where to make the project's directory")
	return cmd
}
