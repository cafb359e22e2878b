package rabbitmq_test

import (
	"context"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/backendtest"
	"github.com/wasmjobs/wasmjobs/backend/rabbitmq"
	"github.com/wasmjobs/wasmjobs/internal/rigs/testbroker"
)

// brokerURL is the test broker's URL (internal/rigs/testbroker).
func brokerURL(t testing.TB) string { t.Helper(); return testbroker.URL(t) }

func open(t testing.TB, cfg rabbitmq.Config) *rabbitmq.Backend {
	t.Helper()
	cfg.URL = brokerURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := rabbitmq.Open(ctx, cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return b
}

func TestContract(t *testing.T) {
	t.Parallel()
	brokerURL(t)
	backendtest.Run(t, backendtest.Options{
		New:      func(t *testing.T) backend.Backend { return open(t, rabbitmq.Config{}) },
		Parallel: true,
	})
}
