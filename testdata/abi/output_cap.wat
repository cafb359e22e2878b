;; Writes 600 bytes to the output twice; under a 1000-byte cap the second write returns
;; -3 and writes nothing. Returns ACK if the statuses are right, else 9.
(module
  (import "wasmjobs" "output_write" (func $output_write (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "wasmjobs_abi_v1"))
  (func (export "wasmjobs_handle") (result i32)
    (if (i32.ne (call $output_write (i32.const 0) (i32.const 600)) (i32.const 600)) (then (return (i32.const 9))))
    (if (i32.ne (call $output_write (i32.const 0) (i32.const 600)) (i32.const -3)) (then (return (i32.const 9))))
    (i32.const 0)))
