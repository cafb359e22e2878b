package host

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/tetratelabs/wazero/api"

	"github.com/wasmjobs/wasmjobs/abi"
	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/internal/outbound"
	"github.com/wasmjobs/wasmjobs/worker"
)

// httpCall is a request of the current call, by its handle.
type httpCall struct {
	call   *outbound.Call
	target string          // method and URL without its query, for the job's log
	err    *outbound.Error // the first failure seen (head or body), for http_error_read
}

// httpState is the outbound HTTP of one call: the module's client (nil: no grant),
// the call's session, made at its first request, and its requests by handle.
type httpState struct {
	client  *outbound.Client
	session *outbound.Session
	calls   map[int32]*httpCall
	next    int32
	// outage, once the session is closed, is when the breakers its calls found open
	// let calls through again (outbound.Session.CircuitOpen); nil when none was.
	outage *time.Time
	// limited, once the session is closed, is when the limits of [http.limits]
	// that held its calls back would have let them go (outbound.Session.RateLimited).
	limited *time.Time
	// failed, once the session is closed, says a call failed in a way the breakers
	// count (outbound.Session.DestinationFailed).
	failed  bool
	records []outbound.CallRecord // of the sessions closed so far, for end
}

// close ends the call's requests left open: a request a guest never closes is closed
// when its call ends. It keeps the outage the session met.
func (h *httpState) close() {
	if h.session != nil {
		h.session.Close()
		if until, ok := h.session.CircuitOpen(); ok {
			h.outage = &until
		}
		if until, ok := h.session.RateLimited(); ok {
			h.limited = &until
		}
		h.failed = h.failed || h.session.DestinationFailed()
		h.records = append(h.records, h.session.Records()...)
	}
	h.session, h.calls, h.next = nil, nil, 0
}

// end closes the requests left open and returns the records of the requests made
// since the state was reset (the job's), in start order.
func (h *httpState) end() []outbound.CallRecord {
	h.close()
	recs := h.records
	h.records = nil
	return recs
}

// MaxResultCalls bounds the calls a Handler returns in a job's result
// (worker.Result.Calls), the first ones; the rest are counted in CallsDropped.
const MaxResultCalls = 50

// HTTPCall is one outbound HTTP request of a module's job, as Config.OnHTTPCall
// receives it: labels of bounded values, for metrics.
type HTTPCall struct {
	// Module is the module's name.
	Module string
	// Grant is the [http] allow entry that matched the URL; "" for a denied URL.
	Grant string
	// Outcome is the response's status class ("2xx" to "5xx") or the failure's label:
	// denied, blocked, dns, refused, tls, timeout, too_large, rate_limited,
	// circuit_open, connection, too_many_redirects, cancelled, ...
	Outcome string
	// Duration is how long the request took: from its start to the first of its
	// failure, its body's end (read to EOF or failed) and its close.
	Duration time.Duration
}

// calls turns a run's request records into the job's calls, and reports each to the
// engine's OnHTTPCall.
func (m *Module) calls(recs []outbound.CallRecord) []worker.Call {
	if len(recs) == 0 {
		return nil
	}
	out := make([]worker.Call, len(recs))
	for i, r := range recs {
		out[i] = worker.Call{Method: r.Method, Target: r.Origin, Path: r.Path, Status: r.Status, Error: r.Error, Duration: r.Duration, Bytes: r.Bytes}
		if f := m.e.onHTTPCall; f != nil {
			f(HTTPCall{Module: m.name, Grant: r.Grant, Outcome: r.Outcome(), Duration: r.Duration})
		}
	}
	return out
}

// httpStatusOf is the ABI status of a failure's kind.
func httpStatusOf(k outbound.Kind) int32 {
	if s, ok := httpStatuses[k]; ok {
		return s
	}
	return abi.StatusHTTPConnection
}

// httpStatuses are the ABI's statuses of the outbound failures, by kind; a kind not
// listed (a failed connection) is StatusHTTPConnection.
var httpStatuses = map[outbound.Kind]int32{
	outbound.KindBadRequest:       abi.StatusBadArgument,
	outbound.KindDenied:           abi.StatusHTTPDenied,
	outbound.KindBlocked:          abi.StatusHTTPBlocked,
	outbound.KindDNS:              abi.StatusHTTPDNS,
	outbound.KindRefused:          abi.StatusHTTPRefused,
	outbound.KindTLS:              abi.StatusHTTPTLS,
	outbound.KindTimeout:          abi.StatusHTTPTimeout,
	outbound.KindTooLarge:         abi.StatusHTTPTooLarge,
	outbound.KindTooManyRequests:  abi.StatusHTTPTooManyRequests,
	outbound.KindRateLimited:      abi.StatusHTTPRateLimited,
	outbound.KindCircuitOpen:      abi.StatusHTTPCircuitOpen,
	outbound.KindTooManyRedirects: abi.StatusHTTPTooManyRedirects,
	outbound.KindRequestTooLarge:  abi.StatusLimitExceeded,
}

