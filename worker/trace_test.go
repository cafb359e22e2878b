package worker_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/internal/telemetry"
	"github.com/wasmjobs/wasmjobs/worker"
)

// spanRecorder is a real SDK tracer provider whose spans are kept in memory.
func spanRecorder(t *testing.T) (*sdktrace.TracerProvider, *tracetest.InMemoryExporter) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	return tp, exp
}

func attr(s tracetest.SpanStub, key string) (string, bool) {
	for _, a := range s.Attributes {
		if string(a.Key) == key {
			return a.Value.Emit(), true
		}
	}
	return "", false
}

// The process span of each run is a root of its own trace that links to the enqueue's
// span; the settle and each child's send are its children, and the child's process span
// links back to that send (and to nothing else). A retry, a defer and an ack are
// attempts 1, 2 and 2.
func TestTraceFollowsTheJob(t *testing.T) {
	for _, child := range []bool{false, true} {
		name := map[bool]string{false: "link", true: "child"}[child]
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tp, exp := spanRecorder(t)
				var runs runLog
				h := runs.handler(func(ctx context.Context, j *worker.Job) worker.Result {
					if got := trace.SpanContextFromContext(ctx); !got.IsValid() || !got.Equal(j.SpanContext()) {
						t.Errorf("the handler's context holds span %v, want the process span %v", got, j.SpanContext())
					}
					switch len(runs.all()) {
					case 1:
						return worker.Result{Outcome: worker.Retry, Delay: time.Millisecond}
					case 2:
						return worker.Result{Outcome: worker.Defer, Delay: time.Millisecond}
					}
					// A handler cannot make its child look replayed: the header goes.
					return worker.Result{Children: []worker.Child{{Queue: "kids", Payload: []byte("k"),
						Headers: map[string]string{telemetry.ReplayParentHeader: "00-0102030405060708090a0b0c0d0e0f10-0102030405060708-01"}}}}
				})
				r := newRig(t, worker.Config{TracerProvider: tp},
					worker.Queue{Name: "q", Handler: h, TraceChild: child},
					worker.Queue{Name: "kids", Handler: worker.HandlerFunc(func(context.Context, *worker.Job) worker.Result { return worker.Result{} })})
				caller := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled, Remote: true})
				sent := r.publish("q", "p", func(e *backend.Envelope) {
					e.Headers = telemetry.Inject(trace.ContextWithSpanContext(context.Background(), caller), e.Headers)
				})
				for i := 0; r.eventsOf(worker.EventSettled) < 4 && i < 100000; i++ {
					time.Sleep(time.Millisecond)
				}
				synctest.Wait()
				spans := exp.GetSpans()
				var procs, settles, sends []tracetest.SpanStub
				var kid tracetest.SpanStub
				for _, s := range spans {
					switch s.Name {
					case "process q":
						procs = append(procs, s)
					case "settle q":
						settles = append(settles, s)
					case "send kids":
						sends = append(sends, s)
					case "process kids":
						kid = s
					}
				}
				if len(procs) != 3 || len(settles) != 3 || len(sends) != 1 || kid.Name == "" {
					t.Fatalf("spans: %d process, %d settle, %d send, child process %q; want 3, 3, 1 and one", len(procs), len(settles), len(sends), kid.Name)
				}
				wantAttempts := []string{"1", "2", "2"}
				wantSettles := []string{"retry", "defer", "ack"}
				for i, p := range procs {
					if p.SpanKind != trace.SpanKindConsumer {
						t.Errorf("process %d: kind %v", i, p.SpanKind)
					}
					if a, _ := attr(p, "wasmjobs.attempt"); a != wantAttempts[i] {
						t.Errorf("process %d: attempt %s, want %s", i, a, wantAttempts[i])
					}
					if a, _ := attr(p, "wasmjobs.settle"); a != wantSettles[i] {
						t.Errorf("process %d: settle %s, want %s", i, a, wantSettles[i])
					}
					if a, _ := attr(p, "messaging.message.id"); a != sent.ID {
						t.Errorf("process %d: message id %s, want %s", i, a, sent.ID)
					}
					if a, _ := attr(p, "messaging.operation.type"); a != "process" {
						t.Errorf("process %d: operation type %s", i, a)
					}
					if child {
						if p.Parent.SpanID() != caller.SpanID() || p.SpanContext.TraceID() != caller.TraceID() || len(p.Links) != 0 {
							t.Errorf("process %d: parent %v, %d links; want a child of the enqueue's span, no link", i, p.Parent.SpanID(), len(p.Links))
						}
					} else {
						if p.Parent.IsValid() || p.SpanContext.TraceID() == caller.TraceID() {
							t.Errorf("process %d: parent %v, trace %v; want a root of a trace of its own", i, p.Parent, p.SpanContext.TraceID())
						}
						if len(p.Links) != 1 || p.Links[0].SpanContext.SpanID() != caller.SpanID() || p.Links[0].SpanContext.TraceID() != caller.TraceID() {
							t.Errorf("process %d: links %+v, want one to the enqueue's span", i, p.Links)
						}
					}
					if settles[i].Parent.SpanID() != p.SpanContext.SpanID() {
						t.Errorf("settle %d is not the child of its process span", i)
					}
					if a, _ := attr(settles[i], "messaging.operation.name"); a != wantSettles[i] {
						t.Errorf("settle %d: operation name %s, want %s", i, a, wantSettles[i])
					}
				}
				if sends[0].Parent.SpanID() != procs[2].SpanContext.SpanID() || sends[0].SpanKind != trace.SpanKindProducer {
					t.Errorf("the child's send span: parent %v kind %v, want the third process span, producer", sends[0].Parent.SpanID(), sends[0].SpanKind)
				}
				if len(kid.Links) != 1 || kid.Links[0].SpanContext.SpanID() != sends[0].SpanContext.SpanID() {
					t.Errorf("the child's process span links %+v, want its send span %v", kid.Links, sends[0].SpanContext.SpanID())
				}
			})
		})
	}
}

