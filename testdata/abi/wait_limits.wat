;; The limits of enqueue_awaited and child_read, each status a line of output in
;; decimal. On a first run (round 0), under max_payload = 8: enqueue_awaited "child"
;; with a delay of -1 ms (-2), with a 9-byte payload (-3), then with an 8-byte payload
;; and a delay of 250 ms (0), and returns WAIT. On a resumed run: child_read of child
;; 0's id into a 4-byte buffer (the id's full length; then the buffer and the byte past
;; it, which must be untouched), into a 0-byte buffer (the full length; the buffer's
;; first byte, untouched), of child -1 and of child 0x7fffffff (-1), and of field -1
;; (-2); then returns ACK.
(module
  (import "wasmjobs" "enqueue_awaited" (func $enqueue_awaited (param i32 i32 i32 i32 i64) (result i32)))
  (import "wasmjobs" "round" (func $round (result i32)))
  (import "wasmjobs" "child_read" (func $child_read (param i32 i32 i32 i32) (result i32)))
  (import "wasmjobs" "output_write" (func $output_write (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "\n")
  (data (i32.const 16) "child")
  (data (i32.const 48) "payload-1")
  (data (i32.const 64) "payload-")
  (func (export "wasmjobs_abi_v1"))
  (func $nl (drop (call $output_write (i32.const 0) (i32.const 1))))
  ;; num writes n in decimal, then a newline; the digits are built backwards below 200.
  (func $num (param $n i32)
    (local $p i32)
    (local $neg i32)
    (local.set $p (i32.const 200))
    (if (i32.lt_s (local.get $n) (i32.const 0))
      (then (local.set $neg (i32.const 1))
            (local.set $n (i32.sub (i32.const 0) (local.get $n)))))
    (loop $digit
      (local.set $p (i32.sub (local.get $p) (i32.const 1)))
      (i32.store8 (local.get $p) (i32.add (i32.const 48) (i32.rem_u (local.get $n) (i32.const 10))))
      (local.set $n (i32.div_u (local.get $n) (i32.const 10)))
      (br_if $digit (i32.ne (local.get $n) (i32.const 0))))
    (if (local.get $neg)
      (then (local.set $p (i32.sub (local.get $p) (i32.const 1)))
            (i32.store8 (local.get $p) (i32.const 45))))
    (drop (call $output_write (local.get $p) (i32.sub (i32.const 200) (local.get $p))))
    (call $nl))
  (func (export "wasmjobs_handle") (result i32)
    (if (i32.gt_s (call $round) (i32.const 0))
      (then
        (i32.store8 (i32.const 1028) (i32.const 35)) ;; '#'
        (call $num (call $child_read (i32.const 0) (i32.const 0) (i32.const 1024) (i32.const 4)))
        (drop (call $output_write (i32.const 1024) (i32.const 5)))
        (call $nl)
        (i32.store8 (i32.const 1024) (i32.const 64)) ;; '@'
        (call $num (call $child_read (i32.const 0) (i32.const 0) (i32.const 1024) (i32.const 0)))
        (drop (call $output_write (i32.const 1024) (i32.const 1)))
        (call $nl)
        (call $num (call $child_read (i32.const -1) (i32.const 0) (i32.const 1024) (i32.const 16)))
        (call $num (call $child_read (i32.const 0x7fffffff) (i32.const 0) (i32.const 1024) (i32.const 16)))
        (call $num (call $child_read (i32.const 0) (i32.const -1) (i32.const 1024) (i32.const 16)))
        (return (i32.const 0))))
    (call $num (call $enqueue_awaited (i32.const 16) (i32.const 5) (i32.const 64) (i32.const 8) (i64.const -1)))
    (call $num (call $enqueue_awaited (i32.const 16) (i32.const 5) (i32.const 48) (i32.const 9) (i64.const 0)))
    (call $num (call $enqueue_awaited (i32.const 16) (i32.const 5) (i32.const 64) (i32.const 8) (i64.const 250)))
    (i32.const 4)))
