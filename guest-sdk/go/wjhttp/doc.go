// Package wjhttp makes net/http work in a wasmjobs handler written in Go. Import it
// for its side effect and use the standard library:
//
//	import (
//		"net/http"
//
//		wasmjobs "github.com/wasmjobs/wasmjobs/guest-sdk/go"
//		_ "github.com/wasmjobs/wasmjobs/guest-sdk/go/wjhttp"
//	)
//
//	func handle(job *wasmjobs.Job) error {
//		resp, err := http.Get("http://127.0.0.1:9000/status")
//		if err != nil {
//			return err // such as: Get "http://127.0.0.1:9000/status": connection refused: ...
//		}
//		defer resp.Body.Close()
//		...
//	}
//
// Its init sets http.DefaultTransport to a Transport that sends each request through
// the host's http_* functions (the ABI specification's "Outbound HTTP (added)"),
// so http.Get, http.Post, http.NewRequestWithContext with http.DefaultClient, and an
// http.Client with a Timeout all go through the host, under the grant of the module's
// manifest ([http]); without a grant every request fails with wasmjobs.ErrNotPermitted.
// The core package does not import net/http: a handler that makes no requests does not
// carry it.
//
// What the host does for a request: it checks the URL (and every redirect hop's)
// against the grant, follows up to 5 redirects itself (so the response is the final
// one, and resp.Request.URL the final URL; an http.Client's CheckRedirect, and
// http.ErrUseLastResponse, have no effect: the client never sees a redirect), bounds it by the grant's timeout and the
// job's deadline, and decompresses gzip unless the request set its own
// Accept-Encoding. The request body is read whole first (at most MaxRequestBody); the
// response body is read from the host in pieces as it is read, and the request is
// closed at the end of the body or on Close. Headers the transport owns (Host,
// Connection, Transfer-Encoding, ...) are refused by the host: a request setting them
// fails with wasmjobs.ErrBadArgument. So does a header name outside RFC 9110's token
// characters or a value holding CR, LF or NUL, refused before anything reaches the
// host (the host reads headers as lines, and a line feed in a value would add a header).
//
// Deadlines: a Go guest's timers cannot fire while it waits inside a host call, so the
// transport hands the remaining time of the request context's deadline (which is also
// how an http.Client's Timeout reaches a transport) to the host as the wait for the
// response head, and closes the request when it passes, returning
// context.DeadlineExceeded, wrapped. A body read in progress is bounded by the host
// (the grant's timeout, the job's deadline); the context's deadline is checked between
// reads.
//
// A Go guest is single-threaded on wasip1: its requests run one at a time, even from
// several goroutines (the ABI's http_wait on several requests is what the JavaScript
// SDK's Promise.all uses).
//
// Failures on the host are *Error values carrying the ABI status and the host's
// message; test their kind with errors.Is and the sentinels ErrDenied, ErrBlocked,
// ErrDNS, ErrRefused, ErrTLS, ErrTimeout, ErrTooLarge, ErrTooManyRequests,
// ErrRateLimited, ErrCircuitOpen, ErrConnection and ErrTooManyRedirects. RetryAfter
// settles a job after a 429 or 503 the way its Retry-After header asks.
//
// Secrets in URLs: this package's own messages name a URL as scheme://host/path, but
// net/http wraps every error of a request in a *url.Error whose Error() holds the full
// URL, query included. A handler whose URLs carry secrets (a token in the query) should
// not put err.Error() into a reason or a log line, which the job record keeps: unwrap
// the *url.Error and report its Err with a URL of its own redacting.
package wjhttp
