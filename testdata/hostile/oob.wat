;; Passes a pointer/length pair outside its one-page memory to the host function that
;; the payload's first byte picks:
;;   a payload_read, b meta_read, c header_read (key), d header_read (buffer), e log,
;;   f set_reason, g output_write, h enqueue (queue), i enqueue (payload),
;;   j payload_read with a length that wraps past 2^32 (ptr 16, len 0xFFFFFFF0),
;;   k meta_read with an unknown key (the pair is checked first);
;;   outbound HTTP, each without a grant or with an unknown handle (the pair is checked
;;   first): l http_start (body), m http_error_read, n http_headers_read,
;;   o http_url_read, p http_body_read, q http_wait (handles), r http_wait with a count
;;   whose 4-byte handles pass 2^32 (n 0x40000000).
;; Every case must trap the guest; none may harm the host.
(module
  (import "wasmjobs" "payload_read" (func $payload_read (param i32 i32) (result i32)))
  (import "wasmjobs" "meta_read" (func $meta_read (param i32 i32 i32) (result i32)))
  (import "wasmjobs" "header_read" (func $header_read (param i32 i32 i32 i32) (result i32)))
  (import "wasmjobs" "log" (func $log (param i32 i32 i32)))
  (import "wasmjobs" "set_reason" (func $set_reason (param i32 i32)))
  (import "wasmjobs" "output_write" (func $output_write (param i32 i32) (result i32)))
  (import "wasmjobs" "enqueue" (func $enqueue (param i32 i32 i32 i32 i64) (result i32)))
  (import "wasmjobs" "http_start" (func $http_start (param i32 i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "wasmjobs" "http_error_read" (func $http_error_read (param i32 i32 i32) (result i32)))
  (import "wasmjobs" "http_headers_read" (func $http_headers_read (param i32 i32 i32) (result i32)))
  (import "wasmjobs" "http_url_read" (func $http_url_read (param i32 i32 i32) (result i32)))
  (import "wasmjobs" "http_body_read" (func $http_body_read (param i32 i32 i32) (result i32)))
  (import "wasmjobs" "http_wait" (func $http_wait (param i32 i32 i64) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "q")
  (func (export "wasmjobs_abi_v1"))
  (func (export "wasmjobs_handle") (result i32)
    (local $which i32)
    (drop (call $payload_read (i32.const 0) (i32.const 1)))
    (local.set $which (i32.load8_u (i32.const 0)))
    ;; 65530 + 16 runs past the end of the page
    (if (i32.eq (local.get $which) (i32.const 97)) (then (drop (call $payload_read (i32.const 65530) (i32.const 16)))))
    (if (i32.eq (local.get $which) (i32.const 98)) (then (drop (call $meta_read (i32.const 0) (i32.const 65530) (i32.const 16)))))
    (if (i32.eq (local.get $which) (i32.const 99)) (then (drop (call $header_read (i32.const 65530) (i32.const 16) (i32.const 16) (i32.const 1)))))
    (if (i32.eq (local.get $which) (i32.const 100)) (then (drop (call $header_read (i32.const 16) (i32.const 1) (i32.const 65530) (i32.const 16)))))
    (if (i32.eq (local.get $which) (i32.const 101)) (then (call $log (i32.const 1) (i32.const 65530) (i32.const 16))))
    (if (i32.eq (local.get $which) (i32.const 102)) (then (call $set_reason (i32.const 65530) (i32.const 16))))
    (if (i32.eq (local.get $which) (i32.const 103)) (then (drop (call $output_write (i32.const 65530) (i32.const 16)))))
    (if (i32.eq (local.get $which) (i32.const 104)) (then (drop (call $enqueue (i32.const 65530) (i32.const 16) (i32.const 16) (i32.const 1) (i64.const 0)))))
    (if (i32.eq (local.get $which) (i32.const 105)) (then (drop (call $enqueue (i32.const 16) (i32.const 1) (i32.const 65530) (i32.const 16) (i64.const 0)))))
    (if (i32.eq (local.get $which) (i32.const 106)) (then (drop (call $payload_read (i32.const 16) (i32.const 0xFFFFFFF0)))))
    (if (i32.eq (local.get $which) (i32.const 107)) (then (drop (call $meta_read (i32.const 99) (i32.const 65530) (i32.const 16)))))
    (if (i32.eq (local.get $which) (i32.const 108)) (then (drop (call $http_start (i32.const 16) (i32.const 1) (i32.const 16) (i32.const 1) (i32.const 0) (i32.const 0) (i32.const 65530) (i32.const 16)))))
    (if (i32.eq (local.get $which) (i32.const 109)) (then (drop (call $http_error_read (i32.const 99) (i32.const 65530) (i32.const 16)))))
    (if (i32.eq (local.get $which) (i32.const 110)) (then (drop (call $http_headers_read (i32.const 99) (i32.const 65530) (i32.const 16)))))
    (if (i32.eq (local.get $which) (i32.const 111)) (then (drop (call $http_url_read (i32.const 99) (i32.const 65530) (i32.const 16)))))
    (if (i32.eq (local.get $which) (i32.const 112)) (then (drop (call $http_body_read (i32.const 99) (i32.const 65530) (i32.const 16)))))
    (if (i32.eq (local.get $which) (i32.const 113)) (then (drop (call $http_wait (i32.const 65530) (i32.const 2) (i64.const 0)))))
    (if (i32.eq (local.get $which) (i32.const 114)) (then (drop (call $http_wait (i32.const 16) (i32.const 0x40000000) (i64.const 0)))))
    (i32.const 0)))
