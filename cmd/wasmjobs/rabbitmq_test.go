package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/internal/rigs/testbroker"
)

// brokerURL is the test broker's URL (internal/rigs/testbroker).
func brokerURL(t testing.TB) string { t.Helper(); return testbroker.URL(t) }

// uniqueSuffix returns a short random suffix, in lower case, for the names a test
// makes on a shared broker (queues, streams): no two runs' names meet.
func uniqueSuffix() string { return strings.ToLower(backend.NewID()[20:]) }

// TestRunOnRabbitMQ runs the host on a real broker: jobs enqueued through the API and
// straight to the broker run; dead letters are listed, replayed and purged both ways.
func TestRunOnRabbitMQ(t *testing.T) {
	t.Parallel()
	url := brokerURL(t)
	dir := t.TempDir()
	suffix := uniqueSuffix()
	echo, mail := "echo-"+suffix, "mail-"+suffix
	installModule(t, dir, "abi/echo", echo, "1")
	installModule(t, dir, "abi/dead_letter", mail, "1")
	h := startHost(t, dir, "--backend", url)

	r := wasmjobs(t, "", "enqueue", echo, "straight to the broker", "--backend", url)
	if r.code != 0 {
		t.Fatalf("enqueue --backend: %d %s", r.code, r.stderr)
	}
	id := strings.TrimSpace(r.stdout)
	var st jobState
	waitFor(t, "the job published to the broker to run", func() bool { h.get("/v1/jobs/"+id, &st); return st.State == "succeeded" })
	if st.Output != "straight to the broker" {
		t.Fatalf("job %+v", st)
	}
	r = wasmjobs(t, "", "enqueue", mail, "doomed", "--count", "2", "--server", h.url)
	ids := strings.Fields(r.stdout)
	if r.code != 0 || len(ids) != 2 {
		t.Fatalf("enqueue: %d %q %s", r.code, r.stdout, r.stderr)
	}
	for _, id := range ids {
		waitFor(t, "the dead letter", func() bool { h.get("/v1/jobs/"+id, &st); return st.State == "dead" })
	}
	for _, via := range [][]string{{"--backend", url}, {"--server", h.url}} {
		r = wasmjobs(t, "", append([]string{"dlq", "list", mail}, via...)...)
		if r.code != 0 || strings.Count(r.stdout, "bad input") != 2 {
			t.Fatalf("dlq list %v: %d %q %s", via, r.code, r.stdout, r.stderr)
		}
	}
	r = wasmjobs(t, "", "queues", "list", echo, mail, "--backend", url)
	if r.code != 0 || !strings.Contains(r.stdout, mail+"  -       0        -        -        -         2") {
		t.Fatalf("queues list --backend: %d %q %s", r.code, r.stdout, r.stderr)
	}
	r = wasmjobs(t, "", "dlq", "replay", mail, ids[0], "--backend", url)
	if r.code != 0 || !strings.Contains(r.stdout, "replayed "+ids[0]) {
		t.Fatalf("dlq replay --backend: %d %q %s", r.code, r.stdout, r.stderr)
	}
	waitFor(t, "the replayed job to die again", func() bool {
		r := wasmjobs(t, "", "dlq", "list", mail, "--backend", url)
		return strings.Count(r.stdout, "bad input") == 2
	})
	r = wasmjobs(t, "", "dlq", "purge", mail, "--backend", url)
	if r.code != 0 || !strings.Contains(r.stdout, "purged 2 dead letters of "+mail) {
		t.Fatalf("dlq purge --backend: %d %q %s", r.code, r.stdout, r.stderr)
	}
	h.stop()
	if !strings.Contains(h.log(), "drained: every running job finished and settled") {
		t.Fatalf("no clean drain:\n%s", h.log())
	}
}

// TestAMQPURLs splits and redacts a --backend of several comma-separated node URLs.
func TestAMQPURLs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		spec string
		want []string
	}{
		{"amqp://a:5672/", []string{"amqp://a:5672/"}},
		{"amqp://a:1/,amqp://b:2/,amqps://c:3/vh", []string{"amqp://a:1/", "amqp://b:2/", "amqps://c:3/vh"}},
		{"amqp://u:p,w@a:1/,amqp://b:2/", []string{"amqp://u:p,w@a:1/", "amqp://b:2/"}}, // a comma in a password stays
		{"amqp://a:1/,", []string{"amqp://a:1/,"}},
	} {
		if got := amqpURLs(tc.spec); !slices.Equal(got, tc.want) {
			t.Errorf("amqpURLs(%q) = %q, want %q", tc.spec, got, tc.want)
		}
	}
	if got := redact("amqp://u:secret@a:1/,amqp://u:secret@b:2/"); strings.Contains(got, "secret") || strings.Count(got, "amqp://") != 2 {
		t.Errorf("redact of two URLs = %q", got)
	}
	for _, spec := range []string{"postgres://u:secret@h/db", "postgres://u@h/db?password=secret", "postgresql://u@h/db?sslmode=verify-full&sslpassword=secret"} {
		if got := redact(spec); strings.Contains(got, "secret") || !strings.HasPrefix(got, "postgres") {
			t.Errorf("redact(%q) = %q, want no password in it", spec, got)
		}
	}
}
