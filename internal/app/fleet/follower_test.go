package fleet

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/internal/rigs/testbroker"
)

// testStream returns a stream of the test's own on the test broker and a connection to
// the broker (not through any proxy) for the test's pushes; both go with the test.
func testStream(t *testing.T) (string, *amqp.Connection) {
	t.Helper()
	url := testbroker.URL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := Dial(ctx, []string{url})
	if err != nil {
		t.Fatal(err)
	}
	stream := "ft-" + strings.ToLower(backend.NewID()[18:])
	t.Cleanup(func() {
		DeleteStream(conn, stream)
		conn.Close()
	})
	return stream, conn
}

// push publishes a version of module name with wasm as its body.
func push(t *testing.T, conn *amqp.Connection, stream, name, wasm string) Push {
	t.Helper()
	p := Push{Kind: KindModule, Name: name, Version: wasm, Wasm: []byte(wasm), PushedAt: time.Now()}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := Publish(ctx, conn, stream, p); err != nil {
		t.Fatalf("push %s: %v", name, err)
	}
	return p
}

// eventually fails the test unless cond holds within 15 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 15 s", what)
		}
	}
}

// holds reports whether dir holds module name with wasm.
func holds(dir, name, wasm string) bool {
	b, err := os.ReadFile(filepath.Join(dir, name+".wasm"))
	return err == nil && string(b) == wasm
}

// startFollower starts a follower of stream writing into a directory of the test's
// own; it is closed with the test.
func startFollower(t *testing.T, cfg Config) *Follower {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	// Start's context is the follower's lifetime: Close ends it.
	f, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		f.Close(ctx)
	})
	return f
}

// TestFollowerGoesOnAfterACut: the follower's connection is cut (its first node, a
// proxy, stops answering for good); it reconnects to the next node and reads on from
// where it stopped: a module pushed after the cut, and a newer version of one pushed
// before it, reach its directory.
func TestFollowerGoesOnAfterACut(t *testing.T) {
	t.Parallel()
	url := testbroker.URL(t)
	stream, conn := testStream(t)
	px := testbroker.NewProxy(t, url)
	dir := t.TempDir()
	startFollower(t, Config{URLs: []string{px.URL(url), url}, Stream: stream, Dir: dir, HostID: "h"})
	push(t, conn, stream, "before", "v1")
	eventually(t, "the module pushed before the cut written", func() bool { return holds(dir, "before", "v1") })

	px.Cut()
	push(t, conn, stream, "after", "v1")
	push(t, conn, stream, "before", "v2")
	eventually(t, "the module pushed after the cut written", func() bool { return holds(dir, "after", "v1") })
	eventually(t, "the newer version pushed after the cut written", func() bool { return holds(dir, "before", "v2") })
}

// copies counts the copies of p (same name, same push time) in stream, reading it up
// to a marker of its own.
func copies(t *testing.T, conn *amqp.Connection, stream string, p Push) int {
	t.Helper()
	ch, msgs, err := consume(conn, stream, "first")
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	id := newMarker()
	if err := publish(ctx, conn, stream, markerMessage(id)); err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		select {
		case <-ctx.Done():
			t.Fatalf("reading %s up to a marker: %v", stream, ctx.Err())
		case d, ok := <-msgs:
			if !ok {
				t.Fatalf("reading %s: the channel closed", stream)
			}
			d.Ack(false)
			if m, _ := d.Headers[hMarker].(string); m == id {
				return n
			}
			if kind, _ := d.Headers[hKind].(string); kind != KindModule {
				continue
			}
			if got, err := decodePush(d); err == nil && got.Name == p.Name && got.PushedAt.Equal(p.PushedAt) {
				n++
			}
		}
	}
}

// TestFollowerRepublishesOldModules: a module whose newest copy in the stream is older
// than Republish is published again (same push, a new copy), so that retention never
// drops it; and only once per Republish, not at every check.
func TestFollowerRepublishesOldModules(t *testing.T) {
	t.Parallel()
	stream, conn := testStream(t)
	dir := t.TempDir()
	const every = time.Second
	p := push(t, conn, stream, "kept", "v1")
	startFollower(t, Config{URLs: []string{testbroker.URL(t)}, Stream: stream, Dir: dir, HostID: "h", Republish: every})
	if !holds(dir, "kept", "v1") {
		t.Fatal("the pushed module is not written at Start")
	}
	started := time.Now()
	eventually(t, "a second copy of the module in the stream", func() bool { return copies(t, conn, stream, p) >= 2 })
	time.Sleep(3 * every)
	// One copy per Republish (plus this host's jitter, up to a quarter of it) at most,
	// from the push on.
	elapsed := time.Since(p.PushedAt)
	if n, most := copies(t, conn, stream, p), 1+int(elapsed/every)+1; n > most {
		t.Errorf("%d copies of the module %v after the push (re-publish every %v, started %v ago): want at most %d",
			n, elapsed.Round(time.Millisecond), every, time.Since(started).Round(time.Millisecond), most)
	}
	if !holds(dir, "kept", "v1") {
		t.Error("the re-published module is no longer in the directory")
	}
}

// TestFollowerEndsOnAFrozenBroker: with the broker hanging (connection open, nothing
// answered) while the follower sends a heartbeat, Close still ends the follower's
// goroutine within its context and the close timeout, not at amqp091-go's heartbeat
// check 30 s later.
func TestFollowerEndsOnAFrozenBroker(t *testing.T) {
	t.Parallel()
	url := testbroker.URL(t)
	stream, _ := testStream(t)
	px := testbroker.NewProxy(t, url)
	f := startFollower(t, Config{URLs: []string{px.URL(url)}, Stream: stream, HostID: "h", Heartbeat: 10 * time.Millisecond})
	px.Freeze()
	time.Sleep(200 * time.Millisecond) // a heartbeat is waiting for the broker
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	f.Close(ctx)
	limit := 200*time.Millisecond + closeTimeout + 2*time.Second
	select {
	case <-f.done:
	case <-time.After(limit):
		t.Fatalf("the follower's goroutine still runs %v after Close on a frozen broker", limit)
	}
}

// TestDialEndsWithItsContext: Dial on a broker that takes the connection and never
// answers the handshake returns when its context ends, not at the 10 s handshake
// deadline: a follower reconnecting to a hanging node must not hold up its Close.
func TestDialEndsWithItsContext(t *testing.T) {
	t.Parallel()
	px := testbroker.NewProxy(t, testbroker.URL(t))
	px.Freeze()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	started := time.Now()
	conn, err := Dial(ctx, []string{px.URL(testbroker.URL(t))})
	if err == nil {
		conn.Close()
		t.Fatal("Dial through a frozen broker succeeded")
	}
	if took := time.Since(started); took > 2*time.Second {
		t.Fatalf("Dial with a 200ms context on a frozen broker took %v: %v", took, err)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Dial: %v, want the context's deadline", err)
	}
}
