;; A WASI command (exports _start, no _initialize).
(module
  (memory (export "memory") 1)
  (func (export "_start"))
  (func (export "wasmjobs_abi_v1"))
  (func (export "wasmjobs_handle") (result i32) (i32.const 0)))
