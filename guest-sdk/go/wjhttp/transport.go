package wjhttp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
	"unsafe"

	wasmjobs "github.com/wasmjobs/wasmjobs/guest-sdk/go"
)

// MaxRequestBody bounds the request body the transport reads to send (the body is read
// whole, then handed to the host): 10 MiB, the host's default max_request_body. A
// larger body fails with wasmjobs.ErrLimitExceeded before anything is sent; the
// manifest's max_request_body still applies on the host.
var MaxRequestBody int64 = 10 << 20

// Transport is the http.RoundTripper of the wasmjobs host: http.DefaultTransport once
// this package is imported. Its zero value is ready to use.
type Transport struct{}

func init() { http.DefaultTransport = &Transport{} }

// RoundTrip sends req through the host and returns its final response (the host
// follows redirects). A failure on the host is an *Error; a deadline of req's context
// that passes first is context.DeadlineExceeded, wrapped.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	payload, err := readBody(req)
	if err != nil {
		return nil, err
	}
	ctx := req.Context()
	method, target := req.Method, req.URL.String()
	if method == "" {
		method = http.MethodGet
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("wasmjobs/http: %s %s: %w", method, redact(req.URL), err)
	}
	headers, err := headerLines(req.Header)
	if err != nil {
		return nil, fmt.Errorf("wasmjobs/http: %s %s: %w", method, redact(req.URL), err)
	}
	h := httpStart(ptr(method), int32(len(method)), ptr(target), int32(len(target)), ptr(headers), int32(len(headers)), bufPtr(payload), int32(len(payload)))
	if h < 0 {
		return nil, fmt.Errorf("wasmjobs/http: %s %s: %w", method, redact(req.URL), startError(h))
	}
	// A guest's timers cannot fire while it is inside a host call, so a deadline of the
	// request's context is handed to the host as the wait's timeout.
	deadline, hasDeadline := ctx.Deadline()
	if hasDeadline {
		if !waitHead(h, time.Until(deadline)) {
			httpClose(h)
			err := ctx.Err()
			if err == nil || errors.Is(err, context.DeadlineExceeded) {
				err = context.DeadlineExceeded
			}
			return nil, fmt.Errorf("wasmjobs/http: %s %s: awaiting the response: %w", method, redact(req.URL), err)
		}
	}
	status := httpStatus(h)
	if status < 0 {
		err := failure(h, status)
		httpClose(h)
		return nil, err
	}
	raw, s := readString(func(buf *byte, n int32) int32 { return httpHeadersRead(h, buf, n) })
	if s < 0 {
		err := failure(h, s)
		httpClose(h)
		return nil, err
	}
	final, s := readString(func(buf *byte, n int32) int32 { return httpURLRead(h, buf, n) })
	if s < 0 {
		err := failure(h, s)
		httpClose(h)
		return nil, err
	}
	resp := &http.Response{
		Status:     strconv.Itoa(int(status)) + " " + http.StatusText(int(status)),
		StatusCode: int(status),
		Proto:      "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        parseHeaders(raw),
		ContentLength: -1,
		Request:       req,
		Body:          &body{handle: h, deadline: deadline},
	}
	if n, err := strconv.ParseInt(resp.Header.Get("Content-Length"), 10, 64); err == nil && n >= 0 {
		resp.ContentLength = n
	}
	if u, err := url.Parse(final); err == nil && final != target {
		// resp.Request is the request that got the response: the last hop's.
		r := req.Clone(ctx)
		r.URL, r.Host = u, u.Host
		resp.Request = r
	}
	return resp, nil
}

// waitHead waits up to d for the head of request h, reporting whether it came (or the
// request failed) in time.
func waitHead(h int32, d time.Duration) bool {
	if d <= 0 {
		return httpWait(&h, 1, 0) == 0
	}
	ms := int64((d + time.Millisecond - 1) / time.Millisecond)
	return httpWait(&h, 1, ms) == 0
}

// readBody reads req's body whole, bounded by MaxRequestBody, and closes it.
func readBody(req *http.Request) ([]byte, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return nil, nil
	}
	defer req.Body.Close()
	b, err := io.ReadAll(io.LimitReader(req.Body, MaxRequestBody+1))
	if err != nil {
		return nil, fmt.Errorf("wasmjobs/http: reading the request body: %w", err)
	}
	if int64(len(b)) > MaxRequestBody {
		return nil, fmt.Errorf("wasmjobs/http: a request body past %d bytes: %w", MaxRequestBody, wasmjobs.ErrLimitExceeded)
	}
	return b, nil
}

