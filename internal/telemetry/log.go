package telemetry

import (
	"context"
	"log/slog"
)

// LogHandler wraps h so that every record logged with a context that holds a span
// carries trace_id and span_id, joining the log to the trace.
func LogHandler(h slog.Handler) slog.Handler { return logHandler{h} }

type logHandler struct{ slog.Handler }

func (l logHandler) Handle(ctx context.Context, r slog.Record) error {
	if t, s := SpanIDs(ctx); t != "" {
		r = r.Clone()
		r.AddAttrs(slog.String("trace_id", t), slog.String("span_id", s))
	}
	return l.Handler.Handle(ctx, r)
}

func (l logHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return logHandler{l.Handler.WithAttrs(as)}
}

func (l logHandler) WithGroup(name string) slog.Handler {
	return logHandler{l.Handler.WithGroup(name)}
}
