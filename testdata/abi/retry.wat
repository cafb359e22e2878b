;; Stages a reason and a delay of 1500 ms, then returns RETRY.
(module
  (import "wasmjobs" "set_reason" (func $set_reason (param i32 i32)))
  (import "wasmjobs" "set_delay_ms" (func $set_delay_ms (param i64)))
  (memory (export "memory") 1)
  (data (i32.const 16) "try later")
  (func (export "wasmjobs_abi_v1"))
  (func (export "wasmjobs_handle") (result i32)
    (call $set_reason (i32.const 16) (i32.const 9))
    (call $set_delay_ms (i64.const 900))
    (call $set_delay_ms (i64.const -5)) ;; ignored: the last valid call wins
    (call $set_delay_ms (i64.const 1500))
    (i32.const 1)))
