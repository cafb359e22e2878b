//go:build wasip1

package wjhttp

// The ABI's outbound HTTP imports (the ABI specification's "Outbound HTTP (added)").

//go:wasmimport wasmjobs http_start
func httpStart(method *byte, methodLen int32, url *byte, urlLen int32, headers *byte, headersLen int32, body *byte, bodyLen int32) int32

//go:wasmimport wasmjobs http_status
func httpStatus(handle int32) int32

//go:wasmimport wasmjobs http_error_read
func httpErrorRead(handle int32, buf *byte, n int32) int32

//go:wasmimport wasmjobs http_headers_read
func httpHeadersRead(handle int32, buf *byte, n int32) int32

//go:wasmimport wasmjobs http_url_read
func httpURLRead(handle int32, buf *byte, n int32) int32

//go:wasmimport wasmjobs http_body_read
func httpBodyRead(handle int32, buf *byte, n int32) int32

//go:wasmimport wasmjobs http_close
func httpClose(handle int32) int32

//go:wasmimport wasmjobs http_wait
func httpWait(handles *int32, n int32, timeoutMs int64) int32
