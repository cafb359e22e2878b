module github.com/wasmjobs/wasmjobs/guest-sdk/go

go 1.26
