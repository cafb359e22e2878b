//go:build !wasip1

package wjhttp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	neturl "net/url"
	"slices"
	"strings"
	"syscall"
	"time"
	"unsafe"
)

// On other targets the http_* host functions are a stand-in, so that the package's
// tests run natively: requests go out through a transport of net/http's own (the one
// DefaultTransport was before this package replaced it), the stand-in follows up to 5
// redirects, refuses a URL outside fakeHost.allow as denied, and keeps the handles as
// the host does. A handler built with this package only runs under wasmjobs.

// fakeHost is the stand-in host of the native tests.
type fakeHost struct {
	// allow, when set, grants URLs: one it rejects fails as denied.
	allow    func(url string) bool
	requests map[int32]*fakeRequest
	next     int32
	started  []string // "METHOD URL\nheader lines" of each request started
}

type fakeRequest struct {
	cancel context.CancelFunc
	done   chan struct{} // closed when the head is in or the request failed
	resp   *http.Response
	status int32
	msg    string
}

var (
	realTransport = http.DefaultTransport.(*http.Transport).Clone()
	host          = &fakeHost{requests: map[int32]*fakeRequest{}}
)

func bytesAt(p *byte, n int32) []byte {
	if n == 0 || p == nil {
		return nil
	}
	return unsafe.Slice(p, n)
}

func httpStart(method *byte, methodLen int32, url *byte, urlLen int32, headers *byte, headersLen int32, body *byte, bodyLen int32) int32 {
	m, u := string(bytesAt(method, methodLen)), string(bytesAt(url, urlLen))
	host.started = append(host.started, m+" "+u+"\n"+string(bytesAt(headers, headersLen)))
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, m, u, bytes.NewReader(bytes.Clone(bytesAt(body, bodyLen))))
	if err != nil {
		cancel()
		return -2
	}
	for line := range strings.SplitSeq(string(bytesAt(headers, headersLen)), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			req.Header.Add(k, strings.TrimSpace(v))
		}
	}
	h := host.next
	host.next++
	r := &fakeRequest{cancel: cancel, done: make(chan struct{})}
	host.requests[h] = r
	client := &http.Client{Transport: realTransport, CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if len(via) > 5 {
			return &Error{Code: StatusTooManyRedirects, Message: "too many redirects: more than 5"}
		}
		if err := host.check(req.URL.String()); err != nil {
			return err
		}
		return nil
	}}
	go func() {
		defer close(r.done)
		if err := host.check(u); err != nil {
			r.status, r.msg = err.Code, err.Message
			return
		}
		resp, err := client.Do(req)
		var e *Error
		var ue *neturl.Error
		if err != nil && errors.As(err, &ue) && !errors.As(err, &e) {
			// As the host does: its messages name the URL without its query.
			if pu, perr := neturl.Parse(ue.URL); perr == nil {
				err = fmt.Errorf("%s %s: %w", ue.Op, redact(pu), ue.Err)
			}
		}
		switch {
		case err == nil:
			r.resp, r.status = resp, int32(resp.StatusCode)
		case errors.As(err, &e):
			r.status, r.msg = e.Code, e.Message
		case errors.Is(err, syscall.ECONNREFUSED):
			r.status, r.msg = StatusRefused, "connection refused: "+err.Error()
		default:
			r.status, r.msg = StatusConnection, "connection failed: "+err.Error()
		}
	}()
	return h
}

func (f *fakeHost) check(url string) *Error {
	if f.allow != nil && !f.allow(url) {
		return &Error{Code: StatusDenied, Message: "denied: " + url + " is not granted"}
	}
	return nil
}

// head waits for request h's head; nil for an unknown handle.
func head(h int32) *fakeRequest {
	r, ok := host.requests[h]
	if !ok {
		return nil
	}
	<-r.done
	return r
}

// answered waits for request h's head and returns the request when it has a response;
// otherwise nil and what a read of the response returns instead: -1 for no such
// request, the request's failure status for one that failed.
func answered(h int32) (*fakeRequest, int32) {
	r := head(h)
	if r == nil {
		return nil, -1
	}
	if r.resp == nil {
		return nil, r.status
	}
	return r, 0
}

func httpStatus(h int32) int32 {
	r := head(h)
	if r == nil {
		return -1
	}
	return r.status
}

func copyOut(s string, buf *byte, n int32) int32 {
	copy(bytesAt(buf, n), s)
	return int32(len(s))
}

func httpErrorRead(h int32, buf *byte, n int32) int32 {
	r := head(h)
	if r == nil || r.msg == "" {
		return -1
	}
	return copyOut(r.msg, buf, n)
}

func httpHeadersRead(h int32, buf *byte, n int32) int32 {
	r, failed := answered(h)
	if r == nil {
		return failed
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for k := range r.resp.Header {
			if !yield(k) {
				return
			}
		}
	})
	var b strings.Builder
	for _, k := range names {
		for _, v := range r.resp.Header[k] {
			fmt.Fprintf(&b, "%s: %s\n", k, v)
		}
	}
	return copyOut(b.String(), buf, n)
}

func httpURLRead(h int32, buf *byte, n int32) int32 {
	r, failed := answered(h)
	if r == nil {
		return failed
	}
	return copyOut(r.resp.Request.URL.String(), buf, n)
}

func httpBodyRead(h int32, buf *byte, n int32) int32 {
	r, failed := answered(h)
	if r == nil {
		return failed
	}
	if n == 0 {
		return -2
	}
	got, err := r.resp.Body.Read(bytesAt(buf, n))
	for got == 0 && err == nil {
		got, err = r.resp.Body.Read(bytesAt(buf, n))
	}
	if got > 0 {
		return int32(got)
	}
	if err == io.EOF {
		return 0
	}
	{
		r.status, r.msg = StatusConnection, "connection failed: "+err.Error()
		return StatusConnection
	}
}

func httpClose(h int32) int32 {
	r, ok := host.requests[h]
	if !ok {
		return -1
	}
	delete(host.requests, h)
	r.cancel()
	go func() {
		<-r.done
		if r.resp != nil {
			r.resp.Body.Close()
		}
	}()
	return 0
}

func httpWait(handles *int32, n int32, timeoutMs int64) int32 {
	hs := unsafe.Slice(handles, n)
	var timeout <-chan time.Time
	if timeoutMs >= 0 {
		t := time.NewTimer(time.Duration(timeoutMs) * time.Millisecond)
		defer t.Stop()
		timeout = t.C
	}
	for {
		for i, h := range hs {
			r, ok := host.requests[h]
			if !ok {
				return -2
			}
			select {
			case <-r.done:
				return int32(i)
			default:
			}
		}
		select {
		case <-timeout:
			return -1
		case <-time.After(time.Millisecond):
		}
	}
}
