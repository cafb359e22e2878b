;; Records its completion: sleeps for the milliseconds its payload holds in decimal,
;; then stages a child job on the queue named by the header "results" whose payload is
;; this job's id, and returns ACK. The crash test counts the ids.
(module
  (import "wasi_snapshot_preview1" "poll_oneoff" (func $poll_oneoff (param i32 i32 i32 i32) (result i32)))
  (import "wasmjobs" "payload_read" (func $payload_read (param i32 i32) (result i32)))
  (import "wasmjobs" "meta_read" (func $meta_read (param i32 i32 i32) (result i32)))
  (import "wasmjobs" "header_read" (func $header_read (param i32 i32 i32 i32) (result i32)))
  (import "wasmjobs" "enqueue" (func $enqueue (param i32 i32 i32 i32 i64) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "results")
  (func (export "wasmjobs_abi_v1"))
  (func (export "wasmjobs_handle") (result i32)
    (local $idlen i32) (local $qlen i32) (local $n i32) (local $i i32) (local $c i32) (local $ms i64)
    (local.set $n (call $payload_read (i32.const 768) (i32.const 16)))
    (block $done
      (loop $digits
        (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
        (local.set $c (i32.sub (i32.load8_u (i32.add (i32.const 768) (local.get $i))) (i32.const 48)))
        (br_if $done (i32.gt_u (local.get $c) (i32.const 9)))
        (local.set $ms (i64.add (i64.mul (local.get $ms) (i64.const 10)) (i64.extend_i32_u (local.get $c))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $digits)))
    (if (i64.gt_u (local.get $ms) (i64.const 0))
      (then
        (i32.store8 (i32.const 40) (i32.const 0))
        (i32.store (i32.const 48) (i32.const 1))
        (i64.store (i32.const 56) (i64.mul (local.get $ms) (i64.const 1000000)))
        (drop (call $poll_oneoff (i32.const 32) (i32.const 96) (i32.const 1) (i32.const 160)))))
    (local.set $idlen (call $meta_read (i32.const 0) (i32.const 256) (i32.const 64)))
    (local.set $qlen (call $header_read (i32.const 16) (i32.const 7) (i32.const 512) (i32.const 200)))
    (if (i32.lt_s (local.get $qlen) (i32.const 0)) (then (return (i32.const 3))))
    (if (i32.ne (call $enqueue (i32.const 512) (local.get $qlen) (i32.const 256) (local.get $idlen) (i64.const 0)) (i32.const 0))
      (then (return (i32.const 1))))
    (i32.const 0)))
