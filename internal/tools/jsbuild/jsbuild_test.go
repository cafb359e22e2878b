package jsbuild

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFindEngineRequiresTheVersion: FindEngine takes quickjs-wasi only at
// EngineVersion, and names the version it wants otherwise.
func TestFindEngineRequiresTheVersion(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, pkg string
		err       error
	}{
		{"pinned", `{"name":"quickjs-wasi","version":"` + EngineVersion + `"}`, nil},
		{"other", `{"name":"quickjs-wasi","version":"3.6.0"}`, ErrEngineVersion},
		{"no package.json", "", ErrEngineVersion},
		{"bad package.json", "{", ErrEngineVersion},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			pkg := filepath.Join(dir, "node_modules", "quickjs-wasi")
			if err := os.MkdirAll(pkg, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(pkg, "quickjs.wasm"), []byte("\x00asm"), 0o644); err != nil {
				t.Fatal(err)
			}
			if tc.pkg != "" {
				if err := os.WriteFile(filepath.Join(pkg, "package.json"), []byte(tc.pkg), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			p, err := FindEngine(dir)
			if !errors.Is(err, tc.err) {
				t.Fatalf("FindEngine: %q, %v; want %v", p, err, tc.err)
			}
			if err != nil && !strings.Contains(err.Error(), "quickjs-wasi@"+EngineVersion) {
				t.Fatalf("%v does not name the version wanted", err)
			}
		})
	}
}
