;; A served module whose wasmjobs_init sleeps 700 ms and whose every job sleeps 400 ms,
;; through WASI's poll_oneoff, then passes ACK: under a 1 s timeout (which init must
;; keep too) each job is in time only if making its instance is not counted in it.
(module
  (import "wasi_snapshot_preview1" "poll_oneoff" (func $poll_oneoff (param i32 i32 i32 i32) (result i32)))
  (import "wasmjobs" "next_job" (func $next_job (param i32) (result i32)))
  (memory (export "memory") 1)
  (func $sleep (param $ns i64)
    ;; one clock subscription: tag 0 (clock) at 8, clock id 1 (monotonic) at 16,
    ;; timeout in ns at 24
    (i32.store8 (i32.const 8) (i32.const 0))
    (i32.store (i32.const 16) (i32.const 1))
    (i64.store (i32.const 24) (local.get $ns))
    (drop (call $poll_oneoff (i32.const 0) (i32.const 64) (i32.const 1) (i32.const 128))))
  (func (export "wasmjobs_abi_v1"))
  (func (export "wasmjobs_init") (result i32) (call $sleep (i64.const 700000000)) (i32.const 0))
  (func (export "wasmjobs_handle") (result i32) (call $sleep (i64.const 400000000)) (i32.const 0))
  (func (export "wasmjobs_serve")
    (block $stop
      (loop $jobs
        (br_if $stop (i32.eqz (call $next_job (i32.const 0))))
        (call $sleep (i64.const 400000000))
        (br $jobs)))))
