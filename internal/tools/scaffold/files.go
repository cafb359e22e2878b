package scaffold

//go:generate go test -run TestSDKCopiesAreCurrent -update

// sdkFiles maps each copy in sdk/ to its source under guest-sdk/. The Go SDK is a module
// of its own, which this module cannot embed from, so the SDKs are copied here; after
// changing an SDK run `go generate ./internal/tools/scaffold`. TestSDKCopiesAreCurrent fails
// until the copies match.
var sdkFiles = map[string]string{
	"go.mod.txt":               "go/go.mod",
	"go-abi.go.txt":            "go/abi.go",
	"go-wasmjobs.go.txt":       "go/wasmjobs.go",
	"go-job.go.txt":            "go/job.go",
	"go-imports_wasip1.go.txt": "go/imports_wasip1.go",
	"go-host_other.go.txt":     "go/host_other.go",
	"go-trap.go.txt":           "go/trap.go",
	"go-trap_wasm.s.txt":       "go/trap_wasm.s",
	"wasmjobs.h.txt":           "c/wasmjobs.h",
	"rust-lib.rs.txt":          "rust/src/lib.rs",
	"as-index.ts.txt":          "assemblyscript/assembly/index.ts",
	"js-wasmjobs.js.txt":       "javascript/wasmjobs.js",
	"js-wasmjobs.d.ts.txt":     "javascript/wasmjobs.d.ts",
	"js-build.mjs.txt":         "javascript/build.mjs",
}
