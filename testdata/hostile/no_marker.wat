;; Lacks the wasmjobs_abi_v1 marker.
(module
  (memory (export "memory") 1)
  (func (export "wasmjobs_handle") (result i32) (i32.const 0)))
