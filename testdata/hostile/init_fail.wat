;; wasmjobs_init returns 5.
(module
  (memory (export "memory") 1)
  (func (export "wasmjobs_abi_v1"))
  (func (export "wasmjobs_init") (result i32) (i32.const 5))
  (func (export "wasmjobs_handle") (result i32) (i32.const 0)))
