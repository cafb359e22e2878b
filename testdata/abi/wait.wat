;; Fan-out and fan-in. Payload "nowait": WAIT without an awaited child (a failure).
;; Otherwise, on a first run (round 0) it writes each status to the output, one per
;; line: round (0), children_len (0), child_read of child 0 (-1: none), then
;; enqueue_awaited "child" (0), enqueue "child" after 250 ms (0, not awaited),
;; enqueue_awaited with an empty queue name (-2), into "other" (-4 where the manifest
;; allows only "child"), then "child" until the per-job cap refuses it (-3), and
;; returns WAIT. On a resumed run it writes the round, then per awaited child a line
;; "id queue state reason output truncated" (truncated as 0 or 1), then the statuses of
;; child_read past the last child (-1) and of an unknown field (-2), and returns ACK.
(module
  (import "wasmjobs" "enqueue" (func $enqueue (param i32 i32 i32 i32 i64) (result i32)))
  (import "wasmjobs" "enqueue_awaited" (func $enqueue_awaited (param i32 i32 i32 i32 i64) (result i32)))
  (import "wasmjobs" "round" (func $round (result i32)))
  (import "wasmjobs" "children_len" (func $children_len (result i32)))
  (import "wasmjobs" "child_read" (func $child_read (param i32 i32 i32 i32) (result i32)))
  (import "wasmjobs" "payload_len" (func $payload_len (result i32)))
  (import "wasmjobs" "output_write" (func $output_write (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "\n")
  (data (i32.const 1) " ")
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
  ;; field writes field f of child i, then the separator at sep.
  (func $field (param $i i32) (param $f i32) (param $sep i32)
    (local $n i32)
    (local.set $n (call $child_read (local.get $i) (local.get $f) (i32.const 1024) (i32.const 32768)))
    (if (i32.eq (local.get $f) (i32.const 5))
      (then (i32.store8 (i32.const 1024) (i32.add (i32.const 48) (i32.load8_u (i32.const 1024))))))
    (drop (call $output_write (i32.const 1024) (local.get $n)))
    (drop (call $output_write (local.get $sep) (i32.const 1))))
  (func (export "wasmjobs_handle") (result i32)
    (local $s i32)
    (local $i i32)
    (local $n i32)
    (if (i32.eq (call $payload_len) (i32.const 6)) ;; "nowait"
      (then (return (i32.const 4))))
    (if (i32.gt_s (call $round) (i32.const 0))
      (then
        (call $status (call $round))
        (local.set $n (call $children_len))
        (block $done
          (loop $next
            (br_if $done (i32.ge_s (local.get $i) (local.get $n)))
            (call $field (local.get $i) (i32.const 0) (i32.const 1))
            (call $field (local.get $i) (i32.const 1) (i32.const 1))
            (call $field (local.get $i) (i32.const 2) (i32.const 1))
            (call $field (local.get $i) (i32.const 3) (i32.const 1))
            (call $field (local.get $i) (i32.const 4) (i32.const 1))
            (call $field (local.get $i) (i32.const 5) (i32.const 0))
            (local.set $i (i32.add (local.get $i) (i32.const 1)))
            (br $next)))
        (call $status (call $child_read (local.get $n) (i32.const 0) (i32.const 1024) (i32.const 16)))
        (call $status (call $child_read (i32.const 0) (i32.const 9) (i32.const 1024) (i32.const 16)))
        (return (i32.const 0))))
    (call $status (call $round))
    (call $status (call $children_len))
    (call $status (call $child_read (i32.const 0) (i32.const 0) (i32.const 1024) (i32.const 16)))
    (call $status (call $enqueue_awaited (i32.const 16) (i32.const 5) (i32.const 48) (i32.const 9) (i64.const 0)))
    (call $status (call $enqueue (i32.const 16) (i32.const 5) (i32.const 64) (i32.const 9) (i64.const 250)))
    (call $status (call $enqueue_awaited (i32.const 16) (i32.const 0) (i32.const 48) (i32.const 9) (i64.const 0)))
    (call $status (call $enqueue_awaited (i32.const 32) (i32.const 5) (i32.const 48) (i32.const 9) (i64.const 0)))
    (loop $more
      (local.set $s (call $enqueue_awaited (i32.const 16) (i32.const 5) (i32.const 64) (i32.const 9) (i64.const 0)))
      (br_if $more (i32.eqz (local.get $s))))
    (call $status (local.get $s))
    (i32.const 4)))
