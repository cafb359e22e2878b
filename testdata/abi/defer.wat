;; Stages a delay of 2000 ms and a reason, then returns DEFER.
(module
  (import "wasmjobs" "set_reason" (func $set_reason (param i32 i32)))
  (import "wasmjobs" "set_delay_ms" (func $set_delay_ms (param i64)))
  (memory (export "memory") 1)
  (data (i32.const 16) "rate limited")
  (func (export "wasmjobs_abi_v1"))
  (func (export "wasmjobs_handle") (result i32)
    (call $set_reason (i32.const 16) (i32.const 12))
    (call $set_delay_ms (i64.const 2000))
    (i32.const 2)))
