;; Exports wasmjobs_serve returning an i32: ABI v1's is () -> (), refused at load.
(module
  (import "wasmjobs" "next_job" (func $next_job (param i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "wasmjobs_abi_v1"))
  (func (export "wasmjobs_handle") (result i32) (i32.const 0))
  (func (export "wasmjobs_serve") (result i32) (call $next_job (i32.const 0))))
