;; Imports a function from a module the host does not provide.
(module
  (import "os" "system" (func (param i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "wasmjobs_abi_v1"))
  (func (export "wasmjobs_handle") (result i32) (i32.const 0)))
