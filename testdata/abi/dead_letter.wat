;; Stages a reason, then returns DEAD_LETTER. It also stages a child and a delay, which
;; a dead letter ignores.
(module
  (import "wasmjobs" "set_reason" (func $set_reason (param i32 i32)))
  (import "wasmjobs" "set_delay_ms" (func $set_delay_ms (param i64)))
  (import "wasmjobs" "enqueue" (func $enqueue (param i32 i32 i32 i32 i64) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "bad input")
  (data (i32.const 32) "child")
  (func (export "wasmjobs_abi_v1"))
  (func (export "wasmjobs_handle") (result i32)
    (drop (call $enqueue (i32.const 32) (i32.const 5) (i32.const 0) (i32.const 0) (i64.const 0)))
    (call $set_delay_ms (i64.const 100))
    (call $set_reason (i32.const 16) (i32.const 9))
    (i32.const 3)))
