;; Recurses without end: a stack overflow.
(module
  (memory (export "memory") 1)
  (func (export "wasmjobs_abi_v1"))
  (func $down (param $n i64) (result i64)
    (i64.add (call $down (i64.add (local.get $n) (i64.const 1))) (i64.const 1)))
  (func (export "wasmjobs_handle") (result i32)
    (drop (call $down (i64.const 0)))
    (i32.const 0)))
