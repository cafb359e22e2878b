;; Stages a child job ("kid" to the queue "child"), then sleeps for the number of
;; milliseconds its payload holds in decimal through WASI's poll_oneoff, as sleep_ms does,
;; then writes "slept" to the output and returns ACK: a job with staged work, stopped
;; while it waits (an operator's cancel must drop the child).
(module
  (import "wasi_snapshot_preview1" "poll_oneoff" (func $poll_oneoff (param i32 i32 i32 i32) (result i32)))
  (import "wasmjobs" "payload_len" (func $payload_len (result i32)))
  (import "wasmjobs" "payload_read" (func $payload_read (param i32 i32) (result i32)))
  (import "wasmjobs" "output_write" (func $output_write (param i32 i32) (result i32)))
  (import "wasmjobs" "enqueue" (func $enqueue (param i32 i32 i32 i32 i64) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 512) "slept")
  (data (i32.const 544) "child")
  (data (i32.const 560) "kid")
  (func (export "wasmjobs_abi_v1"))
  (func (export "wasmjobs_handle") (result i32)
    (local $n i32) (local $i i32) (local $ms i64) (local $c i32)
    (drop (call $enqueue (i32.const 544) (i32.const 5) (i32.const 560) (i32.const 3) (i64.const 0)))
    (local.set $n (call $payload_read (i32.const 256) (i32.const 16)))
    (block $done
      (loop $digits
        (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
        (local.set $c (i32.sub (i32.load8_u (i32.add (i32.const 256) (local.get $i))) (i32.const 48)))
        (br_if $done (i32.gt_u (local.get $c) (i32.const 9)))
        (local.set $ms (i64.add (i64.mul (local.get $ms) (i64.const 10)) (i64.extend_i32_u (local.get $c))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $digits)))
    (if (i64.gt_u (local.get $ms) (i64.const 0))
      (then
        ;; one clock subscription: tag 0 (clock) at 8, clock id 1 (monotonic) at 16,
        ;; timeout in ns at 24
        (i32.store8 (i32.const 8) (i32.const 0))
        (i32.store (i32.const 16) (i32.const 1))
        (i64.store (i32.const 24) (i64.mul (local.get $ms) (i64.const 1000000)))
        (drop (call $poll_oneoff (i32.const 0) (i32.const 64) (i32.const 1) (i32.const 128)))))
    (drop (call $output_write (i32.const 512) (i32.const 5)))
    (i32.const 0)))
