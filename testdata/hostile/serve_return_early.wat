;; Exports wasmjobs_serve that returns at once, before asking for a job: its instance
;; never starts (the load fails).
(module
  (import "wasmjobs" "next_job" (func $next_job (param i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "wasmjobs_abi_v1"))
  (func (export "wasmjobs_handle") (result i32) (i32.const 0))
  (func (export "wasmjobs_serve")))
