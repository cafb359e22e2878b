;; Reads the lengths of the trace id and span id (meta_read keys 4 and 5) in
;; wasmjobs_init, outside any job, and again in wasmjobs_handle, and writes the four,
;; one per line: init's two (0 and 0: outside a job both read as empty, known keys),
;; then the job's (32 and 16 under a span, 0 and 0 without one).
(module
  (import "wasmjobs" "meta_read" (func $meta_read (param i32 i32 i32) (result i32)))
  (import "wasmjobs" "output_write" (func $output_write (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "\n")
  (global $init_trace (mut i32) (i32.const -9))
  (global $init_span (mut i32) (i32.const -9))
  (func (export "wasmjobs_abi_v1"))
  (func (export "wasmjobs_init") (result i32)
    (global.set $init_trace (call $meta_read (i32.const 4) (i32.const 1024) (i32.const 64)))
    (global.set $init_span (call $meta_read (i32.const 5) (i32.const 1024) (i32.const 64)))
    (i32.const 0))
  ;; writes n (>= -9999) in decimal and a newline, using the scratch area at 100..120
  (func $num (param $n i32)
    (local $p i32) (local $neg i32)
    (if (i32.lt_s (local.get $n) (i32.const 0))
      (then (local.set $neg (i32.const 1)) (local.set $n (i32.sub (i32.const 0) (local.get $n)))))
    (local.set $p (i32.const 120))
    (loop $digits
      (local.set $p (i32.sub (local.get $p) (i32.const 1)))
      (i32.store8 (local.get $p) (i32.add (i32.const 48) (i32.rem_u (local.get $n) (i32.const 10))))
      (local.set $n (i32.div_u (local.get $n) (i32.const 10)))
      (br_if $digits (i32.ne (local.get $n) (i32.const 0))))
    (if (local.get $neg)
      (then (local.set $p (i32.sub (local.get $p) (i32.const 1))) (i32.store8 (local.get $p) (i32.const 45))))
    (drop (call $output_write (local.get $p) (i32.sub (i32.const 120) (local.get $p))))
    (drop (call $output_write (i32.const 0) (i32.const 1))))
  (func (export "wasmjobs_handle") (result i32)
    (call $num (global.get $init_trace))
    (call $num (global.get $init_span))
    (call $num (call $meta_read (i32.const 4) (i32.const 1024) (i32.const 64)))
    (call $num (call $meta_read (i32.const 5) (i32.const 1024) (i32.const 64)))
    (i32.const 0)))