// fail records a request's failure (once, logged at the job with its reason) and
// returns its status.
func (st *callState) httpFail(c *httpCall, err error) int32 {
	var e *outbound.Error
	if !errors.As(err, &e) {
		e = &outbound.Error{Kind: outbound.KindConnection, Msg: err.Error(), Err: err}
	}
	if c.err == nil {
		c.err = e
		st.emit(slog.LevelWarn, fmt.Sprintf("http %s: %v", c.target, e))
	}
	return httpStatusOf(e.Kind)
}

// parseHeaderLines reads "Name: value\n" lines (a CR before the LF is allowed; empty
// lines are skipped; names may repeat).
func parseHeaderLines(b []byte) (http.Header, bool) {
	h := http.Header{}
	for line := range strings.SplitSeq(string(b), "\n") {
		line = strings.TrimSuffix(line, "\r")
		if line == "" {
			continue
		}
		name, value, ok := strings.Cut(line, ":")
		if !ok || name == "" {
			return nil, false
		}
		h[http.CanonicalHeaderKey(name)] = append(h[http.CanonicalHeaderKey(name)], strings.Trim(value, " \t"))
	}
	return h, true
}

// headerLines renders response headers as "Name: value\n" lines, names sorted, each
// value of a repeated name on its own line in the order received.
func headerLines(h http.Header) []byte {
	var b bytes.Buffer
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range h {
			if !yield(k) {
				return
			}
		}
	}) {
		for _, v := range h[k] {
			b.WriteString(k)
			b.WriteString(": ")
			b.WriteString(v)
			b.WriteByte('\n')
		}
	}
	return b.Bytes()
}

// copyOut copies v to buf and returns v's full length (sizes first).
func copyOut(buf []byte, v []byte) uint64 {
	copy(buf, v)
	return uint64(uint32(len(v)))
}

// httpHead waits for a handle's response head; it returns the call and either the
// response or a negative status.
func (st *callState) httpHead(ctx context.Context, handle int32) (*httpCall, *http.Response, int32) {
	c := st.http.calls[handle]
	if c == nil {
		return nil, nil, abi.StatusNotFound
	}
	resp, err := c.call.Head(ctx)
	if err != nil {
		return c, nil, st.httpFail(c, err)
	}
	return c, resp, 0
}

// httpStart starts a request for http_start (and the JS adapter's fetch): it returns
// the handle, or a negative status and the reason it was refused, logged at the job.
func (st *callState) httpStart(ctx context.Context, method, url, headers, body []byte) (int32, string) {
	h := &st.http
	if h.client == nil {
		return abi.StatusNotPermitted, "the module's manifest grants no outbound HTTP (no [http] table)"
	}
	if len(headers) > outbound.MaxRequestHeader {
		// Refused before parsing: the guest's lines are not copied.
		msg := fmt.Sprintf("http_start: %d bytes of headers, past %d", len(headers), outbound.MaxRequestHeader)
		st.emit(slog.LevelWarn, msg)
		return abi.StatusLimitExceeded, msg
	}
	hdr, ok := parseHeaderLines(headers)
	if !ok {
		return abi.StatusBadArgument, "a header line without a colon"
	}
	if h.session == nil {
		h.session = h.client.NewSession()
		if st.job != nil {
			// The idempotency keys name the job, and its replay: a replayed dead
			// letter is new work.
			h.session = h.client.NewJobSession(st.job.Envelope.ID, backend.ReplayGeneration(st.job.Envelope.Headers))
		}
		h.calls = map[int32]*httpCall{}
	}
	req := outbound.Request{Method: string(method), URL: string(url), Header: hdr}
	if len(body) > 0 {
		req.Body = body // Start checks its size, then copies it
	}
	call, err := h.session.Start(ctx, req)
	if err != nil {
		st.emit(slog.LevelWarn, fmt.Sprintf("http %s %s: %v", req.Method, outbound.Redact(req.URL), err))
		var e *outbound.Error
		if !errors.As(err, &e) {
			return abi.StatusBadArgument, err.Error() // Start's errors are *Error; never a nil dereference
		}
		return httpStatusOf(e.Kind), e.Error()
	}
	handle := h.next
	h.next++
	hc := &httpCall{call: call, target: req.Method + " " + outbound.Redact(req.URL)} // logged: no query
	h.calls[handle] = hc
	select {
	case <-call.Done():
		// Refused before anything was sent (a URL outside the grant): logged now,
		// whether or not the guest ever reads the status.
		if _, err := call.Head(ctx); err != nil {
			st.httpFail(hc, err)
		}
	default:
	}
	return handle, ""
}

