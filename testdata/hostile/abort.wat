;; Calls AssemblyScript's env.abort with the message "boom" in file "a.ts", line 3,
;; column 7, laid out as AssemblyScript lays out strings (UTF-16, byte length before).
(module
  (import "env" "abort" (func $abort (param i32 i32 i32 i32)))
  (memory (export "memory") 1)
  (data (i32.const 60) "\08\00\00\00b\00o\00o\00m\00")
  (data (i32.const 92) "\08\00\00\00a\00.\00t\00s\00")
  (func (export "wasmjobs_abi_v1"))
  (func (export "wasmjobs_handle") (result i32)
    (call $abort (i32.const 64) (i32.const 96) (i32.const 3) (i32.const 7))
    (i32.const 0)))
