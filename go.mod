module github.com/wasmjobs/wasmjobs

go 1.26
