package host

import (
	"bytes"
	"context"
	"fmt"
	"time"
)

// Check compiles the module name from its bytes and checks its exports and imports
// against the ABI, with no manifest of its own (default limits) and without running
// any of its code: no instance is made, so neither _initialize nor wasmjobs_init runs.
// It is the validation of an untrusted upload; a problem is an error wrapping
// ErrInvalidModule that names it. It returns the module's version.
func (e *Engine) Check(ctx context.Context, name string, wasm []byte) (string, error) {
	invalid := func(format string, args ...any) error {
		return fmt.Errorf("%w %s: %s", ErrInvalidModule, name, fmt.Sprintf(format, args...))
	}
	if !bytes.HasPrefix(wasm, wasmMagic) {
		return "", invalid("not a wasm module (no \\0asm header)")
	}
	compiled, err := e.rt.CompileModule(ctx, wasm)
	if err != nil {
		return "", invalid("%v", err)
	}
	defer compiled.Close(ctx)
	m := &Module{e: e, name: name, version: Version(wasm), compiled: compiled, loadedAt: time.Now(),
		manifest: Manifest{Queue: name, Limits: DefaultLimits()}, closed: make(chan struct{})}
	if js, ok := customSection(wasm, JSSection); ok {
		m.jsSource = append([]byte{}, js...)
	}
	if err := m.validate(); err != nil {
		return "", invalid("%v", err)
	}
	return m.version, nil
}
