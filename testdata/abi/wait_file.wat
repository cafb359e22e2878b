;; Waits until the file its payload names (a path relative to the first directory the
;; manifest grants, fd 3) can be opened, checking every 5 ms (a poll_oneoff sleep), then
;; writes "released" to the output and returns ACK: a job that runs until the test
;; releases it by creating the file, whatever the machine's load. Without the
;; directory it waits until the job's timeout or the drain ends it.
(module
  (import "wasi_snapshot_preview1" "path_open" (func $path_open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_close" (func $fd_close (param i32) (result i32)))
  (import "wasi_snapshot_preview1" "poll_oneoff" (func $poll_oneoff (param i32 i32 i32 i32) (result i32)))
  (import "wasmjobs" "payload_read" (func $payload_read (param i32 i32) (result i32)))
  (import "wasmjobs" "output_write" (func $output_write (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 512) "released")
  (func (export "wasmjobs_abi_v1"))
  (func (export "wasmjobs_handle") (result i32)
    (local $n i32)
    (local.set $n (call $payload_read (i32.const 256) (i32.const 200)))
    ;; one clock subscription of 5 ms: tag 0 (clock) at 8, clock id 1 (monotonic) at
    ;; 16, timeout in ns at 24
    (i32.store8 (i32.const 8) (i32.const 0))
    (i32.store (i32.const 16) (i32.const 1))
    (i64.store (i32.const 24) (i64.const 5000000))
    (block $open
      (loop $wait
        ;; read rights only (fd_read = bit 1), the opened fd at 200
        (br_if $open (i32.eqz (call $path_open (i32.const 3) (i32.const 0) (i32.const 256) (local.get $n)
          (i32.const 0) (i64.const 2) (i64.const 2) (i32.const 0) (i32.const 200))))
        (drop (call $poll_oneoff (i32.const 0) (i32.const 64) (i32.const 1) (i32.const 128)))
        (br $wait)))
    (drop (call $fd_close (i32.load (i32.const 200))))
    (drop (call $output_write (i32.const 512) (i32.const 8)))
    (i32.const 0)))
