;; Imports payload_len with the wrong type.
(module
  (import "wasmjobs" "payload_len" (func (param i32) (result i64)))
  (memory (export "memory") 1)
  (func (export "wasmjobs_abi_v1"))
  (func (export "wasmjobs_handle") (result i32) (i32.const 0)))
