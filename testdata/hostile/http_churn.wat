;; Outbound HTTP from a guest that churns or drains. The payload's first byte picks the
;; mode, the rest is a URL:
;;   c  starts a GET of the URL, waits for its status and closes it, again and again
;;      until http_start refuses one; writes "<started> <answered 200> <the refusal>"
;;      (under max_requests = 10000: "10000 10000 -17")
;;   n  starts GETs of the URL until http_start refuses one and closes none, nor waits
;;      for any; writes "<started> <the refusal>" (the host closes them at settle)
;;   r  starts one GET and reads its body 64 KiB at a time, keeping none of it; writes
;;      "<status> <body bytes read> <the last read>" (0 at the end of the body, or the
;;      failure status that cut it), or "<status>" when the request failed
;; and acks.
(module
  (import "wasmjobs" "payload_len" (func $payload_len (result i32)))
  (import "wasmjobs" "payload_read" (func $payload_read (param i32 i32) (result i32)))
  (import "wasmjobs" "output_write" (func $output_write (param i32 i32) (result i32)))
  (import "wasmjobs" "http_start" (func $http_start (param i32 i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "wasmjobs" "http_status" (func $http_status (param i32) (result i32)))
  (import "wasmjobs" "http_body_read" (func $http_body_read (param i32 i32 i32) (result i32)))
  (import "wasmjobs" "http_close" (func $http_close (param i32) (result i32)))
  (memory (export "memory") 2)
  (data (i32.const 4096) "GET")
  (data (i32.const 4112) " ")
  (func (export "wasmjobs_abi_v1"))
  ;; $num writes a decimal number, built backwards from 8200.
  (func $num (param $v i32)
    (local $p i32) (local $neg i32)
    (local.set $p (i32.const 8200))
    (if (i32.lt_s (local.get $v) (i32.const 0))
      (then (local.set $neg (i32.const 1)) (local.set $v (i32.sub (i32.const 0) (local.get $v)))))
    (loop $l
      (local.set $p (i32.sub (local.get $p) (i32.const 1)))
      (i32.store8 (local.get $p) (i32.add (i32.const 48) (i32.rem_u (local.get $v) (i32.const 10))))
      (local.set $v (i32.div_u (local.get $v) (i32.const 10)))
      (br_if $l (local.get $v)))
    (if (local.get $neg)
      (then (local.set $p (i32.sub (local.get $p) (i32.const 1))) (i32.store8 (local.get $p) (i32.const 45))))
    (drop (call $output_write (local.get $p) (i32.sub (i32.const 8200) (local.get $p)))))
  (func $space (drop (call $output_write (i32.const 4112) (i32.const 1))))
  (func $get (result i32)
    (call $http_start (i32.const 4096) (i32.const 3) (i32.const 1) (i32.sub (call $payload_len) (i32.const 1))
      (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 0)))
  (func (export "wasmjobs_handle") (result i32)
    (local $mode i32) (local $h i32) (local $n i32) (local $ok i32) (local $s i32) (local $r i32)
    (drop (call $payload_read (i32.const 0) (i32.const 4096)))
    (local.set $mode (i32.load8_u (i32.const 0)))
    (if (i32.eq (local.get $mode) (i32.const 99)) ;; c
      (then
        (block $done
          (loop $more
            (local.set $h (call $get))
            (br_if $done (i32.lt_s (local.get $h) (i32.const 0)))
            (local.set $n (i32.add (local.get $n) (i32.const 1)))
            (if (i32.eq (call $http_status (local.get $h)) (i32.const 200))
              (then (local.set $ok (i32.add (local.get $ok) (i32.const 1)))))
            (drop (call $http_close (local.get $h)))
            (br $more)))
        (call $num (local.get $n)) (call $space) (call $num (local.get $ok)) (call $space) (call $num (local.get $h))))
    (if (i32.eq (local.get $mode) (i32.const 110)) ;; n
      (then
        (block $done
          (loop $more
            (local.set $h (call $get))
            (br_if $done (i32.lt_s (local.get $h) (i32.const 0)))
            (local.set $n (i32.add (local.get $n) (i32.const 1)))
            (br $more)))
        (call $num (local.get $n)) (call $space) (call $num (local.get $h))))
    (if (i32.eq (local.get $mode) (i32.const 114)) ;; r
      (then
        (local.set $h (call $get))
        (local.set $s (call $http_status (local.get $h)))
        (call $num (local.get $s))
        (if (i32.ge_s (local.get $s) (i32.const 0))
          (then
            (block $end
              (loop $read
                (local.set $r (call $http_body_read (local.get $h) (i32.const 65536) (i32.const 65536)))
                (br_if $end (i32.le_s (local.get $r) (i32.const 0)))
                (local.set $n (i32.add (local.get $n) (local.get $r)))
                (br $read)))
            (call $space) (call $num (local.get $n)) (call $space) (call $num (local.get $r))))
        (drop (call $http_close (local.get $h)))))
    (i32.const 0)))
