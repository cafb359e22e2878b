;; _initialize sets a global to 1 and wasmjobs_init adds 1: wasmjobs_handle returns
;; ACK only when both ran, in order, once. The instance keeps its state across pooled
;; jobs: the output is the number of jobs this instance has run.
(module
  (import "wasmjobs" "output_write" (func $output_write (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (global $state (mut i32) (i32.const 0))
  (global $runs (mut i32) (i32.const 0))
  (func (export "wasmjobs_abi_v1"))
  (func (export "_initialize") (global.set $state (i32.const 1)))
  (func (export "wasmjobs_init") (result i32)
    (global.set $state (i32.add (global.get $state) (i32.const 1)))
    (i32.const 0))
  (func (export "wasmjobs_handle") (result i32)
    (global.set $runs (i32.add (global.get $runs) (i32.const 1)))
    (i32.store8 (i32.const 0) (i32.add (i32.const 48) (global.get $runs)))
    (drop (call $output_write (i32.const 0) (i32.const 1)))
    (if (result i32) (i32.eq (global.get $state) (i32.const 2))
      (then (i32.const 0)) (else (i32.const 1)))))
