;; Returns WAIT (4) without importing enqueue_awaited: it loads on every host, and on
;; one whose backend keeps no waiting jobs its WAIT fails, naming the backend.
(module
  (memory (export "memory") 1)
  (func (export "wasmjobs_abi_v1"))
  (func (export "wasmjobs_handle") (result i32) (i32.const 4)))
