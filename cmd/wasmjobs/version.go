package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/wasmjobs/wasmjobs/abi"
)

// version is set at build time with -ldflags "-X main.version=v1.2.3"; otherwise the
// module's build information gives it.
var version = ""

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of wasmjobs, its guest ABI and Go",
		Args:  argsBetween(0, 0),
		RunE: func(cmd *cobra.Command, args []string) error {
			v := versionString()
			fmt.Fprintf(cmd.OutOrStdout(), "wasmjobs %s (guest ABI v%d, %s %s/%s)\n", v, abi.Version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return nil
		},
	}
}

// versionString is the build's version: -ldflags' version, else the module version and
// commit from the build info.
func versionString() string {
	v := version
	if v == "" {
		v = "(devel)"
		if bi, ok := debug.ReadBuildInfo(); ok {
			v = bi.Main.Version
			for _, s := range bi.Settings {
				if s.Key == "vcs.revision" && len(s.Value) >= 12 {
					v += " " + s.Value[:12]
				}
			}
		}
	}
	return v
}
