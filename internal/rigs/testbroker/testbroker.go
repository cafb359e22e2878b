// Package testbroker finds the RabbitMQ broker of the tests (WASMJOBS_AMQP_URL, as
// scripts/rabbitmq.sh start prints it) and works it behind the backends' back for
// them: a reader of a queue, a proxy to cut, the deletion of a test's queues. It finds
// the tests' PostgreSQL too (WASMJOBS_PG_URL, as scripts/postgres.sh start prints it).
package testbroker

import (
	neturl "net/url"
	"os"
	"testing"
)

// URL returns the broker's URL. Without one the test is skipped, except under CI
// (CI=true), where a missing broker fails it.
func URL(t testing.TB) string {
	t.Helper()
	return fromEnv(t, "WASMJOBS_AMQP_URL", "CI must start a broker with scripts/rabbitmq.sh start",
		"no broker: start one with scripts/rabbitmq.sh start and export WASMJOBS_AMQP_URL=$(scripts/rabbitmq.sh url)")
}

// ClusterURLs returns the comma-separated AMQP URLs of the three-node test cluster,
// WASMJOBS_AMQP_CLUSTER, as scripts/rabbitmq-cluster.sh start prints them. Without them
// the test is skipped, except under CI (CI=true), where they fail it.
func ClusterURLs(t testing.TB) string {
	t.Helper()
	return fromEnv(t, "WASMJOBS_AMQP_CLUSTER", "CI must start the cluster with scripts/rabbitmq-cluster.sh start",
		"no cluster: start one with scripts/rabbitmq-cluster.sh start and export WASMJOBS_AMQP_CLUSTER=$(scripts/rabbitmq-cluster.sh url)")
}

// PostgresURL returns the tests' PostgreSQL URL, WASMJOBS_PG_URL. Without one the test
// is skipped, except under CI (CI=true), where a missing database fails it.
func PostgresURL(t testing.TB) string {
	t.Helper()
	return fromEnv(t, "WASMJOBS_PG_URL", "CI must start PostgreSQL with scripts/postgres.sh start",
		"no PostgreSQL: start one with scripts/postgres.sh start and export WASMJOBS_PG_URL=$(scripts/postgres.sh url)")
}

// RestartOptIn is the variable that lets a test restart the broker: it must be 1.
const RestartOptIn = "WASMJOBS_RABBIT_RESTART"

// RestartableURL returns the broker's URL for a test that restarts it with
// scripts/rabbitmq.sh restart. A restart cuts every connection of everyone on that
// broker, and the script restarts whichever broker its defaults (or the
// WASMJOBS_RABBIT_* variables) name, a shared one too: so the test runs only when
// WASMJOBS_RABBIT_RESTART=1 says the broker is the caller's own. Without the opt-in it
// is skipped, except under CI (CI=true), where nothing may be skipped and the missing
// opt-in fails it (make test sets it for the step that runs these tests alone).
func RestartableURL(t testing.TB) string {
	t.Helper()
	if os.Getenv(RestartOptIn) != "1" {
		skipUnlessCI(t, RestartOptIn+"=1 is not set: CI runs the broker-restart tests (make test sets it for their step)",
			"restarts the broker: runs only with "+RestartOptIn+"=1, on a broker of your own (see scripts/rabbitmq.sh)")
	}
	url := URL(t)
	// The script restarts the broker on WASMJOBS_RABBIT_PORT (default 5682): a URL on
	// another port would have the test restart one broker and watch another.
	port := os.Getenv("WASMJOBS_RABBIT_PORT")
	if port == "" {
		port = "5682"
	}
	if u, err := neturl.Parse(url); err != nil || u.Port() != port {
		t.Fatalf("WASMJOBS_AMQP_URL %q is not the broker scripts/rabbitmq.sh restarts (port %s, from WASMJOBS_RABBIT_PORT)", url, port)
	}
	return url
}

// fromEnv returns the variable name; when it is empty the test is skipped with skip,
// except under CI, where it fails, saying ciMust.
func fromEnv(t testing.TB, name, ciMust, skip string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		skipUnlessCI(t, name+" is not set: "+ciMust, skip)
	}
	return v
}

// skipUnlessCI skips the test with skip, except under CI (CI=true), where nothing may
// be skipped: there it fails the test with fatal.
func skipUnlessCI(t testing.TB, fatal, skip string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatal(fatal)
	}
	t.Skip(skip)
}
