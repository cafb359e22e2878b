package outbound

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
)

// knownMethods are the methods the HTTP conventions name a span by; any other is
// "_OTHER" (its own name kept in http.request.method_original), lest a guest's
// made-up methods make as many span names.
var knownMethods = map[string]bool{
	http.MethodGet: true, http.MethodHead: true, http.MethodPost: true, http.MethodPut: true,
	http.MethodPatch: true, http.MethodDelete: true, http.MethodOptions: true, "QUERY": true,
}

// startSpan starts the Client span of a request to u under ctx's span (the guest's
// run), from start, and returns ctx holding it; ctx and nil when tracing is off. The
// URL is recorded as Redact gives it: no user, query or fragment.
func (c *Client) startSpan(ctx context.Context, method string, u *url.URL, start time.Time) (context.Context, trace.Span) {
	if c.tracer == nil {
		return ctx, nil
	}
	name := method
	attrs := make([]attribute.KeyValue, 0, 5)
	if knownMethods[method] {
		attrs = append(attrs, semconv.HTTPRequestMethodKey.String(method))
	} else {
		name = "HTTP"
		attrs = append(attrs, semconv.HTTPRequestMethodOther, semconv.HTTPRequestMethodOriginal(method))
	}
	attrs = append(attrs, semconv.URLFull(Redact(u.String())), semconv.ServerAddress(strings.ToLower(u.Hostname())))
	if port, err := strconv.Atoi(portOf(u)); err == nil {
		attrs = append(attrs, semconv.ServerPort(port))
	}
	return c.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithTimestamp(start), trace.WithAttributes(attrs...))
}

// endSpan ends a request's span as its record says, at the request's end (rec's
// Duration after start): the status it got, and how it failed, error.type being the
// failure's label or, for a 4xx or 5xx, the status. msg says what went wrong, without
// secrets (an *Error's text).
func endSpan(span trace.Span, rec CallRecord, msg string, start time.Time) {
	if rec.Status != 0 {
		span.SetAttributes(semconv.HTTPResponseStatusCode(rec.Status))
	}
	switch {
	case rec.Error != "":
		span.SetAttributes(semconv.ErrorTypeKey.String(rec.Error))
		span.SetStatus(codes.Error, msg)
	case rec.Status >= 400:
		span.SetAttributes(semconv.ErrorTypeKey.String(strconv.Itoa(rec.Status)))
		span.SetStatus(codes.Error, "")
	}
	span.End(trace.WithTimestamp(start.Add(rec.Duration)))
}

// w3c writes the traceparent and tracestate of a request's span.
var w3c = propagation.TraceContext{}

// inject sets the W3C traceparent (and tracestate) of ctx's span, the request's, on
// h, replacing any the guest set: a request carries its own span's context, never
// one a guest made up beside it.
func inject(ctx context.Context, h http.Header) {
	h.Del("Traceparent")
	h.Del("Tracestate")
	w3c.Inject(ctx, propagation.HeaderCarrier(h))
}
