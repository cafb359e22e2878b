package rabbitmq_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/backendtest"
	"github.com/wasmjobs/wasmjobs/backend/rabbitmq"
)

// brokerURL returns the test broker's URL from WASMJOBS_AMQP_URL. Without it the test
// is skipped, except under CI, where a missing broker fails it.
func brokerURL(t testing.TB) string {
	t.Helper()
	url := os.Getenv("WASMJOBS_AMQP_URL")
	if url == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("WASMJOBS_AMQP_URL is not set: CI must start a broker with scripts/rabbitmq.sh start")
		}
		t.Skip("no broker: start one with scripts/rabbitmq.sh start and export WASMJOBS_AMQP_URL=$(scripts/rabbitmq.sh url)")
	}
	return url
}

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
