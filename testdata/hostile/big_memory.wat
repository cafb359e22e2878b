;; Starts with 2048 pages (128 MiB), above the default limit of 1024.
(module
  (memory (export "memory") 2048)
  (func (export "wasmjobs_abi_v1"))
  (func (export "wasmjobs_handle") (result i32) (i32.const 0)))
