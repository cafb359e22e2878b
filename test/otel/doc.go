// Package otel holds the end-to-end tests of wasmjobs' tracing (issue #27): they build
// the wasmjobs binary from the repository, run it against the OpenTelemetry
// Collector's own OTLP receiver over HTTP and gRPC, and check the spans it exports.
//
// It is a module of its own so that the collector's dependencies (and their gRPC
// version) stay out of the main module's go.mod; it does not import the main module
// and drives only the built binary. Run it with `cd test/otel && go test -race ./...`;
// it needs wabt's wat2wasm, and RabbitMQ's test needs WASMJOBS_AMQP_URL
// (scripts/rabbitmq.sh start).
package otel
