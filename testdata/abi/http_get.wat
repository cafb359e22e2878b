;; Outbound HTTP: GETs the URL in the payload with the headers "X-Test: a" and
;; "X-Test: b", and writes to its output:
;;   "<status>\n", then the response headers, "url <final URL>\n" and the body, read
;;   1000 bytes at a time; a failed body read ends it with "\nbody <status>";
;;   or, when the request fails, "<status>\n<error message>";
;;   or, when http_start refuses it, "start <status>".
;; It closes the request and acks.
(module
  (import "wasmjobs" "payload_read" (func $payload_read (param i32 i32) (result i32)))
  (import "wasmjobs" "output_write" (func $output_write (param i32 i32) (result i32)))
  (import "wasmjobs" "http_start" (func $http_start (param i32 i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "wasmjobs" "http_status" (func $http_status (param i32) (result i32)))
  (import "wasmjobs" "http_error_read" (func $http_error_read (param i32 i32 i32) (result i32)))
  (import "wasmjobs" "http_headers_read" (func $http_headers_read (param i32 i32 i32) (result i32)))
  (import "wasmjobs" "http_url_read" (func $http_url_read (param i32 i32 i32) (result i32)))
  (import "wasmjobs" "http_body_read" (func $http_body_read (param i32 i32 i32) (result i32)))
  (import "wasmjobs" "http_close" (func $http_close (param i32) (result i32)))
  (memory (export "memory") 2)
  (data (i32.const 4096) "GET")
  (data (i32.const 4112) "X-Test: a\nX-Test: b\n") ;; 20 bytes
  (data (i32.const 4160) "start ")                 ;; 6
  (data (i32.const 4176) "url ")                   ;; 4
  (data (i32.const 4192) "\nbody ")                ;; 6
  (data (i32.const 4208) "\n")
  (func (export "wasmjobs_abi_v1"))
  (func $out (param $p i32) (param $n i32)
    (drop (call $output_write (local.get $p) (local.get $n))))
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
    (call $out (local.get $p) (i32.sub (i32.const 8200) (local.get $p))))
  ;; $copy writes the first min(n, 65536) bytes of the buffer at 65536.
  (func $copy (param $n i32)
    (if (i32.gt_s (local.get $n) (i32.const 65536)) (then (local.set $n (i32.const 65536))))
    (if (i32.gt_s (local.get $n) (i32.const 0)) (then (call $out (i32.const 65536) (local.get $n)))))
  (func (export "wasmjobs_handle") (result i32)
    (local $len i32) (local $h i32) (local $s i32) (local $n i32)
    (local.set $len (call $payload_read (i32.const 0) (i32.const 4096)))
    (local.set $h (call $http_start (i32.const 4096) (i32.const 3) (i32.const 0) (local.get $len)
      (i32.const 4112) (i32.const 20) (i32.const 0) (i32.const 0)))
    (if (i32.lt_s (local.get $h) (i32.const 0))
      (then (call $out (i32.const 4160) (i32.const 6)) (call $num (local.get $h)) (return (i32.const 0))))
    (local.set $s (call $http_status (local.get $h)))
    (call $num (local.get $s))
    (call $out (i32.const 4208) (i32.const 1))
    (if (i32.lt_s (local.get $s) (i32.const 0))
      (then
        (call $copy (call $http_error_read (local.get $h) (i32.const 65536) (i32.const 65536)))
        (drop (call $http_close (local.get $h)))
        (return (i32.const 0))))
    (call $copy (call $http_headers_read (local.get $h) (i32.const 65536) (i32.const 65536)))
    (call $out (i32.const 4176) (i32.const 4))
    (call $copy (call $http_url_read (local.get $h) (i32.const 65536) (i32.const 65536)))
    (call $out (i32.const 4208) (i32.const 1))
    (block $end
      (loop $read
        (local.set $n (call $http_body_read (local.get $h) (i32.const 65536) (i32.const 1000)))
        (br_if $end (i32.eqz (local.get $n)))
        (if (i32.lt_s (local.get $n) (i32.const 0))
          (then (call $out (i32.const 4192) (i32.const 6)) (call $num (local.get $n)) (br $end)))
        (call $copy (local.get $n))
        (br $read)))
    (drop (call $http_close (local.get $h)))
    (i32.const 0)))
