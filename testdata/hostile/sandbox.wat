;; Tries what a sandbox must refuse, by the payload's first byte, and writes what the
;; WASI call answered (errno, 0 is success) to the output:
;;   o: path_open "secret.txt" in the first preopened directory (fd 3), then read it:
;;      "open=E" and, on success, "data=" and up to 64 bytes
;;   x: path_open "../outside.txt" from fd 3: "escape=E"
;;   l: fd_readdir on fd 3: "ls=E"
;;   e: environ_sizes_get: "env=COUNT"
;;   s: sock_accept on fd 3: "sock=E"
(module
  (import "wasi_snapshot_preview1" "path_open" (func $path_open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_read" (func $fd_read (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_readdir" (func $fd_readdir (param i32 i32 i32 i64 i32) (result i32)))
  (import "wasi_snapshot_preview1" "environ_sizes_get" (func $environ_sizes_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "sock_accept" (func $sock_accept (param i32 i32 i32) (result i32)))
  (import "wasmjobs" "payload_read" (func $payload_read (param i32 i32) (result i32)))
  (import "wasmjobs" "output_write" (func $output_write (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "secret.txt")
  (data (i32.const 32) "../outside.txt")
  (data (i32.const 48) "open=")
  (data (i32.const 56) "escape=")
  (data (i32.const 64) "ls=")
  (data (i32.const 72) "env=")
  (data (i32.const 80) "sock=")
  (data (i32.const 88) " data=")
  (func (export "wasmjobs_abi_v1"))
  ;; writes n in decimal using 100..120 as scratch
  (func $num (param $n i32)
    (local $p i32)
    (local.set $p (i32.const 120))
    (loop $digits
      (local.set $p (i32.sub (local.get $p) (i32.const 1)))
      (i32.store8 (local.get $p) (i32.add (i32.const 48) (i32.rem_u (local.get $n) (i32.const 10))))
      (local.set $n (i32.div_u (local.get $n) (i32.const 10)))
      (br_if $digits (i32.ne (local.get $n) (i32.const 0))))
    (drop (call $output_write (local.get $p) (i32.sub (i32.const 120) (local.get $p)))))
  (func $open (param $path i32) (param $len i32) (result i32)
    ;; read rights only (fd_read = bit 1), the opened fd at 200
    (call $path_open (i32.const 3) (i32.const 0) (local.get $path) (local.get $len) (i32.const 0)
      (i64.const 2) (i64.const 2) (i32.const 0) (i32.const 200)))
  (func (export "wasmjobs_handle") (result i32)
    (local $sel i32) (local $e i32)
    (drop (call $payload_read (i32.const 0) (i32.const 1)))
    (local.set $sel (i32.load8_u (i32.const 0)))
    (if (i32.eq (local.get $sel) (i32.const 111)) ;; o
      (then
        (local.set $e (call $open (i32.const 16) (i32.const 10)))
        (drop (call $output_write (i32.const 48) (i32.const 5)))
        (call $num (local.get $e))
        (if (i32.eqz (local.get $e))
          (then
            ;; one iovec at 208: buffer 1024, 64 bytes; bytes read at 216
            (i32.store (i32.const 208) (i32.const 1024))
            (i32.store (i32.const 212) (i32.const 64))
            (drop (call $fd_read (i32.load (i32.const 200)) (i32.const 208) (i32.const 1) (i32.const 216)))
            (drop (call $output_write (i32.const 88) (i32.const 6)))
            (drop (call $output_write (i32.const 1024) (i32.load (i32.const 216))))))))
    (if (i32.eq (local.get $sel) (i32.const 120)) ;; x
      (then
        (local.set $e (call $open (i32.const 32) (i32.const 14)))
        (drop (call $output_write (i32.const 56) (i32.const 7)))
        (call $num (local.get $e))))
    (if (i32.eq (local.get $sel) (i32.const 108)) ;; l
      (then
        (local.set $e (call $fd_readdir (i32.const 3) (i32.const 1024) (i32.const 512) (i64.const 0) (i32.const 216)))
        (drop (call $output_write (i32.const 64) (i32.const 3)))
        (call $num (local.get $e))))
    (if (i32.eq (local.get $sel) (i32.const 101)) ;; e
      (then
        (drop (call $environ_sizes_get (i32.const 200) (i32.const 204)))
        (drop (call $output_write (i32.const 72) (i32.const 4)))
        (call $num (i32.load (i32.const 200)))))
    (if (i32.eq (local.get $sel) (i32.const 115)) ;; s
      (then
        (local.set $e (call $sock_accept (i32.const 3) (i32.const 0) (i32.const 200)))
        (drop (call $output_write (i32.const 80) (i32.const 5)))
        (call $num (local.get $e))))
    (i32.const 0)))
