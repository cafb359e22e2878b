;; Exports wasmjobs_handle with a parameter.
(module
  (memory (export "memory") 1)
  (func (export "wasmjobs_abi_v1"))
  (func (export "wasmjobs_handle") (param i32) (result i32) (i32.const 0)))
