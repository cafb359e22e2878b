module github.com/wasmjobs/wasmjobs

go 1.26

require (
	github.com/tetratelabs/wazero v1.12.0
	go.uber.org/goleak v1.3.0
)

require golang.org/x/sys v0.44.0 // indirect
