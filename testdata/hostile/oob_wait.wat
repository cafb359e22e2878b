;; Passes a pointer/length pair outside its one-page memory to a host function of
;; fan-out and fan-in, which the payload's first byte picks: s enqueue_awaited (queue),
;; t child_read (buffer; no child: the pair is checked first), u enqueue_awaited
;; (payload, after a queue in bounds). Every case must trap the
;; guest; none may harm the host. Its own module, apart from hostile/oob, because a
;; host whose backend keeps no waiting jobs refuses it at load.
(module
  (import "wasmjobs" "payload_read" (func $payload_read (param i32 i32) (result i32)))
  (import "wasmjobs" "enqueue_awaited" (func $enqueue_awaited (param i32 i32 i32 i32 i64) (result i32)))
  (import "wasmjobs" "child_read" (func $child_read (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "q")
  (func (export "wasmjobs_abi_v1"))
  (func (export "wasmjobs_handle") (result i32)
    (local $which i32)
    (drop (call $payload_read (i32.const 0) (i32.const 1)))
    (local.set $which (i32.load8_u (i32.const 0)))
    ;; 65530 + 16 runs past the end of the page
    (if (i32.eq (local.get $which) (i32.const 115)) (then (drop (call $enqueue_awaited (i32.const 65530) (i32.const 16) (i32.const 16) (i32.const 1) (i64.const 0)))))
    (if (i32.eq (local.get $which) (i32.const 116)) (then (drop (call $child_read (i32.const 0) (i32.const 0) (i32.const 65530) (i32.const 16)))))
    (if (i32.eq (local.get $which) (i32.const 117)) (then (drop (call $enqueue_awaited (i32.const 16) (i32.const 1) (i32.const 65530) (i32.const 16) (i64.const 0)))))
    (i32.const 0)))
