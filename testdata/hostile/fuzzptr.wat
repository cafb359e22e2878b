;; For the host-function fuzz test: the payload holds a selector byte and two
;; little-endian i32s (ptr, len) at bytes 1..8; the module passes them to the host
;; function the selector picks (0 payload_read, 1 meta_read key 0, 2 header_read as key,
;; 3 header_read as buffer, 4 log, 5 set_reason, 6 output_write, 7 enqueue as queue,
;; 8 enqueue as payload) and returns ACK if the call returns.
(module
  (import "wasmjobs" "payload_read" (func $payload_read (param i32 i32) (result i32)))
  (import "wasmjobs" "meta_read" (func $meta_read (param i32 i32 i32) (result i32)))
  (import "wasmjobs" "header_read" (func $header_read (param i32 i32 i32 i32) (result i32)))
  (import "wasmjobs" "log" (func $log (param i32 i32 i32)))
  (import "wasmjobs" "set_reason" (func $set_reason (param i32 i32)))
  (import "wasmjobs" "output_write" (func $output_write (param i32 i32) (result i32)))
  (import "wasmjobs" "enqueue" (func $enqueue (param i32 i32 i32 i32 i64) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 64) "q")
  (func (export "wasmjobs_abi_v1"))
  (func (export "wasmjobs_handle") (result i32)
    (local $sel i32) (local $p i32) (local $n i32)
    (drop (call $payload_read (i32.const 0) (i32.const 9)))
    (local.set $sel (i32.rem_u (i32.load8_u (i32.const 0)) (i32.const 9)))
    (local.set $p (i32.load (i32.const 1)))
    (local.set $n (i32.load (i32.const 5)))
    (if (i32.eq (local.get $sel) (i32.const 0)) (then (drop (call $payload_read (local.get $p) (local.get $n)))))
    (if (i32.eq (local.get $sel) (i32.const 1)) (then (drop (call $meta_read (i32.const 0) (local.get $p) (local.get $n)))))
    (if (i32.eq (local.get $sel) (i32.const 2)) (then (drop (call $header_read (local.get $p) (local.get $n) (i32.const 128) (i32.const 16)))))
    (if (i32.eq (local.get $sel) (i32.const 3)) (then (drop (call $header_read (i32.const 64) (i32.const 1) (local.get $p) (local.get $n)))))
    (if (i32.eq (local.get $sel) (i32.const 4)) (then (call $log (i32.const 1) (local.get $p) (local.get $n))))
    (if (i32.eq (local.get $sel) (i32.const 5)) (then (call $set_reason (local.get $p) (local.get $n))))
    (if (i32.eq (local.get $sel) (i32.const 6)) (then (drop (call $output_write (local.get $p) (local.get $n)))))
    (if (i32.eq (local.get $sel) (i32.const 7)) (then (drop (call $enqueue (local.get $p) (local.get $n) (i32.const 64) (i32.const 1) (i64.const 0)))))
    (if (i32.eq (local.get $sel) (i32.const 8)) (then (drop (call $enqueue (i32.const 64) (i32.const 1) (local.get $p) (local.get $n) (i64.const 0)))))
    (i32.const 0)))
