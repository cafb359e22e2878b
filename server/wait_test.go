package server_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/memory"
	"github.com/wasmjobs/wasmjobs/server"
)

// noWaits is a backend that keeps no waiting jobs, as RabbitMQ: memory with its
// DependentPublisher hidden.
type noWaits struct{ backend.Backend }

// A module that imports fan-in's functions serves on a backend that keeps waiting
// jobs, and is refused at load, naming the backend, on one that does not.
func TestWaitModulesLoadOnlyWhereWaitsAreKept(t *testing.T) {
	t.Parallel()
	wasm, err := os.ReadFile("../testdata/abi/wait.wasm")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		b       backend.Backend
		serving bool
	}{
		{"memory", memory.New(memory.Config{}), true},
		{"a backend that keeps no waiting jobs", noWaits{memory.New(memory.Config{})}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "fanin.wasm"), wasm, 0o644); err != nil {
				t.Fatal(err)
			}
			s, err := server.New(tc.b, server.Config{Modules: dir, CacheDir: t.TempDir(), BackendName: "nowaits"})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if err := s.Start(ctx); err != nil {
				t.Fatal(err)
			}
			defer s.Stop(ctx)
			deadline := time.Now().Add(30 * time.Second)
			for {
				mods := s.Inspector().Modules()
				if len(mods) == 1 && mods[0].Status != "" {
					m := mods[0]
					if tc.serving && m.Status != "serving" {
						t.Fatalf("on %s the module is %s: %s", tc.name, m.Status, m.Error)
					}
					if !tc.serving && (m.Status != "rejected" || !strings.Contains(m.Error, "nowaits") || !strings.Contains(m.Error, "waiting")) {
						t.Fatalf("on %s the module is %s (%q), want rejected naming the backend and why", tc.name, m.Status, m.Error)
					}
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("no status for the module after 30 s: %+v", mods)
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}
