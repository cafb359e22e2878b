;; Loops forever in wasmjobs_init.
(module
  (memory (export "memory") 1)
  (func (export "wasmjobs_abi_v1"))
  (func (export "wasmjobs_init") (result i32) (loop $forever (br $forever)) (i32.const 0))
  (func (export "wasmjobs_handle") (result i32) (i32.const 0)))
