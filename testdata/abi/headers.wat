;; Writes to the output, one per line: the header "Trace-Id", the status for the absent
;; "trace-id" (keys are case-sensitive), and the full length reported for a 1-byte
;; buffer on "Trace-Id".
(module
  (import "wasmjobs" "header_read" (func $header_read (param i32 i32 i32 i32) (result i32)))
  (import "wasmjobs" "output_write" (func $output_write (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "\n")
  (data (i32.const 16) "Trace-Id")
  (data (i32.const 32) "trace-id")
  (func (export "wasmjobs_abi_v1"))
  (func $nl (drop (call $output_write (i32.const 0) (i32.const 1))))
  (func $digit (param $n i32)
    ;; writes a small number: "-1" for -1, else one or two decimal digits
    (if (i32.eq (local.get $n) (i32.const -1))
      (then (i32.store8 (i32.const 100) (i32.const 45)) (i32.store8 (i32.const 101) (i32.const 49))
            (drop (call $output_write (i32.const 100) (i32.const 2))) (call $nl) (return)))
    (i32.store8 (i32.const 100) (i32.add (i32.const 48) (i32.div_u (local.get $n) (i32.const 10))))
    (i32.store8 (i32.const 101) (i32.add (i32.const 48) (i32.rem_u (local.get $n) (i32.const 10))))
    (drop (call $output_write (i32.const 100) (i32.const 2)))
    (call $nl))
  (func (export "wasmjobs_handle") (result i32)
    (drop (call $output_write (i32.const 1024)
      (call $header_read (i32.const 16) (i32.const 8) (i32.const 1024) (i32.const 256))))
    (call $nl)
    (call $digit (call $header_read (i32.const 32) (i32.const 8) (i32.const 1024) (i32.const 256)))
    (call $digit (call $header_read (i32.const 16) (i32.const 8) (i32.const 1024) (i32.const 1)))
    (i32.const 0)))