// withHTTPHostFuncs returns funcs with the host functions of outbound HTTP added.
func withHTTPHostFuncs(funcs map[string]hostFunc) map[string]hostFunc {
	fn := func(params []api.ValueType, f api.GoModuleFunc) hostFunc {
		return hostFunc{funcType{params, []api.ValueType{i32}}, func(ctx context.Context, mod api.Module, stack []uint64) {
			f(requestContext(ctx), mod, stack)
		}}
	}
	funcs[abi.FuncHTTPStart] = fn([]api.ValueType{i32, i32, i32, i32, i32, i32, i32, i32}, func(ctx context.Context, mod api.Module, stack []uint64) {
		method := guestBytes(mod, abi.FuncHTTPStart, stack[0], stack[1])
		url := guestBytes(mod, abi.FuncHTTPStart, stack[2], stack[3])
		headers := guestBytes(mod, abi.FuncHTTPStart, stack[4], stack[5])
		body := guestBytes(mod, abi.FuncHTTPStart, stack[6], stack[7])
		handle, _ := stateOf(ctx).httpStart(ctx, method, url, headers, body)
		stack[0] = status(handle)
	})
	funcs[abi.FuncHTTPStatus] = fn([]api.ValueType{i32}, func(ctx context.Context, mod api.Module, stack []uint64) {
		_, resp, s := stateOf(ctx).httpHead(ctx, int32(stack[0]))
		if resp != nil {
			s = int32(resp.StatusCode)
		}
		stack[0] = status(s)
	})
	funcs[abi.FuncHTTPErrorRead] = fn([]api.ValueType{i32, i32, i32}, func(ctx context.Context, mod api.Module, stack []uint64) {
		buf := guestBytes(mod, abi.FuncHTTPErrorRead, stack[1], stack[2])
		c, _, _ := stateOf(ctx).httpHead(ctx, int32(stack[0]))
		if c == nil || c.err == nil {
			stack[0] = status(abi.StatusNotFound)
			return
		}
		stack[0] = copyOut(buf, []byte(c.err.Error()))
	})
	// headRead is a function that copies out a part of a response's head.
	headRead := func(name string, part func(*http.Response) []byte) hostFunc {
		return fn([]api.ValueType{i32, i32, i32}, func(ctx context.Context, mod api.Module, stack []uint64) {
			buf := guestBytes(mod, name, stack[1], stack[2])
			_, resp, s := stateOf(ctx).httpHead(ctx, int32(stack[0]))
			if resp == nil {
				stack[0] = status(s)
				return
			}
			stack[0] = copyOut(buf, part(resp))
		})
	}
	funcs[abi.FuncHTTPHeadersRead] = headRead(abi.FuncHTTPHeadersRead, func(r *http.Response) []byte { return headerLines(r.Header) })
	funcs[abi.FuncHTTPURLRead] = headRead(abi.FuncHTTPURLRead, func(r *http.Response) []byte { return []byte(r.Request.URL.String()) })
	funcs[abi.FuncHTTPBodyRead] = fn([]api.ValueType{i32, i32, i32}, func(ctx context.Context, mod api.Module, stack []uint64) {
		buf := guestBytes(mod, abi.FuncHTTPBodyRead, stack[1], stack[2])
		st := stateOf(ctx)
		c, resp, s := st.httpHead(ctx, int32(stack[0]))
		switch {
		case resp == nil:
			stack[0] = status(s)
			return
		case len(buf) == 0:
			stack[0] = status(abi.StatusBadArgument)
			return
		}
		// The bytes go straight into the guest's buffer: the guest is in this call,
		// and its memory cannot move under it.
		n, err := c.call.Read(ctx, buf)
		switch {
		case n > 0:
			stack[0] = uint64(uint32(n))
		case errors.Is(err, io.EOF):
			stack[0] = 0
		default:
			stack[0] = status(st.httpFail(c, err))
		}
	})
	funcs[abi.FuncHTTPClose] = fn([]api.ValueType{i32}, func(ctx context.Context, mod api.Module, stack []uint64) {
		st := stateOf(ctx)
		c := st.http.calls[int32(stack[0])]
		if c == nil {
			stack[0] = status(abi.StatusNotFound)
			return
		}
		c.call.Close()
		delete(st.http.calls, int32(stack[0]))
		stack[0] = 0
	})
	funcs[abi.FuncHTTPWait] = fn([]api.ValueType{i32, i32, i64}, func(ctx context.Context, mod api.Module, stack []uint64) {
		n := uint64(uint32(stack[1]))
		if 4*n > math.MaxUint32 {
			panic(&memoryAccessError{fn: abi.FuncHTTPWait})
		}
		list := guestBytes(mod, abi.FuncHTTPWait, stack[0], 4*n)
		timeoutMs := int64(stack[2])
		st := stateOf(ctx)
		// A list longer than the call may have requests is refused before anything is
		// allocated for it: n could be a quarter of the guest's memory.
		most := uint64(outbound.MaxRequestsLimit)
		if st.http.client != nil {
			most = uint64(st.http.client.Grant().MaxRequests)
		}
		if n == 0 || n > most {
			stack[0] = status(abi.StatusBadArgument)
			return
		}
		calls := make([]*outbound.Call, n)
		for i := range calls {
			b := list[4*i:]
			handle := int32(uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24)
			c := st.http.calls[handle]
			if c == nil {
				stack[0] = status(abi.StatusBadArgument)
				return
			}
			calls[i] = c.call
		}
		timeout := time.Duration(-1)
		if timeoutMs >= 0 {
			timeout = time.Duration(min(timeoutMs, math.MaxInt64/int64(time.Millisecond))) * time.Millisecond
		}
		stack[0] = status(int32(outbound.Wait(ctx, calls, timeout)))
	})
	return funcs
}
