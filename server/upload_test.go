package server

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/wasmjobs/wasmjobs/host"
)

// An upload is checked without running its code: a module that traps in _initialize
// (which Load, running it, refuses) passes the check; one without the ABI marker does not.
func TestUploadValidatorRunsNoGuestCode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, err := host.NewEngine(ctx, host.Config{NoCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	validate := uploadValidator(e)
	trap, err := os.ReadFile("../testdata/hostile/init_trap.wasm")
	if err != nil {
		t.Fatal(err)
	}
	if v, err := validate(ctx, "init_trap", trap); err != nil || v != host.Version(trap) {
		t.Errorf("validating a module whose _initialize traps: %q, %v; want its version (its code must not run)", v, err)
	}
	bad, err := os.ReadFile("../testdata/hostile/no_marker.wasm")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := validate(ctx, "no_marker", bad); !errors.Is(err, host.ErrInvalidModule) {
		t.Errorf("validating a module without the ABI marker: %v, want ErrInvalidModule", err)
	}
}
