;; Imports a host function that ABI v1 does not define.
(module
  (import "wasmjobs" "launch_missiles" (func (result i32)))
  (memory (export "memory") 1)
  (func (export "wasmjobs_abi_v1"))
  (func (export "wasmjobs_handle") (result i32) (i32.const 0)))
