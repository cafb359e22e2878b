;; Outbound HTTP from a hostile or busy guest. The payload's first byte picks the mode,
;; the rest is a URL:
;;   o  starts GETs of the URL until http_start refuses one, never closing any; writes
;;      "<started> <status of the refusal>", then waits up to 1 s for the first head
;;      (so that the requests reach the server before the job ends)
;;   w  starts two GETs, waits for the first head with http_wait (no timeout), writes
;;      "<index> <its status> <the other's status>", then closes neither
;;   p  starts one GET and polls it with http_wait(timeout 0); writes the result
;;   h  starts one GET and waits for its status: a request that hangs holds it there
;;      until the job's deadline
;;   l  starts one GET (handle 0) and polls a list of 4 handles, each 0: one more
;;      than max_requests = 3; writes the result
;; and acks.
(module
  (import "wasmjobs" "payload_len" (func $payload_len (result i32)))
  (import "wasmjobs" "payload_read" (func $payload_read (param i32 i32) (result i32)))
  (import "wasmjobs" "output_write" (func $output_write (param i32 i32) (result i32)))
  (import "wasmjobs" "http_start" (func $http_start (param i32 i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "wasmjobs" "http_status" (func $http_status (param i32) (result i32)))
  (import "wasmjobs" "http_wait" (func $http_wait (param i32 i32 i64) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 4096) "GET")
  (data (i32.const 4112) " ")
  (func (export "wasmjobs_abi_v1"))
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
    (local $mode i32) (local $h i32) (local $n i32) (local $i i32)
    (drop (call $payload_read (i32.const 0) (i32.const 4096)))
    (local.set $mode (i32.load8_u (i32.const 0)))
    (if (i32.eq (local.get $mode) (i32.const 111)) ;; o
      (then
        (block $done
          (loop $more
            (local.set $h (call $get))
            (br_if $done (i32.lt_s (local.get $h) (i32.const 0)))
            (local.set $n (i32.add (local.get $n) (i32.const 1)))
            (br $more)))
        (call $num (local.get $n)) (call $space) (call $num (local.get $h))
        (i32.store (i32.const 9000) (i32.const 0))
        (drop (call $http_wait (i32.const 9000) (i32.const 1) (i64.const 1000)))))
    (if (i32.eq (local.get $mode) (i32.const 119)) ;; w
      (then
        (i32.store (i32.const 9000) (call $get))
        (i32.store (i32.const 9004) (call $get))
        (local.set $i (call $http_wait (i32.const 9000) (i32.const 2) (i64.const -1)))
        (call $num (local.get $i)) (call $space)
        (call $num (call $http_status (i32.load (i32.add (i32.const 9000) (i32.mul (local.get $i) (i32.const 4))))))
        (call $space)
        (call $num (call $http_status (i32.load (i32.sub (i32.const 9004) (i32.mul (local.get $i) (i32.const 4))))))))
    (if (i32.eq (local.get $mode) (i32.const 112)) ;; p
      (then
        (i32.store (i32.const 9000) (call $get))
        (call $num (call $http_wait (i32.const 9000) (i32.const 1) (i64.const 0)))))
    (if (i32.eq (local.get $mode) (i32.const 108)) ;; l
      (then
        (i32.store (i32.const 9000) (call $get))
        (i64.store (i32.const 9004) (i64.const 0))
        (i32.store (i32.const 9012) (i32.const 0))
        (call $num (call $http_wait (i32.const 9000) (i32.const 4) (i64.const 0)))))
    (if (i32.eq (local.get $mode) (i32.const 104)) ;; h
      (then (call $num (call $http_status (call $get)))))
    (i32.const 0)))
