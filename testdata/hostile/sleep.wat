;; Asks WASI's poll_oneoff to sleep for an hour: stopped by the job's wall-clock limit.
(module
  (import "wasi_snapshot_preview1" "poll_oneoff" (func $poll_oneoff (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "wasmjobs_abi_v1"))
  (func (export "wasmjobs_handle") (result i32)
    ;; one clock subscription at 0: tag 0 (clock) at 8, clock id 1 (monotonic) at 16,
    ;; timeout 3600 s in ns at 24
    (i32.store8 (i32.const 8) (i32.const 0))
    (i32.store (i32.const 16) (i32.const 1))
    (i64.store (i32.const 24) (i64.const 3600000000000))
    (drop (call $poll_oneoff (i32.const 0) (i32.const 64) (i32.const 1) (i32.const 128)))
    (i32.const 0)))
