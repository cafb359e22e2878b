;; Fan-out of as many children as the manifest lets (max_children), for the fan-in
;; benchmark: on a first run (round 0) it stages awaited children on the queue
;; "child", payload "x", until enqueue_awaited refuses one (-3, the per-job cap), and
;; returns WAIT; on a resumed run it returns ACK.
(module
  (import "wasmjobs" "enqueue_awaited" (func $enqueue_awaited (param i32 i32 i32 i32 i64) (result i32)))
  (import "wasmjobs" "round" (func $round (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "child")
  (data (i32.const 32) "x")
  (func (export "wasmjobs_abi_v1"))
  (func (export "wasmjobs_handle") (result i32)
    (if (i32.gt_s (call $round) (i32.const 0))
      (then (return (i32.const 0))))
    (block $full
      (loop $stage
        (br_if $full (i32.ne (call $enqueue_awaited (i32.const 16) (i32.const 5) (i32.const 32) (i32.const 1) (i64.const 0)) (i32.const 0)))
        (br $stage)))
    (i32.const 4)))
