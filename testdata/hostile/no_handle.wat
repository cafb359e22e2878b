;; Lacks wasmjobs_handle.
(module
  (memory (export "memory") 1)
  (func (export "wasmjobs_abi_v1")))
