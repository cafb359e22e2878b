;; Logs one 10,000-byte line of 'x', then returns ACK.
(module
  (import "wasmjobs" "log" (func $log (param i32 i32 i32)))
  (memory (export "memory") 1)
  (func (export "wasmjobs_abi_v1"))
  (func (export "wasmjobs_handle") (result i32)
    (memory.fill (i32.const 1024) (i32.const 120) (i32.const 10000))
    (call $log (i32.const 2) (i32.const 1024) (i32.const 10000))
    (i32.const 0)))
