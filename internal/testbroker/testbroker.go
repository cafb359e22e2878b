// Package testbroker finds the RabbitMQ broker of the tests: WASMJOBS_AMQP_URL, as
// scripts/rabbitmq.sh start prints it.
package testbroker

import (
	"os"
	"testing"
)

// URL returns the broker's URL. Without one the test is skipped, except under CI
// (CI=true), where a missing broker fails it.
func URL(t testing.TB) string {
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
