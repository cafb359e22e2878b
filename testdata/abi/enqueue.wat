;; Stages child jobs and writes each enqueue status to the output, one per line:
;; "child" now (0), "child" after 250 ms (0), an empty queue name (-2), a negative delay
;; (-2), "other" (-4 where the manifest allows only "child"), then "child" until the
;; per-job cap refuses it (-3), and finally returns ACK.
(module
  (import "wasmjobs" "enqueue" (func $enqueue (param i32 i32 i32 i32 i64) (result i32)))
  (import "wasmjobs" "output_write" (func $output_write (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "\n")
  (data (i32.const 16) "child")
  (data (i32.const 32) "other")
  (data (i32.const 48) "payload-1")
  (data (i32.const 64) "payload-2")
  (func (export "wasmjobs_abi_v1"))
  (func $status (param $s i32)
    (if (i32.lt_s (local.get $s) (i32.const 0))
      (then (i32.store8 (i32.const 100) (i32.const 45))
            (i32.store8 (i32.const 101) (i32.sub (i32.const 48) (local.get $s)))
            (drop (call $output_write (i32.const 100) (i32.const 2))))
      (else (i32.store8 (i32.const 100) (i32.add (i32.const 48) (local.get $s)))
            (drop (call $output_write (i32.const 100) (i32.const 1)))))
    (drop (call $output_write (i32.const 0) (i32.const 1))))
  (func (export "wasmjobs_handle") (result i32)
    (local $s i32)
    (call $status (call $enqueue (i32.const 16) (i32.const 5) (i32.const 48) (i32.const 9) (i64.const 0)))
    (call $status (call $enqueue (i32.const 16) (i32.const 5) (i32.const 64) (i32.const 9) (i64.const 250)))
    (call $status (call $enqueue (i32.const 16) (i32.const 0) (i32.const 48) (i32.const 9) (i64.const 0)))
    (call $status (call $enqueue (i32.const 16) (i32.const 5) (i32.const 48) (i32.const 9) (i64.const -1)))
    (call $status (call $enqueue (i32.const 32) (i32.const 5) (i32.const 48) (i32.const 9) (i64.const 0)))
    (loop $more
      (local.set $s (call $enqueue (i32.const 16) (i32.const 5) (i32.const 48) (i32.const 9) (i64.const 0)))
      (br_if $more (i32.eqz (local.get $s))))
    (call $status (local.get $s))
    (i32.const 0)))
