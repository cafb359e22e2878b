package rabbitmq

import (
	"errors"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/wasmjobs/wasmjobs/backend"
)

// FuzzDecode: no message makes decode panic; a refusal wraps backend.ErrMalformed; a
// message it accepts encodes back to the same envelope.
func FuzzDecode(f *testing.F) {
	f.Add("01J", "v1 1 3 0 1732950000000000000", "reason", "Trace-Id", "abc", int64(5), []byte("payload"))
	f.Add("", "v1 1 0 0 0", "", "", "", int64(0), []byte{})
	f.Add("m", "v1 0 0 0 0", "", "k", "v", int64(-1), []byte{0xff})
	f.Add("m", "garbage", "r", "", "", int64(1), []byte("x"))
	f.Fuzz(func(t *testing.T, id, job, reason, hk, hv string, num int64, body []byte) {
		h := amqp.Table{hJob: job}
		if reason != "" {
			h[hReason] = reason
		}
		if hk != "" {
			h[hHeaders] = amqp.Table{hk: hv}
		}
		if num < 0 {
			h[hReason] = num // a reason of the wrong type
		}
		d := &amqp.Delivery{MessageId: id, Headers: h, Body: body}
		env, err := decode("q", d)
		if err != nil {
			if !errors.Is(err, backend.ErrMalformed) {
				t.Fatalf("decode error %v does not wrap ErrMalformed", err)
			}
			return
		}
		msg := encode(env)
		again, err := decode("q", &amqp.Delivery{MessageId: msg.MessageId, Headers: msg.Headers, Body: msg.Body, Priority: msg.Priority})
		if err != nil {
			t.Fatalf("re-decoding %+v: %v", env, err)
		}
		if again.ID != env.ID || again.Attempt != env.Attempt || again.MaxAttempts != env.MaxAttempts || again.Defers != env.Defers ||
			!again.EnqueuedAt.Equal(env.EnqueuedAt) || again.Reason != env.Reason || string(again.Payload) != string(env.Payload) ||
			len(again.Headers) != len(env.Headers) {
			t.Fatalf("round trip changed %+v into %+v", env, again)
		}
	})
}

// BenchmarkDecode decodes a delivery as the backend publishes it: every delivery a
// stream hands out goes through decode.
func BenchmarkDecode(b *testing.B) {
	msg := encode(backend.NewEnvelope("q", []byte(`{"to":"ada@example.com"}`)))
	d := &amqp.Delivery{MessageId: msg.MessageId, Headers: msg.Headers, Body: msg.Body, Timestamp: msg.Timestamp}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decode("q", d); err != nil {
			b.Fatal(err)
		}
	}
}
