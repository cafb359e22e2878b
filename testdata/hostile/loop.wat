;; Loops forever: stopped by the job's wall-clock limit.
(module
  (memory (export "memory") 1)
  (func (export "wasmjobs_abi_v1"))
  (func (export "wasmjobs_handle") (result i32)
    (loop $forever (br $forever))
    (i32.const 0)))
