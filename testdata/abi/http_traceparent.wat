;; Outbound HTTP with trace headers of its own: GETs the URL in the payload with
;; "traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" and
;; "tracestate: guest=1", writes the status to its output, closes the request and acks.
(module
  (import "wasmjobs" "payload_read" (func $payload_read (param i32 i32) (result i32)))
  (import "wasmjobs" "output_write" (func $output_write (param i32 i32) (result i32)))
  (import "wasmjobs" "http_start" (func $http_start (param i32 i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "wasmjobs" "http_status" (func $http_status (param i32) (result i32)))
  (import "wasmjobs" "http_close" (func $http_close (param i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 4096) "GET")
  (data (i32.const 4112) "traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\ntracestate: guest=1\n") ;; 89 bytes
  (func (export "wasmjobs_abi_v1"))
  (func (export "wasmjobs_handle") (result i32)
    (local $len i32) (local $h i32)
    (local.set $len (call $payload_read (i32.const 0) (i32.const 4096)))
    (local.set $h (call $http_start (i32.const 4096) (i32.const 3) (i32.const 0) (local.get $len)
      (i32.const 4112) (i32.const 89) (i32.const 0) (i32.const 0)))
    (i32.store (i32.const 8192) (call $http_status (local.get $h)))
    (drop (call $output_write (i32.const 8192) (i32.const 4)))
    (drop (call $http_close (local.get $h)))
    (i32.const 0)))
