package pebble

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/internal/rig"
)

// encodeV1 is the first encoding of an envelope, as a store written before concurrency
// keys holds it: the current encoding without the key and the line after the id and
// without the round at the end.
func encodeV1(t *testing.T, env backend.Envelope) []byte {
	t.Helper()
	env.Key, env.Round = "", 0
	v3 := encodeEnvelope(nil, env, 0)
	id := appendString(nil, env.ID)
	rest, ok := bytes.CutPrefix(v3[1:], id)
	if !ok || len(rest) < 3 || rest[0] != 0 || rest[1] != 0 || rest[len(rest)-1] != 0 { // an empty key, line 0, round 0
		t.Fatalf("encoding %x does not start with the id, an empty key and line 0, or end with round 0", v3)
	}
	return append(append([]byte{envelopeV1}, id...), rest[2:len(rest)-1]...)
}

// encodeV2 is the second encoding of an envelope, as a store written before waits
// holds it: the current encoding without the round at the end.
func encodeV2(t *testing.T, env backend.Envelope, line uint64) []byte {
	t.Helper()
	env.Round = 0
	v3 := encodeEnvelope(nil, env, line)
	if v3[len(v3)-1] != 0 {
		t.Fatalf("encoding %x does not end with round 0", v3)
	}
	return append([]byte{envelopeV2}, v3[1:len(v3)-1]...)
}

// next returns the stream's next delivery, failing t after 10 s.
func next(t *testing.T, s backend.Stream) backend.Delivery {
	t.Helper()
	select {
	case d, ok := <-s.Deliveries():
		if !ok {
			t.Fatalf("stream ended: %v", s.Err())
		}
		return d
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery within 10 s")
	}
	panic("unreachable")
}

func sampleEnvelope() backend.Envelope {
	return backend.Envelope{
		ID: "j1", Queue: "q", Payload: []byte("pay"), Headers: map[string]string{"h": "v"}, Priority: 1,
		Attempt: 2, MaxAttempts: 5, Defers: 1, EnqueuedAt: time.Unix(0, 1_700_000_000_000_000_001), Reason: "r",
	}
}

// A value of the first encoding still reads, whole, as a job without a key; the new
// encoding carries the key and the line, which the scan at open reads without the rest.
func TestEnvelopeEncodingsReadBothVersions(t *testing.T) {
	want := sampleEnvelope()
	got, err := decodeEnvelope(encodeV1(t, want))
	if err != nil || got.Key != "" || got.ID != want.ID || got.Queue != want.Queue || string(got.Payload) != "pay" ||
		got.Headers["h"] != "v" || got.Priority != 1 || got.Attempt != 2 || got.MaxAttempts != 5 || got.Defers != 1 ||
		!got.EnqueuedAt.Equal(want.EnqueuedAt) || got.Reason != "r" {
		t.Fatalf("v1 value decodes as %+v, %v; want %+v without a key", got, err, want)
	}
	if h, err := envelopeHead(encodeV1(t, want)); err != nil || h != (head{id: "j1"}) {
		t.Fatalf("head of a v1 value: %+v, %v", h, err)
	}
	want.Key = "account-42"
	v2 := encodeV2(t, want, 77)
	if got, err = decodeEnvelope(v2); err != nil || got.Key != "account-42" || got.Reason != "r" || string(got.Payload) != "pay" || got.Round != 0 {
		t.Fatalf("v2 value decodes as %+v, %v", got, err)
	}
	if h, err := envelopeHead(v2); err != nil || h != (head{id: "j1", key: "account-42", line: 77}) {
		t.Fatalf("head of a v2 value: %+v, %v", h, err)
	}
	want.Round = 3
	v3 := encodeEnvelope(nil, want, 77)
	if v3[0] != envelopeV3 {
		t.Fatalf("new values are of version %d, want %d", v3[0], envelopeV3)
	}
	if got, err = decodeEnvelope(v3); err != nil || got.Key != "account-42" || got.Round != 3 || string(got.Payload) != "pay" {
		t.Fatalf("v3 value decodes as %+v, %v", got, err)
	}
	if h, err := envelopeHead(v3); err != nil || h != (head{id: "j1", key: "account-42", line: 77}) {
		t.Fatalf("head of a v3 value: %+v, %v", h, err)
	}
	if _, err := decodeEnvelope(append([]byte{4}, v3[1:]...)); err == nil {
		t.Fatal("a value of an unknown version decoded")
	}
}

