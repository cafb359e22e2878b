;; Copies the payload to the output: payload_len, then payload_read into a buffer at
;; 1024. A first read with a 2-byte buffer must copy at most 2 bytes.
(module
  (import "wasmjobs" "payload_len" (func $payload_len (result i32)))
  (import "wasmjobs" "payload_read" (func $payload_read (param i32 i32) (result i32)))
  (import "wasmjobs" "output_write" (func $output_write (param i32 i32) (result i32)))
  (memory (export "memory") 2)
  (func (export "wasmjobs_abi_v1"))
  (func (export "wasmjobs_handle") (result i32)
    (local $n i32)
    (local.set $n (call $payload_len))
    ;; a short read copies min(buf_len, payload_len) and returns the count
    (if (i32.gt_u (call $payload_read (i32.const 1024) (i32.const 2)) (i32.const 2))
      (then (return (i32.const 7))))
    (if (i32.ne (call $payload_read (i32.const 1024) (local.get $n)) (local.get $n))
      (then (return (i32.const 8))))
    (drop (call $output_write (i32.const 1024) (local.get $n)))
    (i32.const 0)))
