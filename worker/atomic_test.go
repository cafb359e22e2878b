package worker_test

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/wasmjobs/wasmjobs/backend"
	pebblebackend "github.com/wasmjobs/wasmjobs/backend/pebble"
	"github.com/wasmjobs/wasmjobs/worker"
)

// On a backend whose deliveries settle atomically, an ack commits its children and the
// job's record in one write; a child that cannot be published fails the job the retry
// way, and no child is left behind.
func TestAtomicAckWithChildren(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		b, err := pebblebackend.Open(ctx, pebblebackend.Config{Dir: "/data", FS: vfs.NewMem()})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close(ctx)
		kids := make(chan string, 10)
		parent := worker.HandlerFunc(func(ctx context.Context, j *worker.Job) worker.Result {
			if string(j.Envelope.Payload) == "bad" && j.Attempt == 1 {
				return worker.Result{Children: []worker.Child{{Queue: "kids", Payload: []byte("orphan")}, {Queue: "nowhere"}}}
			}
			return worker.Result{Output: []byte("done"), Handler: "mod", Version: "v1", Logs: []string{"INFO one", "WARN two"},
				Children: []worker.Child{{Queue: "kids", Payload: []byte("k1")}, {Queue: "kids", Payload: []byte("k2"), Delay: time.Second}}}
		})
		child := worker.HandlerFunc(func(ctx context.Context, j *worker.Job) worker.Result {
			kids <- string(j.Envelope.Payload)
			return worker.Result{}
		})
		w := worker.New(b, worker.Config{Jitter: noJitter})
		for _, q := range []worker.Queue{{Name: "parents", Handler: parent}, {Name: "kids", Handler: child}} {
			if err := w.Register(ctx, q); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Start(ctx); err != nil {
			t.Fatal(err)
		}
		good, bad := backend.NewEnvelope("parents", []byte("good")), backend.NewEnvelope("parents", []byte("bad"))
		for _, env := range []backend.Envelope{good, bad} {
			if err := b.Publish(ctx, env, 0); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(time.Minute)
		stop, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if err := w.Stop(stop); err != nil {
			t.Fatal(err)
		}
		close(kids)
		var got []string
		for k := range kids {
			got = append(got, k)
		}
		// good: k1 k2; bad: its first run's children never published, its retry's are.
		if n := strings.Count(strings.Join(got, " "), "k"); n != 4 || strings.Contains(strings.Join(got, " "), "orphan") {
			t.Fatalf("children run: %q, want k1 and k2 twice and no orphan", got)
		}
		rec, err := b.JobRecord(ctx, good.ID)
		if err != nil {
			t.Fatal(err)
		}
		if rec.State != backend.JobSucceeded || len(rec.Children) != 2 || string(rec.Output) != "done" || rec.Module != "mod" || rec.ModuleVersion != "v1" ||
			strings.Join(rec.Logs, "|") != "INFO one|WARN two" {
			t.Fatalf("record of the parent = %+v", rec)
		}
		rec, err = b.JobRecord(ctx, bad.ID)
		if err != nil {
			t.Fatal(err)
		}
		if rec.State != backend.JobSucceeded || rec.Attempt != 2 {
			t.Fatalf("record of the retried parent = %+v, want succeeded at attempt 2", rec)
		}
	})
}
