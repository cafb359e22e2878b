;; Writes 64 KiB chunks to the output until output_write refuses (-3), then returns ACK:
;; the output stops at the cap.
(module
  (import "wasmjobs" "output_write" (func $output_write (param i32 i32) (result i32)))
  (memory (export "memory") 2)
  (func (export "wasmjobs_abi_v1"))
  (func (export "wasmjobs_handle") (result i32)
    (loop $more
      (br_if $more (i32.ne (call $output_write (i32.const 0) (i32.const 65536)) (i32.const -3))))
    (i32.const 0)))
