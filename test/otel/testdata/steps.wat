;; The guest of the trace tests: it asks a test server what to do. It GETs the URL in
;; its payload, sending its own "traceparent" header (which the host must replace with
;; the request's client span), reads up to 256 bytes of the answer and settles by its
;; first byte:
;;   "retry"          RETRY after 50 ms
;;   "defer"          DEFER after 50 ms
;;   "bury"           DEAD_LETTER
;;   "ack"            ACK
;;   "ack QUEUE"      enqueue one child job (payload "child") into QUEUE, then ACK
;;   "trap"           trap (unreachable)
;; A failed request (or any other answer) is a RETRY after 50 ms with a reason. It logs
;; the answer at info first.
(module
  (import "wasmjobs" "payload_read" (func $payload_read (param i32 i32) (result i32)))
  (import "wasmjobs" "http_start" (func $http_start (param i32 i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "wasmjobs" "http_status" (func $http_status (param i32) (result i32)))
  (import "wasmjobs" "http_body_read" (func $http_body_read (param i32 i32 i32) (result i32)))
  (import "wasmjobs" "http_close" (func $http_close (param i32) (result i32)))
  (import "wasmjobs" "enqueue" (func $enqueue (param i32 i32 i32 i32 i64) (result i32)))
  (import "wasmjobs" "set_reason" (func $set_reason (param i32 i32)))
  (import "wasmjobs" "set_delay_ms" (func $set_delay_ms (param i64)))
  (import "wasmjobs" "log" (func $log (param i32 i32 i32)))
  (memory (export "memory") 1)
  (data (i32.const 4096) "GET")
  ;; 69 bytes: a guest's own traceparent, which must never reach the server.
  (data (i32.const 4112) "traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\n")
  (data (i32.const 4224) "child")
  (data (i32.const 4240) "no usable answer")
  (func (export "wasmjobs_abi_v1"))
  (func (export "wasmjobs_handle") (result i32)
    (local $len i32) (local $h i32) (local $n i32) (local $c i32)
    (local.set $len (call $payload_read (i32.const 0) (i32.const 4096)))
    (local.set $h (call $http_start (i32.const 4096) (i32.const 3) (i32.const 0) (local.get $len)
      (i32.const 4112) (i32.const 69) (i32.const 0) (i32.const 0)))
    (if (i32.ge_s (local.get $h) (i32.const 0))
      (then
        (if (i32.ge_s (call $http_status (local.get $h)) (i32.const 0))
          (then (local.set $n (call $http_body_read (local.get $h) (i32.const 8192) (i32.const 256)))))
        (drop (call $http_close (local.get $h)))))
    (if (i32.gt_s (local.get $n) (i32.const 0))
      (then
        (call $log (i32.const 1) (i32.const 8192) (local.get $n))
        (local.set $c (i32.load8_u (i32.const 8192)))))
    (if (i32.eq (local.get $c) (i32.const 114)) ;; r
      (then (call $set_delay_ms (i64.const 50)) (return (i32.const 1))))
    (if (i32.eq (local.get $c) (i32.const 100)) ;; d
      (then (call $set_delay_ms (i64.const 50)) (return (i32.const 2))))
    (if (i32.eq (local.get $c) (i32.const 98)) ;; b
      (then (return (i32.const 3))))
    (if (i32.eq (local.get $c) (i32.const 116)) ;; t
      (then unreachable))
    (if (i32.eq (local.get $c) (i32.const 97)) ;; a
      (then
        (if (i32.gt_s (local.get $n) (i32.const 4))
          (then (drop (call $enqueue (i32.const 8196) (i32.sub (local.get $n) (i32.const 4))
            (i32.const 4224) (i32.const 5) (i64.const 0)))))
        (return (i32.const 0))))
    (call $set_reason (i32.const 4240) (i32.const 16))
    (call $set_delay_ms (i64.const 50))
    (i32.const 1)))
