;; Acknowledges every job, served: one call of wasmjobs_serve takes its jobs through
;; next_job; wasmjobs_handle, for a host that calls once a job, acknowledges too. The
;; serve export's counterpart of ack.wasm, for the per-job cost of a call.
(module
  (import "wasmjobs" "next_job" (func $next_job (param i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "wasmjobs_abi_v1"))
  (func (export "wasmjobs_handle") (result i32) (i32.const 0))
  (func (export "wasmjobs_serve")
    ;; The outcome passed with the first call is ignored: there was no job before it.
    (block $stop
      (loop $jobs
        (br_if $stop (i32.eqz (call $next_job (i32.const 0))))
        (br $jobs)))))
