;; Exports wasmjobs_serve without importing next_job, through which a serve loop takes
;; its jobs: refused at load.
(module
  (memory (export "memory") 1)
  (func (export "wasmjobs_abi_v1"))
  (func (export "wasmjobs_handle") (result i32) (i32.const 0))
  (func (export "wasmjobs_serve")))
