;; Grows its memory a page at a time until memory.grow refuses (-1), then traps with
;; unreachable, as a guest's allocator aborts when it runs out.
(module
  (memory (export "memory") 1)
  (func (export "wasmjobs_abi_v1"))
  (func (export "wasmjobs_handle") (result i32)
    (loop $grow
      (br_if $grow (i32.ne (memory.grow (i32.const 16)) (i32.const -1))))
    unreachable))