// redact is u as scheme://host/path, for messages: no user information, query or
// fragment, which may carry secrets (URL.Redacted keeps the query).
func redact(u *url.URL) string {
	r := url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path, RawPath: u.RawPath}
	return r.String()
}

// headerLines writes h as the ABI's "Name: value\n" lines, names sorted, a repeated
// name on one line per value. A name outside RFC 9110's token characters, or a value
// holding CR, LF or NUL, is refused (wrapping wasmjobs.ErrBadArgument): the host splits
// the lines on LF, so such a value would become a second header of the caller's making.
func headerLines(h http.Header) (string, error) {
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, k)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, k := range names {
		if !validName(k) {
			return "", fmt.Errorf("header name %q: %w", k, wasmjobs.ErrBadArgument)
		}
		for _, v := range h[k] {
			if strings.ContainsAny(v, "\r\n\x00") {
				return "", fmt.Errorf("header %s: a value holding CR, LF or NUL: %w", k, wasmjobs.ErrBadArgument)
			}
			b.WriteString(k)
			b.WriteString(": ")
			b.WriteString(v)
			b.WriteByte('\n')
		}
	}
	return b.String(), nil
}

// validName reports whether name is an RFC 9110 token (the guest SDK carries no
// dependency for the few lines golang.org/x/net/http/httpguts would give).
func validName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// parseHeaders reads the host's "Name: value\n" lines, keeping repeated names.
func parseHeaders(raw string) http.Header {
	h := http.Header{}
	for line := range strings.SplitSeq(raw, "\n") {
		name, value, ok := strings.Cut(strings.TrimSuffix(line, "\r"), ":")
		if !ok || name == "" {
			continue
		}
		h.Add(name, strings.TrimLeft(value, " \t"))
	}
	return h
}

// startError is http_start's refusal as an error.
func startError(s int32) error {
	switch s {
	case -2:
		return wasmjobs.ErrBadArgument
	case -3:
		return wasmjobs.ErrLimitExceeded
	case -4:
		return fmt.Errorf("%w: the manifest grants no [http]", wasmjobs.ErrNotPermitted)
	}
	return &Error{Code: s}
}

// failure is request h's failure status s, with the host's message.
func failure(h, s int32) error {
	msg, n := readString(func(buf *byte, size int32) int32 { return httpErrorRead(h, buf, size) })
	if n < 0 {
		msg = ""
	}
	return &Error{Code: s, Message: msg}
}

// readString reads a value of the host through read, growing the buffer to the
// length the host reports; a negative status is returned as it is.
func readString(read func(buf *byte, n int32) int32) (string, int32) {
	buf := make([]byte, 512)
	for {
		n := read(&buf[0], int32(len(buf)))
		if n < 0 {
			return "", n
		}
		if int(n) <= len(buf) {
			return string(buf[:n]), n
		}
		buf = make([]byte, n)
	}
}

// body is a response body, read from the host in pieces; its request is closed at
// the end of the body, on a failure, and on Close.
type body struct {
	handle   int32
	deadline time.Time // of the request's context; zero for none
	closed   bool
	err      error // returned again by every read after the first failure
}

// Read reads the next bytes of the body. The host bounds each read by the grant's
// timeout and the job's deadline; the context's deadline is checked between reads
// (a read in progress cannot be cut short by the guest).
func (b *body) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if b.closed {
		return 0, errors.New("wasmjobs/http: read on a closed response body")
	}
	if len(p) == 0 {
		return 0, nil
	}
	if !b.deadline.IsZero() && !time.Now().Before(b.deadline) {
		b.err = fmt.Errorf("wasmjobs/http: reading the response body: %w", context.DeadlineExceeded)
		b.Close()
		return 0, b.err
	}
	n := httpBodyRead(b.handle, &p[0], int32(min(len(p), 1<<30)))
	switch {
	case n > 0:
		return int(n), nil
	case n == 0:
		b.err = io.EOF
	default:
		b.err = failure(b.handle, n)
	}
	b.Close()
	return 0, b.err
}

// Close ends the request, if the body was not read to its end.
func (b *body) Close() error {
	if !b.closed {
		b.closed = true
		httpClose(b.handle)
	}
	return nil
}

// ptr points at a string's bytes (nil for an empty one: the host reads nothing).
func ptr(s string) *byte { return unsafe.StringData(s) }

// bufPtr points at a slice's bytes (nil for an empty one).
func bufPtr(b []byte) *byte {
	if len(b) == 0 {
		return nil
	}
	return &b[0]
}
