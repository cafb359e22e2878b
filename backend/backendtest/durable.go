package backendtest

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
)

func testBatchPublish(t *testing.T, h *harness) {
	bp := implements[backend.BatchPublisher](t, h)
	q := h.declare(t, 16, 0)
	nowhere := h.prefix + "-nowhere"
	bad := []backend.Publication{{Envelope: job(q, "x1")}, {Envelope: backend.NewEnvelope(nowhere, nil)}, {Envelope: job(q, "x2")}}
	if err := bp.PublishBatch(h.ctx(), bad); !errors.Is(err, backend.ErrUnknownQueue) || !strings.Contains(err.Error(), nowhere) {
		t.Fatalf("PublishBatch with a job to an undeclared queue: %v, want ErrUnknownQueue naming it", err)
	}
	if err := bp.PublishBatch(h.ctx(), nil); err != nil {
		t.Fatalf("PublishBatch(nil): %v", err)
	}
	good := []backend.Publication{{Envelope: job(q, "a")}, {Envelope: job(q, "late"), Delay: 200 * time.Millisecond}, {Envelope: job(q, "b")}}
	start := time.Now()
	if err := bp.PublishBatch(h.ctx(), good); err != nil {
		t.Fatalf("PublishBatch: %v", err)
	}
	// Nothing of the failed batch, the good one in order, its delayed job not early.
	got := h.drainInOrder(t, q, 3)
	if strings.Join(got, " ") != "a b late" {
		t.Fatalf("delivered %q, want [a b late]: a failed batch must publish nothing", got)
	}
	if waited := time.Since(start); waited < 200*time.Millisecond {
		t.Fatalf("the delayed job of the batch came after %v: early", waited)
	}
}

func testAckWithChildren(t *testing.T, h *harness) {
	parents := h.declare(t, 4, 0)
	kids := h.declare(t, 16, 0)
	h.publish(t, job(parents, "parent"), 0)
	s := h.consume(t, parents)
	d, env := h.atomicDelivery(t, s)
	nowhere := h.prefix + "-nowhere"
	// A child that cannot be published fails the whole settle: no child, no ack.
	bad := []backend.Publication{{Envelope: job(kids, "k0")}, {Envelope: backend.NewEnvelope(nowhere, nil)}}
	if err := d.AckWith(h.ctx(), bad, nil); !errors.Is(err, backend.ErrUnknownQueue) {
		t.Fatalf("AckWith a child to an undeclared queue: %v, want ErrUnknownQueue", err)
	}
	ks := h.consume(t, kids)
	h.expectNothing(t, kids, ks)
	// A child whose id the backend holds is not published again (the parent itself
	// among them), and an id repeated within the batch is published once.
	held := job(kids, "held")
	h.publish(t, held, 0)
	again := held
	again.Payload = []byte("held-again")
	k1 := job(kids, "k1")
	children := []backend.Publication{
		{Envelope: k1},
		{Envelope: job(kids, "k2")},
		{Envelope: job(kids, "k3"), Delay: 100 * time.Millisecond},
		{Envelope: again},
		{Envelope: k1},
		{Envelope: env},
	}
	if err := d.AckWith(h.ctx(), children, nil); err != nil {
		t.Fatalf("AckWith after the failed one (the delivery must have stayed unsettled): %v", err)
	}
	if err := d.Ack(h.ctx()); !errors.Is(err, backend.ErrAlreadySettled) {
		t.Fatalf("Ack after AckWith: %v, want ErrAlreadySettled", err)
	}
	var got []string
	for range 4 {
		kd, kenv := h.receive(t, ks)
		got = append(got, string(kenv.Payload))
		mustSettle(t, "Ack", kd.Ack(h.ctx()))
	}
	slices.Sort(got)
	if strings.Join(got, " ") != "held k1 k2 k3" {
		t.Fatalf("children delivered: %q, want held k1 k2 k3 (the held id and the repeat dropped)", got)
	}
	h.expectNothing(t, kids, ks)
	s.Drop()
	h.expectNothing(t, parents, h.consume(t, parents)) // the parent was acknowledged, not put again
}

func testRepeatPublishDropped(t *testing.T, h *harness) {
	implements[backend.JobRecordReader](t, h) // backends that keep records know the ids they hold
	q := h.declare(t, 8, 0)
	env := job(q, "once")
	h.publish(t, env, 0)
	h.publish(t, env, 0)         // held: dropped, reported as success
	h.publish(t, env, time.Hour) // held: dropped, even with a delay
	if bp, ok := h.b.(backend.BatchPublisher); ok {
		if err := bp.PublishBatch(h.ctx(), []backend.Publication{{Envelope: env}, {Envelope: env}}); err != nil {
			t.Fatalf("PublishBatch of a held id: %v", err)
		}
	}
	if st := h.stats(t, q); st.Pending != 1 || st.Delayed != 0 {
		t.Fatalf("stats after repeat publishes of a held id %+v, want 1 pending and nothing delayed", st)
	}
	s := h.consume(t, q)
	d, got := h.receive(t, s)
	if got.ID != env.ID {
		t.Fatalf("got %s, want %s", got.ID, env.ID)
	}
	h.publish(t, env, 0) // handed out, still held: dropped
	mustSettle(t, "Ack", d.Ack(h.ctx()))
	h.expectNothing(t, q, s)
	h.publish(t, env, 0) // gone from the backend: published again
	d, got = h.receive(t, s)
	if got.ID != env.ID {
		t.Fatalf("got %s, want %s", got.ID, env.ID)
	}
	mustSettle(t, "Ack", d.Ack(h.ctx()))
	h.expectNothing(t, q, s)
}
