module github.com/wasmjobs/wasmjobs/examples/deliver-webhook

go 1.26

require github.com/wasmjobs/wasmjobs/guest-sdk/go v0.0.0

replace github.com/wasmjobs/wasmjobs/guest-sdk/go => ../../guest-sdk/go