// Without a tracer provider no span is made, and a child that came with reserved
// trace headers (which only the worker may set) loses them.
func TestTraceOffMakesNoSpan(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		got := make(chan backend.Envelope, 2)
		forged := map[string]string{telemetry.ParentHeader: "00-0102030405060708090a0b0c0d0e0f10-0102030405060708-01",
			telemetry.StateHeader: "k=v", telemetry.ReplayParentHeader: "00-0102030405060708090a0b0c0d0e0f10-0102030405060708-01", "x": "y"}
		h := worker.HandlerFunc(func(ctx context.Context, j *worker.Job) worker.Result {
			if trace.SpanContextFromContext(ctx).IsValid() || j.SpanContext().IsValid() {
				t.Errorf("a span without a tracer provider")
			}
			if j.Envelope.Queue == "q" {
				return worker.Result{Children: []worker.Child{{Queue: "kids", Payload: []byte("k"), Headers: forged}}}
			}
			got <- j.Envelope
			return worker.Result{}
		})
		r := newRig(t, worker.Config{}, worker.Queue{Name: "q", Handler: h}, worker.Queue{Name: "kids", Handler: h})
		r.publish("q", "p")
		env := <-got
		if len(env.Headers) != 1 || env.Headers["x"] != "y" {
			t.Fatalf("the child's headers %v: want the forged trace headers gone, the rest kept", env.Headers)
		}
	})
}

// A child's send span ends when the child is published, or not: a child to a queue
// that does not exist fails its parent's settle, and its send span ends with that
// error. The child staged before it is an error too where the settle is atomic (it
// was not published either), and no error where children are published one by one
// (it was sent). The retried parent's child is sent, and its span ends without one.
func TestTraceChildSendShowsThePublish(t *testing.T) {
	for _, c := range []struct {
		name       string
		wrap       func(backend.Backend) backend.Backend
		firstError bool // the first attempt's child published before the failing one
		settles    int
	}{
		{"atomic", nil, true, 3},
		{"one by one", plainDeliveries, false, 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tp, exp := spanRecorder(t)
				var runs runLog
				h := runs.handler(func(ctx context.Context, j *worker.Job) worker.Result {
					if j.Attempt == 1 {
						return worker.Result{Children: []worker.Child{{Queue: "kids", Payload: []byte("k")}, {Queue: "nowhere", Payload: []byte("k")}}}
					}
					return worker.Result{Children: []worker.Child{{Queue: "kids", Payload: []byte("k2")}}}
				})
				r := newRigOn(t, c.wrap, worker.Config{TracerProvider: tp}, worker.Queue{Name: "q", Handler: h},
					worker.Queue{Name: "kids", Handler: worker.HandlerFunc(func(context.Context, *worker.Job) worker.Result { return worker.Result{} })})
				r.publish("q", "p")
				for i := 0; r.eventsOf(worker.EventSettled) < c.settles && i < 1_000_000; i++ {
					time.Sleep(time.Millisecond)
				}
				synctest.Wait()
				var failed, sent []tracetest.SpanStub
				for _, s := range exp.GetSpans() {
					switch s.Name {
					case "send nowhere":
						failed = append(failed, s)
					case "send kids":
						sent = append(sent, s)
					}
				}
				if len(failed) != 1 || failed[0].Status.Code != codes.Error || !strings.Contains(failed[0].Status.Description, "unknown queue") {
					t.Errorf("the unpublishable child's send spans %+v; want one, its status the publish's error", failed)
				}
				slices.SortFunc(sent, func(a, b tracetest.SpanStub) int { return a.StartTime.Compare(b.StartTime) })
				if len(sent) != 2 || (sent[0].Status.Code == codes.Error) != c.firstError || sent[1].Status.Code == codes.Error {
					t.Errorf("the other children's send spans %+v; want two, the first an error: %v, the second not", sent, c.firstError)
				}
			})
		})
	}
}

// A message that cannot be decoded has a process span too, an error saying why, with
// its settle (the dead letter) inside it.
func TestTraceUndecodableMessage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tp, exp := spanRecorder(t)
		r := newRig(t, worker.Config{TracerProvider: tp}, worker.Queue{Name: "q", Handler: worker.HandlerFunc(func(context.Context, *worker.Job) worker.Result { return worker.Result{} })})
		if err := r.b.InjectMalformed(context.Background(), "q", []byte("garbage"), "attempt header is not a number"); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		var proc, settle tracetest.SpanStub
		for _, s := range exp.GetSpans() {
			switch s.Name {
			case "process q":
				proc = s
			case "settle q":
				settle = s
			}
		}
		if proc.Status.Code != codes.Error || !strings.Contains(proc.Status.Description, "attempt header is not a number") {
			t.Fatalf("the undecodable message's process span %+v; want an error naming what is malformed", proc)
		}
		if a, _ := attr(proc, "wasmjobs.settle"); a != worker.DeadLetter.String() || settle.Parent.SpanID() != proc.SpanContext.SpanID() {
			t.Errorf("process span settled %q, settle span under %v; want %s, under the process span", a, settle.Parent.SpanID(), worker.DeadLetter)
		}
	})
}
