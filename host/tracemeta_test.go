package host_test

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/wasmjobs/wasmjobs/host"
	"github.com/wasmjobs/wasmjobs/worker"
)

// underSpan runs fn under a recording span of a real tracer provider (the SDK's, its spans
// kept by the in-memory exporter) and returns the ids of the span as exported, in the
// lowercase hex meta_read gives.
func underSpan(t testing.TB, fn func(ctx context.Context)) (traceID, spanID string) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() {
		if err := tp.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	ctx, span := tp.Tracer("wasmjobs-test").Start(context.Background(), "process conformance")
	fn(ctx)
	span.End()
	spans := exp.GetSpans()
	if len(spans) != 1 {
		t.Fatalf("%d spans exported, want 1", len(spans))
	}
	sc := spans[0].SpanContext
	return sc.TraceID().String(), sc.SpanID().String()
}

// TestMetaReadsTheTraceContext: meta_read's keys 4 and 5 read the trace id and span id
// of the span in the context the host runs the guest under, as 32 and 16 lowercase hex
// digits. With no span, or a span context that is not valid (a no-op tracer's: tracing
// off), and outside a job (wasmjobs_init, here of a fresh instance made under the job's
// traced context), both read as empty: length 0, not -1, the keys are known.
func TestMetaReadsTheTraceContext(t *testing.T) {
	t.Parallel()
	e := newEngine(t)
	meta := loadFile(t, e, "abi/meta", `queue = "mail"`)
	initMeta := loadFile(t, e, "abi/init_meta", `isolation = "fresh"`)
	// abi/meta's lines: id, queue, module, version, trace id, span id, unknown key, the
	// version's length, the trace id's length on an empty buffer, attempt, max_attempts.
	metaOutput := func(job *worker.Job, traceID, spanID, traceLen string) string {
		return job.Envelope.ID + "\nmail\nmeta\n" + meta.Version() + "\n" + traceID + "\n" + spanID + "\n-1\n64\n" + traceLen + "\n1\n3\n"
	}
	t.Run("a recording span", func(t *testing.T) {
		t.Parallel()
		job, handled := jobOf(meta, ""), jobOf(meta, "")
		var got, gotHandled, gotInit string
		traceID, spanID := underSpan(t, func(ctx context.Context) {
			got = string(meta.Run(ctx, job, nil).Output)
			// As a worker runs it: through the handler, under the worker's context.
			gotHandled = string(host.NewHandler(meta, nil).Handle(ctx, handled).Output)
			gotInit = string(initMeta.Run(ctx, jobOf(initMeta, ""), nil).Output)
		})
		if len(traceID) != 32 || len(spanID) != 16 {
			t.Fatalf("span ids %q %q", traceID, spanID)
		}
		if want := metaOutput(job, traceID, spanID, "32"); got != want {
			t.Errorf("output %q, want %q", got, want)
		}
		if want := metaOutput(handled, traceID, spanID, "32"); gotHandled != want {
			t.Errorf("through the handler: output %q, want %q", gotHandled, want)
		}
		if want := "0\n0\n32\n16\n"; gotInit != want {
			t.Errorf("init_meta's output %q, want %q (init's lengths, then the job's)", gotInit, want)
		}
	})
	for _, tc := range []struct {
		name string
		ctx  context.Context
	}{
		{"no span", context.Background()},
		{"a no-op tracer's span", func() context.Context {
			ctx, _ := noop.NewTracerProvider().Tracer("").Start(context.Background(), "process")
			if trace.SpanContextFromContext(ctx).IsValid() {
				t.Fatal("the no-op span has a valid span context")
			}
			return ctx
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			job := jobOf(meta, "")
			if got, want := string(meta.Run(tc.ctx, job, nil).Output), metaOutput(job, "", "", "0"); got != want {
				t.Errorf("output %q, want %q", got, want)
			}
			if got, want := string(initMeta.Run(tc.ctx, jobOf(initMeta, ""), nil).Output), "0\n0\n0\n0\n"; got != want {
				t.Errorf("init_meta's output %q, want %q", got, want)
			}
		})
	}
}
