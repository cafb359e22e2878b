;; Logs 5,000 lines of "flood", then one 10,000-byte line, then returns ACK.
(module
  (import "wasmjobs" "log" (func $log (param i32 i32 i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "flood")
  (func (export "wasmjobs_abi_v1"))
  (func (export "wasmjobs_handle") (result i32)
    (local $i i32)
    (loop $more
      (call $log (i32.const 1) (i32.const 16) (i32.const 5))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $more (i32.lt_u (local.get $i) (i32.const 5000))))
    (call $log (i32.const 1) (i32.const 1024) (i32.const 10000))
    (i32.const 0)))
