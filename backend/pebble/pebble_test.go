package pebble_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/backendtest"
	"github.com/wasmjobs/wasmjobs/backend/internal/rig"
	pebblebackend "github.com/wasmjobs/wasmjobs/backend/pebble"
)

// open opens a backend on cfg, failing tb on an error; the caller closes it.
func open(tb testing.TB, cfg pebblebackend.Config) *pebblebackend.Backend {
	tb.Helper()
	b, err := pebblebackend.Open(context.Background(), cfg)
	if err != nil {
		tb.Fatalf("Open(%s): %v", cfg.Dir, err)
	}
	return b
}

// TestContract runs the contract suite on real directories, in real time: every publish
// is fsynced.
func TestContract(t *testing.T) {
	t.Parallel()
	backendtest.Run(t, backendtest.Options{
		New: func(t *testing.T) backend.Backend {
			// A small ballast: dozens of parallel stores need not preallocate 64 MiB each.
			return open(t, pebblebackend.Config{Dir: filepath.Join(t.TempDir(), "data"), BallastSize: 1 << 20})
		},
		Parallel: true,
	})
}

// TestContractSynctest runs the suite again on a memory filesystem in virtual time.
func TestContractSynctest(t *testing.T) {
	t.Parallel()
	backendtest.Run(t, backendtest.Options{
		New: func(t *testing.T) backend.Backend {
			return open(t, pebblebackend.Config{Dir: "/data", FS: vfs.NewMem()})
		},
		Synctest: true,
		Parallel: true,
	})
}

func TestSecondOpenFailsNamingTheDirectory(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "data")
	b := open(t, pebblebackend.Config{Dir: dir})
	_, err := pebblebackend.Open(context.Background(), pebblebackend.Config{Dir: dir})
	if !errors.Is(err, pebblebackend.ErrLocked) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("second Open = %v, want ErrLocked naming %s", err, dir)
	}
	rig.Close(t, b)
	b = open(t, pebblebackend.Config{Dir: dir}) // released by Close
	rig.Close(t, b)
}

func TestJobsSurviveReopen(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		fs := vfs.NewMem()
		cfg := pebblebackend.Config{Dir: "/data", FS: fs}
		b := open(t, cfg)
		q := backend.QueueConfig{Name: "jobs", Prefetch: 4, PriorityLevels: 2}
		rig.Must(t, b.Declare(ctx, q))
		var want []string
		for i, p := range []uint8{0, 2, 1, 2, 0} {
			env := backend.NewEnvelope("jobs", []byte{'a' + byte(i)})
			env.Priority = p
			rig.Must(t, b.Publish(ctx, env, 0))
		}
		want = []string{"b", "d", "c", "a", "e"}
		start := time.Now()
		rig.Must(t, b.Publish(ctx, backend.NewEnvelope("jobs", []byte("late")), time.Hour))
		deferred := backend.NewEnvelope("jobs", []byte("deferred"))
		deferred.Priority = 2
		rig.Must(t, b.Defer(ctx, deferred, 2*time.Hour))
		// One handed out and not settled, one dead letter.
		s, err := b.Consume(ctx, q)
		rig.Must(t, err)
		d := <-s.Deliveries()
		env, _ := d.Envelope()
		if string(env.Payload) != "b" {
			t.Fatalf("first delivery %q, want b", env.Payload)
		}
		d = <-s.Deliveries()
		rig.Must(t, d.DeadLetter(ctx, "poison"))
		rig.Close(t, b)

		b = open(t, cfg)
		defer rig.Close(t, b)
		rec := b.Recovered()
		if rec.Ready != 4 || rec.Delayed != 2 || rec.Dead != 1 || rec.Queues != 1 {
			t.Fatalf("Recovered = %+v, want 4 ready, 2 delayed, 1 dead, 1 queue", rec)
		}
		rig.Must(t, b.Declare(ctx, q))
		want = []string{"b", "c", "a", "e"} // d was dead-lettered
		s, err = b.Consume(ctx, backend.QueueConfig{Name: "jobs", Prefetch: 1})
		rig.Must(t, err)
		for _, w := range want {
			d := <-s.Deliveries()
			env, err := d.Envelope()
			rig.Must(t, err)
			if string(env.Payload) != w {
				t.Fatalf("after reopen got %q, want %q", env.Payload, w)
			}
			rig.Must(t, d.Ack(ctx))
		}
		// The delays hold across the restart: never early.
		for _, w := range []string{"late", "deferred"} {
			d := <-s.Deliveries()
			env, _ := d.Envelope()
			waited := time.Since(start)
			if string(env.Payload) != w {
				t.Fatalf("got %q, want %q", env.Payload, w)
			}
			if (w == "late" && waited < time.Hour) || (w == "deferred" && waited < 2*time.Hour) {
				t.Fatalf("%s came after %v: early", w, waited)
			}
			rig.Must(t, d.Ack(ctx))
		}
		dead, err := b.DeadLetters(ctx, "jobs", 0)
		rig.Must(t, err)
		if len(dead) != 1 || dead[0].Reason != "poison" || string(dead[0].Envelope.Payload) != "d" {
			t.Fatalf("dead letters after reopen = %+v", dead)
		}
		s.Drop()
	})
}