// A store holding a job of the first encoding opens and hands the job out whole.
func TestStoreWithAV1JobOpensAndDeliversIt(t *testing.T) {
	fs := vfs.NewMem()
	b := openMem(t, fs, Config{})
	rig.Must(t, b.Declare(context.Background(), backend.QueueConfig{Name: "q"}))
	want := sampleEnvelope()
	rig.Must(t, b.db.Set(readyKey("q", 0, 1), encodeV1(t, want), nil))
	rig.Close(t, b)

	b = openMem(t, fs, Config{})
	defer rig.Close(t, b)
	s := rig.Consume(t, b, backend.QueueConfig{Name: "q", KeyConcurrency: 1})
	d := next(t, s)
	got, err := d.Envelope()
	if err != nil || got.ID != "j1" || got.Key != "" || string(got.Payload) != "pay" || got.Attempt != 2 || got.Reason != "r" {
		t.Fatalf("the v1 job came back as %+v, %v", got, err)
	}
	rig.Must(t, d.Ack(context.Background()))
}

// After a restart the line of each key is as it was: a job that was retrying when the
// store closed is still ahead of the key's later jobs, though its retry was written
// after them, and a job of the key that waits for a delay keeps its place too.
func TestKeyOrderSurvivesARestart(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	q := backend.QueueConfig{Name: "q", Prefetch: 8, KeyConcurrency: 1}
	b := openMem(t, fs, Config{})
	keyed := func(id, key string) backend.Envelope {
		env := backend.NewEnvelope("q", []byte(id))
		env.ID, env.Key = id, key
		return env
	}
	s := rig.Consume(t, b, q)
	for _, id := range []string{"a1", "a2", "a3"} {
		rig.Must(t, b.Publish(ctx, keyed(id, "a"), 0))
	}
	rig.Must(t, b.Publish(ctx, keyed("b1", "b"), 0))
	d := next(t, s)
	env, err := d.Envelope()
	if err != nil || env.ID != "a1" {
		t.Fatalf("first delivery %s, %v; want a1", env.ID, err)
	}
	env.Attempt++
	rig.Must(t, d.Retry(ctx, env, 0)) // written after a2 and a3, with a later sequence
	rig.Must(t, b.Publish(ctx, keyed("c1", "c"), time.Hour))
	rig.Must(t, b.Publish(ctx, keyed("c2", "c"), 0))
	s.Drop()
	rig.Close(t, b)

	b = openMem(t, fs, Config{})
	defer rig.Close(t, b)
	s = rig.Consume(t, b, q)
	st, err := b.QueueStats(ctx, "q")
	if err != nil || st.KeyWaiting != 3 || st.Pending != 2 || st.Delayed != 1 {
		t.Fatalf("stats after the restart %+v, %v; want a1 and b1 pending, a2, a3 and c2 waiting for their key, c1 delayed", st, err)
	}
	var order []string
	for range 4 { // a1, b1 first (either order), then a2 once a1 is done, a3 once a2 is
		d := next(t, s)
		env, err := d.Envelope()
		rig.Must(t, err)
		order = append(order, env.ID)
		rig.Must(t, d.Ack(ctx))
	}
	if got := order[0] + order[1]; got != "a1b1" && got != "b1a1" {
		t.Fatalf("after the restart %v came first, want a1 and b1", order)
	}
	if order[2] != "a2" || order[3] != "a3" {
		t.Fatalf("after the restart key a ran %v, want a1, a2, a3", order)
	}
	if st, _ := b.QueueStats(ctx, "q"); st.KeyWaiting != 1 || st.Pending != 0 {
		t.Fatalf("c2 should still wait behind the delayed c1: %+v", st)
	}
}

// The bound on each key is stored with the queue's declaration: after a restart it
// holds before anyone declares the queue again, and a new bound declared since is the
// one kept. A declaration of the first encoding reads as no bound.
func TestKeyConcurrencyIsKeptWithTheDeclaration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fs := vfs.NewMem()
	b := openMem(t, fs, Config{})
	rig.Must(t, b.Declare(ctx, backend.QueueConfig{Name: "q", KeyConcurrency: 2}))
	rig.Must(t, b.Declare(ctx, backend.QueueConfig{Name: "q", KeyConcurrency: 1}))
	for _, id := range []string{"a", "b"} {
		rig.Must(t, b.Publish(ctx, backend.Envelope{ID: id, Queue: "q", Key: "k"}, 0))
	}
	rig.Must(t, b.Close(ctx))
	b = openMem(t, fs, Config{})
	defer b.Close(ctx)
	st, err := b.QueueStats(ctx, "q")
	if err != nil || st.KeyWaiting != 1 || st.Pending != 1 {
		t.Fatalf("after a restart with no declare: %+v, %v; want one pending and one waiting for its key", st, err)
	}
	if levels, limit, err := decodeQueue([]byte{queueV1, 3}); err != nil || levels != 3 || limit != 0 {
		t.Fatalf("a v1 declaration decodes as %d levels, bound %d, %v", levels, limit, err)
	}
	if _, _, err := decodeQueue(append(encodeQueue(1, 5), 0)); err == nil {
		t.Fatal("a declaration with bytes left over decoded")
	}
}
