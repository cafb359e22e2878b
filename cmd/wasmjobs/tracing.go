package main

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/wasmjobs/wasmjobs/internal/telemetry"
	"github.com/wasmjobs/wasmjobs/server"
)

// tracing builds the tracer provider of --otlp and the OTEL_* environment, nil when
// tracing is off.
func (f *runFlags) tracing(ctx context.Context, log *slog.Logger) (*telemetry.Provider, error) {
	tp, err := telemetry.New(ctx, telemetry.Config{Endpoint: f.otlp, Version: versionString(), Logger: log})
	if err != nil {
		if errors.Is(err, telemetry.ErrProtocol) {
			return nil, usagef("%v", err)
		}
		return nil, err
	}
	if tp == nil {
		return nil, nil
	}
	// The SDK reports each failed export to the process's otel error handler, which
	// prints every one; the provider counts them (wasmjobs_trace_spans_dropped_total)
	// and warns once, so the handler's reports go to the debug log. This binary is
	// the only user of that process-wide handler.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Debug("tracing: the exporter reported an error", "error", err)
	}))
	log.Info("tracing: exporting spans over OTLP", "protocol", tp.Protocol)
	return tp, nil
}

// stopTracing flushes the spans left and stops the exporter, within what is left of
// the drain's budget (--drain-timeout and server.CloseGrace from drainStarted, now
// when zero: serve stopped before its drain):
// an exporter that cannot reach its collector otherwise retries for a minute. What it
// could not send by then is dropped and counted.
func (f *runFlags) stopTracing(tp *telemetry.Provider, log *slog.Logger, drainStarted time.Time) {
	start := drainStarted
	if start.IsZero() {
		start = time.Now()
	}
	ctx, cancel := context.WithDeadline(context.Background(), start.Add(f.drainTimeout+server.CloseGrace))
	defer cancel()
	if err := tp.Shutdown(ctx); err != nil {
		log.Warn("tracing: spans left unsent at exit", "error", err, "dropped_total", tp.DroppedSpans())
	}
}
