;; Logs 200 lines "line", their levels debug, info, warn, error in turn, then acks; or,
;; when the payload starts with "t", traps after them.
(module
  (import "wasmjobs" "log" (func $log (param i32 i32 i32)))
  (import "wasmjobs" "payload_read" (func $payload_read (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "line")
  (func (export "wasmjobs_abi_v1"))
  (func (export "wasmjobs_handle") (result i32)
    (local $i i32)
    (loop $more
      (call $log (i32.and (local.get $i) (i32.const 3)) (i32.const 16) (i32.const 4))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $more (i32.lt_u (local.get $i) (i32.const 200))))
    (drop (call $payload_read (i32.const 0) (i32.const 1)))
    (if (i32.eq (i32.load8_u (i32.const 0)) (i32.const 116)) (then unreachable))
    (i32.const 0)))
