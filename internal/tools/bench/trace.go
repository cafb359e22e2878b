package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/wasmjobs/wasmjobs/internal/telemetry"
)

// otlpSink is a loopback OTLP/HTTP endpoint that takes every export, counts its
// spans and answers success: the local receiver a traced run exports to, so that the
// figure is the host's cost of tracing, not a collector's.
type otlpSink struct {
	srv *http.Server
	url string
	mu  sync.Mutex
	// bodies are the exports taken, decoded only once the run is timed (count), so
	// that the receiver's own work, in this process, is not billed to the host.
	bodies [][]byte
	bad    atomic.Int64
}

func startSink() (*otlpSink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &otlpSink{url: "http://" + ln.Addr().String()}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			s.bad.Add(1)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		s.bodies = append(s.bodies, body)
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK) // an empty body is an empty ExportTraceServiceResponse
	})
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go s.srv.Serve(ln)
	return s, nil
}

func (s *otlpSink) close() { s.srv.Close() }

// count decodes the exports taken and counts their spans; an export that does not
// decode is an error.
func (s *otlpSink) count() (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for i, body := range s.bodies {
		var req collectortrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			return n, fmt.Errorf("export %d of %d does not decode: %w", i+1, len(s.bodies), err)
		}
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				n += int64(len(ss.Spans))
			}
		}
	}
	return n, nil
}

// tracing is a traced run's provider and sink.
type tracing struct {
	tp                *telemetry.Provider
	sink              *otlpSink
	once              sync.Once
	received, dropped int64
	err               error
}

// startTracing starts the sink and a provider exporting to it over OTLP/HTTP, with
// the SDK's defaults (every root sampled, the batch processor's queue of 2,048).
func startTracing(ctx context.Context) (*tracing, error) {
	sink, err := startSink()
	if err != nil {
		return nil, err
	}
	// A queue and batches large enough that no span is dropped at these rates: the
	// figure is the cost of every span made and sent, not of spans thrown away.
	vars := map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_BSP_MAX_QUEUE_SIZE": "262144", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "4096"}
	tp, err := telemetry.New(ctx, telemetry.Config{Endpoint: sink.url, Version: "bench", Getenv: func(k string) string { return vars[k] }})
	if err != nil || tp == nil {
		sink.close()
		return nil, errors.Join(errors.New("bench: the tracer provider"), err)
	}
	return &tracing{tp: tp, sink: sink}, nil
}

// stop flushes the spans and reports how many were received and dropped; only the
// first call stops, the others report the same.
func (t *tracing) stop() (received, dropped int64, err error) {
	t.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		t.err = t.tp.Shutdown(ctx)
		t.sink.close()
		if n := t.sink.bad.Load(); n > 0 && t.err == nil {
			t.err = fmt.Errorf("the sink refused %d exports", n)
		}
		var err error
		t.received, err = t.sink.count()
		t.err = errors.Join(t.err, err)
		t.dropped = int64(t.tp.DroppedSpans())
	})
	return t.received, t.dropped, t.err
}
