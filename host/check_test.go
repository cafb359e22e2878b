package host_test

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/wasmjobs/wasmjobs/host"
)

func TestCheckValidatesWithoutRunningGuestCode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEngine(t)
	for _, tc := range []struct {
		file string
		ok   bool
	}{
		{"../testdata/abi/echo.wasm", true},
		// They trap or loop in _initialize: Load refuses them, Check never runs them.
		{"../testdata/hostile/init_trap.wasm", true},
		{"../testdata/hostile/init_loop.wasm", true},
		{"../testdata/hostile/no_marker.wasm", false},
		{"../testdata/hostile/bad_import.wasm", false},
	} {
		wasm, err := os.ReadFile(tc.file)
		if err != nil {
			t.Skipf("%s: %v (make guests)", tc.file, err)
		}
		v, err := e.Check(ctx, "upload", wasm)
		switch {
		case tc.ok && (err != nil || v != host.Version(wasm)):
			t.Errorf("Check(%s) = %q, %v; want its version", tc.file, v, err)
		case !tc.ok && !errors.Is(err, host.ErrInvalidModule):
			t.Errorf("Check(%s): %v, want ErrInvalidModule", tc.file, err)
		}
	}
	if _, err := e.Check(ctx, "upload", []byte("not wasm")); !errors.Is(err, host.ErrInvalidModule) {
		t.Errorf("Check of bytes without the header: %v, want ErrInvalidModule", err)
	}
}
