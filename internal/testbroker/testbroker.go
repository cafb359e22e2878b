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

// ClusterURLs returns the comma-separated AMQP URLs of the three-node test cluster,
// WASMJOBS_AMQP_CLUSTER, as scripts/rabbitmq-cluster.sh start prints them. Without them
// the test is skipped, except under CI (CI=true), where they fail it.
func ClusterURLs(t testing.TB) string {
	t.Helper()
	urls := os.Getenv("WASMJOBS_AMQP_CLUSTER")
	if urls == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("WASMJOBS_AMQP_CLUSTER is not set: CI must start the cluster with scripts/rabbitmq-cluster.sh start")
		}
		t.Skip("no cluster: start one with scripts/rabbitmq-cluster.sh start and export WASMJOBS_AMQP_CLUSTER=$(scripts/rabbitmq-cluster.sh url)")
	}
	return urls
}
