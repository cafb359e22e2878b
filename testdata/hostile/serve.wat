;; A served module for the serve loop's tests: wasmjobs_serve takes its jobs through
;; next_job and acts on the first byte of each payload:
;;   a  ACK, with the number of jobs this instance has served (mod 10) as the output
;;   s  spin for ever
;;   t  trap (unreachable)
;;   r  return from wasmjobs_serve, without passing the outcome on
;;   b  pass the invalid outcome 9
;;   z  sleep an hour through WASI's poll_oneoff
;;   i  ACK, and from then on ignore next_job's 0: keep asking for jobs
;; wasmjobs_handle, which a host calls once a job when it does not serve (Config.NoServe),
;; returns RETRY, so that a test can tell which the host called; a real module does the
;; same work in both.
(module
  (import "wasi_snapshot_preview1" "poll_oneoff" (func $poll_oneoff (param i32 i32 i32 i32) (result i32)))
  (import "wasmjobs" "next_job" (func $next_job (param i32) (result i32)))
  (import "wasmjobs" "payload_read" (func $payload_read (param i32 i32) (result i32)))
  (import "wasmjobs" "output_write" (func $output_write (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (global $served (mut i32) (i32.const 0))
  (global $ignore (mut i32) (i32.const 0))
  (func (export "wasmjobs_abi_v1"))
  (func (export "wasmjobs_handle") (result i32) (i32.const 1))
  (func (export "wasmjobs_serve")
    (local $outcome i32) (local $op i32)
    (block $stop
      (loop $jobs
        (if (i32.eqz (call $next_job (local.get $outcome)))
          (then (br_if $stop (i32.eqz (global.get $ignore))) (br $jobs)))
        (global.set $served (i32.add (global.get $served) (i32.const 1)))
        (i32.store8 (i32.const 256) (i32.const 0))
        (drop (call $payload_read (i32.const 256) (i32.const 1)))
        (local.set $op (i32.load8_u (i32.const 256)))
        (local.set $outcome (i32.const 0))
        (if (i32.eq (local.get $op) (i32.const 115)) ;; s
          (then (loop $spin (br $spin))))
        (if (i32.eq (local.get $op) (i32.const 116)) ;; t
          (then unreachable))
        (if (i32.eq (local.get $op) (i32.const 114)) ;; r
          (then (return)))
        (if (i32.eq (local.get $op) (i32.const 98)) ;; b
          (then (local.set $outcome (i32.const 9))))
        (if (i32.eq (local.get $op) (i32.const 122)) ;; z
          (then
            ;; one clock subscription: tag 0 (clock) at 8, clock id 1 (monotonic) at 16,
            ;; timeout in ns at 24
            (i32.store8 (i32.const 8) (i32.const 0))
            (i32.store (i32.const 16) (i32.const 1))
            (i64.store (i32.const 24) (i64.const 3600000000000))
            (drop (call $poll_oneoff (i32.const 0) (i32.const 64) (i32.const 1) (i32.const 128)))))
        (if (i32.eq (local.get $op) (i32.const 105)) ;; i
          (then (global.set $ignore (i32.const 1))))
        (i32.store8 (i32.const 512) (i32.add (i32.const 48) (i32.rem_u (global.get $served) (i32.const 10))))
        (drop (call $output_write (i32.const 512) (i32.const 1)))
        (br $jobs)))))
