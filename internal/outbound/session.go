package outbound

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// Request is what a guest asks for.
type Request struct {
	Method string
	URL    string
	// Header holds the guest's headers; repeated names are kept.
	Header http.Header
	// Body is the request's body; Start copies it (the guest's memory may change
	// under a request in flight).
	Body []byte
}

// Session is one run of a handler: the requests it starts, bounded by the grant's
// max_requests, several in flight at once. Close ends every request left open. The
// methods of a Session and its Calls are safe for concurrent use.
type Session struct {
	c      *Client
	keyFor string // the idempotency keys' prefix; empty: none added

	mu         sync.Mutex
	started    int
	keyed      int   // the requests given an idempotency key
	held       int64 // the body bytes of the open calls
	open       map[*Call]struct{}
	closed     bool
	outage     time.Time    // the latest reopen time of the outages the calls met
	sawOpen    bool         // a call met an outage (CircuitOpen)
	limited    time.Time    // the latest time a limit of [http.limits] would have let a call go
	sawLimit   bool         // a call was held back by a limit (RateLimited)
	sawFailure bool         // a call failed in a way its breaker counts (DestinationFailed)
	records    []CallRecord // by start order; a call's is complete once it is closed
}

// NewSession starts a run's session that adds no idempotency keys.
func (c *Client) NewSession() *Session { return c.NewJobSession("", 0) }

// NewJobSession starts the session of a run of job's handler. With the grant's
// idempotency_header set, each request that is not GET, HEAD or OPTIONS and lacks
// that header is given it: "<job>-<n>", n counting such requests by start order
// within the session (1-based), so that a deterministic handler sends the same keys
// on every run of its job; "<job>-r<replays>-<n>" once the job was replayed from its
// dead letters (replays > 0), since a replay is new work. An empty job adds none.
func (c *Client) NewJobSession(job string, replays int) *Session {
	s := &Session{c: c, open: map[*Call]struct{}{}}
	if job != "" && c.grant.IdempotencyHeader != "" {
		s.keyFor = job
		if replays > 0 {
			s.keyFor += "-r" + strconv.Itoa(replays)
		}
	}
	return s
}

// CircuitOpen reports whether a call of the session met an outage: it failed as
// circuit open (KindCircuitOpen), or its own failure (a 5xx the guest sees as a
// status, say) left its destination's breaker open; and the latest time those
// breakers let calls through again.
func (s *Session) CircuitOpen() (until time.Time, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.outage, s.sawOpen
}

// DestinationFailed reports whether a call of the session failed in a way its
// destination's circuit breaker counts (a connection failure, the grant's timeout, a
// 5xx answer), whether or not that opened the breaker. A job that was already waiting
// out an outage and meets such a failure is still in it, even where the breaker is
// closed: a restarted host's, or a reloaded module's breakers start closed.
func (s *Session) DestinationFailed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sawFailure
}

// RateLimited reports whether a call of the session failed as rate limited (a limit
// of [http.limits] would have held it past its deadline), and until when the latest
// such limit would have held it.
func (s *Session) RateLimited() (until time.Time, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.limited, s.sawLimit
}

// Grant returns the client's grant.
func (c *Client) Grant() *Grant { return c.grant }

// Call is one request of a session: running in the background from Start until its
// response head arrives, then its body read by Read; Close ends it.
type Call struct {
	s      *Session
	held   int64           // its body's bytes, counted in the session's held
	ctx    context.Context // the request's: the job's deadline and the grant's timeout
	cancel context.CancelFunc
	done   chan struct{} // closed when the head is in (or the request failed)
	ended  chan struct{} // closed when the request's goroutine returned
	idx    int           // its record's index in the session's records
	start  time.Time
	span   trace.Span // the request's Client span, ended by the first Close; nil when tracing is off

	// Set before done is closed, read-only after.
	resp *http.Response
	err  *Error

	// rmu serializes Reads; mu guards the fields below, and is never held across a
	// body read, so that Close can close the body under a Read that is blocked.
	rmu     sync.Mutex
	mu      sync.Mutex
	body    io.ReadCloser
	read    int64
	bodyErr error
	closed  bool
	took    time.Duration // set at the request's end (failure, body end or close)
}

// refusedHeaders are the guest headers Start refuses. Connection, Upgrade and Te ask
// for a protocol switch or a connection option, Transfer-Encoding another framing
// than net/http's, all of them the transport's business; Host would name another
// virtual host than the URL's, the one the grant checked (net/http ignores it; it is
// refused so that no guest believes it sent one).
var refusedHeaders = []string{"Connection", "Host", "Te", "Transfer-Encoding", "Upgrade"}

// Start checks req and starts it in the background under ctx (the job's: a request
// never outlives it) and the grant's timeout. A malformed request (KindBadRequest) or
// one past max_requests (KindTooManyRequests) returns an error and no Call; every
// other failure, a denied URL included, is the Call's, reported by Head.
func (s *Session) Start(ctx context.Context, req Request) (*Call, error) {
	g := s.c.grant
	if req.Method == "" {
		req.Method = http.MethodGet
	}
	if !validHeaderName(req.Method) {
		return nil, &Error{Kind: KindBadRequest, Msg: fmt.Sprintf("%q is not a method", req.Method)}
	}
	if m := strings.ToUpper(req.Method); m == "TRACE" || m == "TRACK" || m == "CONNECT" {
		// TRACE and TRACK echo the request, host-added headers included, back to the
		// guest; CONNECT asks for a tunnel.
		return nil, &Error{Kind: KindBadRequest, Msg: fmt.Sprintf("method %s is not allowed", req.Method)}
	}
	u, err := url.Parse(req.URL)
	if err != nil || !u.IsAbs() || u.Host == "" {
		return nil, &Error{Kind: KindBadRequest, Msg: fmt.Sprintf("%q is not an absolute http or https URL", Redact(req.URL))}
	}
	if int64(len(req.Body)) > g.MaxRequestBody {
		return nil, &Error{Kind: KindRequestTooLarge, Msg: fmt.Sprintf("the body of %d bytes passes max_request_body (%d bytes)", len(req.Body), g.MaxRequestBody)}
	}
	headerBytes := 0
	for name, vs := range req.Header {
		for _, v := range vs {
			headerBytes += len(name) + len(v) + 4
		}
	}
	if headerBytes > MaxRequestHeader {
		return nil, &Error{Kind: KindRequestTooLarge, Msg: fmt.Sprintf("the headers take %d bytes, past %d", headerBytes, MaxRequestHeader)}
	}
	for name, vs := range req.Header {
		if !validHeaderName(name) {
			return nil, &Error{Kind: KindBadRequest, Msg: fmt.Sprintf("%q is not a header name", name)}
		}
		if slices.Contains(refusedHeaders, http.CanonicalHeaderKey(name)) {
			return nil, &Error{Kind: KindBadRequest, Msg: fmt.Sprintf("a guest may not set header %s (refused: %s)", name, strings.Join(refusedHeaders, ", "))}
		}
		for _, v := range vs {
			if !validHeaderValue(v) {
				return nil, &Error{Kind: KindBadRequest, Msg: fmt.Sprintf("the value of header %s holds CR, LF or NUL", name)}
			}
		}
	}
	rec := newRecord(req.Method, u)
	entry, denied := g.Match(u)
	if denied == nil {
		rec.Grant = entry.String()
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, &Error{Kind: KindBadRequest, Msg: "the session is closed"}
	}
	if s.started >= g.MaxRequests {
		s.mu.Unlock()
		return nil, &Error{Kind: KindTooManyRequests, Msg: fmt.Sprintf("a run may start at most %d requests (max_requests)", g.MaxRequests)}
	}
	if budget := SessionBodyFactor * g.MaxRequestBody; s.held+int64(len(req.Body)) > budget {
		s.mu.Unlock()
		return nil, &Error{Kind: KindRequestTooLarge, Msg: fmt.Sprintf("the bodies of the requests not yet closed would take %d bytes, past %d (%d × max_request_body): close some first",
			s.held+int64(len(req.Body)), budget, SessionBodyFactor)}
	}
	s.started++
	s.held += int64(len(req.Body))
	key := ""
	if s.keyFor != "" && !safeMethod(req.Method) && len(req.Header.Values(g.IdempotencyHeader)) == 0 {
		// Numbered under mu, in start order.
		s.keyed++
		key = s.keyFor + "-" + strconv.Itoa(s.keyed)
	}
	rctx, cancel := context.WithTimeoutCause(context.WithValue(ctx, outageKey{}, s), g.Timeout, errGrantTimeout)
	start := time.Now()
	rctx, span := s.c.startSpan(rctx, req.Method, u, start)
	c := &Call{s: s, held: int64(len(req.Body)), ctx: rctx, cancel: cancel, done: make(chan struct{}), ended: make(chan struct{}),
		idx: len(s.records), start: start, span: span}
	s.open[c] = struct{}{}
	s.records = append(s.records, rec)
	s.mu.Unlock()

	if denied != nil {
		// Denied before anything is sent; no goroutine is needed.
		c.err = classify(denied)
		c.end()
		close(c.done)
		close(c.ended)
		return c, nil
	}
	var body io.Reader
	if req.Body != nil {
		body = bytes.NewReader(bytes.Clone(req.Body)) // NewRequest sets GetBody: a 307/308 resends it
	}
	hreq, err := http.NewRequestWithContext(rctx, req.Method, u.String(), body)
	if err != nil {
		c.err = &Error{Kind: KindBadRequest, Msg: errText(err), Err: err}
		c.end()
		close(c.done)
		close(c.ended)
		return c, nil
	}
	for name, vs := range req.Header {
		hreq.Header[http.CanonicalHeaderKey(name)] = append(hreq.Header[http.CanonicalHeaderKey(name)], vs...)
	}
	if key != "" {
		// A guest's header, as far as redirects go: net/http carries it to each hop
		// the grant allows.
		hreq.Header.Set(g.IdempotencyHeader, key)
	}
	go func() {
		defer close(c.ended)
		resp, err := s.c.client.Do(hreq)
		switch {
		case err != nil:
			if resp != nil {
				resp.Body.Close()
			}
			c.err = classify(err)
		case resp.StatusCode > 599:
			// net/http takes any three digits; the ABI's statuses are 200-599.
			resp.Body.Close()
			c.err = &Error{Kind: KindConnection, Msg: fmt.Sprintf("the server answered status %d, outside 200-599", resp.StatusCode)}
		case resp.StatusCode < 200:
			// net/http returns a 101 (asked for or not) with the raw connection as
			// its body: no context ends a read of it. No guest may switch protocols.
			resp.Body.Close()
			c.err = &Error{Kind: KindConnection, Msg: fmt.Sprintf("the server answered %s: a protocol switch is not supported", resp.Status)}
		default:
			// A backstop: whatever the body is, no read of it outlives the request's
			// context (net/http's own cancellation ends a read already, for the
			// bodies it knows).
			context.AfterFunc(rctx, func() { resp.Body.Close() })
			c.resp = resp
			c.body = resp.Body
		}
		if c.err != nil {
			c.end()
		}
		close(c.done)
	}()
	return c, nil
}

// Done is closed when the call's head is in, or it failed.
func (c *Call) Done() <-chan struct{} { return c.done }

// Head waits for the response head, or ctx. It returns the response (its Body is not
// to be read: use Read) or the request's failure.
func (c *Call) Head(ctx context.Context) (*http.Response, *Error) {
	select {
	case <-c.done:
	case <-ctx.Done():
		return nil, classify(ctx.Err())
	}
	if c.err != nil {
		return nil, c.err
	}
	return c.resp, nil
}

// Read reads the next bytes of the body into p, after the head (waited for under
// ctx): io.EOF at its end, a KindTooLarge *Error past max_response (after the first
// max_response bytes), or the failure that cut it short.
func (c *Call) Read(ctx context.Context, p []byte) (int, error) {
	if _, err := c.Head(ctx); err != nil {
		return 0, err
	}
	c.rmu.Lock()
	defer c.rmu.Unlock()
	c.mu.Lock()
	closed, bodyErr, read, body := c.closed, c.bodyErr, c.read, c.body
	c.mu.Unlock()
	if closed {
		return 0, &Error{Kind: KindBadRequest, Msg: "the request is closed"}
	}
	if bodyErr != nil {
		return 0, bodyErr
	}
	max := c.s.c.grant.MaxResponse
	if len(p) == 0 {
		return 0, nil
	}
	// Read at most one byte past the cap, to know whether the body goes past it.
	if room := max - read + 1; int64(len(p)) > room {
		p = p[:room]
	}
	// No lock is held: Close, or the request's context, closes the body under a read
	// that blocks.
	n, err := body.Read(p)
	read += int64(n)
	if read > max {
		n -= int(read - max)
		read = max
		err = &Error{Kind: KindTooLarge, Msg: fmt.Sprintf("the body passes max_response (%d bytes)", max)}
	}
	switch {
	case err == nil:
	case errors.Is(err, io.EOF):
		bodyErr = io.EOF
	case c.ctx.Err() != nil && !isKind(err, KindTooLarge):
		// The backstop may have closed the body before net/http saw the context end:
		// the failure is the deadline's, not the connection's.
		bodyErr = classify(context.Cause(c.ctx))
	default:
		bodyErr = classify(err)
	}
	c.mu.Lock()
	c.read, c.bodyErr = read, bodyErr
	c.mu.Unlock()
	if bodyErr != nil {
		c.end()
	}
	if n > 0 {
		return n, nil // the error, if any, comes with the next call
	}
	return 0, bodyErr
}

// safeMethod reports whether method is GET, HEAD or OPTIONS: one that is given no
// idempotency key.
func safeMethod(method string) bool {
	switch strings.ToUpper(method) {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return true
	}
	return false
}

func isKind(err error, k Kind) bool {
	var e *Error
	return errors.As(err, &e) && e.Kind == k
}

// end notes the request's end, its first only: a failure, the body's end or the close.
func (c *Call) end() {
	c.mu.Lock()
	if c.took == 0 {
		c.took = max(time.Since(c.start), 1)
	}
	c.mu.Unlock()
}

// Close ends the call: cancels it if it is still running, closes its body, and waits
// for its goroutine. It is idempotent. The first Close completes the call's record.
func (c *Call) Close() {
	// Closed before its head came, with its context still running: the failure that
	// follows is the close's own. A context that had ended already (the job's
	// deadline, the grant's timeout) is the failure, though the request's goroutine
	// may not have seen it yet: a guest waiting under the same deadline can come
	// here first.
	early := false
	select {
	case <-c.done:
	default:
		early = c.ctx.Err() == nil
	}
	c.cancel()
	<-c.ended
	c.end()
	c.mu.Lock()
	body, first := c.body, !c.closed
	if c.closed {
		body = nil
	}
	c.closed = true
	rec := CallRecord{Duration: c.took, Bytes: c.read}
	failure := c.err
	if e, ok := c.bodyErr.(*Error); ok {
		rec.Error, failure = e.Kind.Label(), e
	}
	c.mu.Unlock()
	if body != nil {
		body.Close() // outside mu: it ends a Read blocked on the body
	}
	switch {
	case early && c.resp == nil:
		// The failure is the close's own cancellation (a head that came meanwhile
		// is no failure).
		rec.Error, failure = CallCancelled, nil
	case c.err != nil:
		rec.Error = c.err.Kind.Label()
	}
	if c.resp != nil {
		rec.Status = c.resp.StatusCode
	}
	if first && c.span != nil {
		msg := "closed before its response came"
		if failure != nil {
			msg = failure.Error()
		}
		endSpan(c.span, rec, msg, c.start)
	}
	c.s.mu.Lock()
	if _, open := c.s.open[c]; open {
		delete(c.s.open, c)
		c.s.held -= c.held
	}
	if first {
		r := &c.s.records[c.idx]
		r.Status, r.Error, r.Duration, r.Bytes = rec.Status, rec.Error, rec.Duration, rec.Bytes
	}
	c.s.mu.Unlock()
}

// Records returns the records of the session's requests, in the order they started:
// one per request that Start accepted (a denied URL's too). Read it after Close: the
// record of a request still open lacks its outcome.
func (s *Session) Records() []CallRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.records)
}

// Close ends every call of the session left open and refuses new ones.
func (s *Session) Close() {
	s.mu.Lock()
	s.closed = true
	open := make([]*Call, 0, len(s.open))
	for c := range s.open {
		open = append(open, c)
	}
	s.mu.Unlock()
	for _, c := range open {
		c.Close()
	}
}

// Open reports how many calls of the session are open.
func (s *Session) Open() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.open)
}

// Wait returns the index of the first of calls whose head is in (or that failed),
// waiting at most timeout (a negative timeout waits for ctx alone); -1 when none is
// ready in time or ctx ended.
func Wait(ctx context.Context, calls []*Call, timeout time.Duration) int {
	for i, c := range calls {
		select {
		case <-c.done:
			return i
		default:
		}
	}
	if timeout == 0 {
		return -1
	}
	// Each call is selected on once, however often the list names it: a session has
	// at most MaxRequestsLimit calls.
	cases := make([]reflect.SelectCase, 0, len(calls)+2)
	index := make([]int, 0, len(calls)) // the list's index of each case
	seen := make(map[*Call]bool, len(calls))
	for i, c := range calls {
		if !seen[c] {
			seen[c] = true
			cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(c.done)})
			index = append(index, i)
		}
	}
	cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())})
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(t.C)})
	}
	i, _, _ := reflect.Select(cases)
	if i >= len(index) {
		return -1
	}
	return index[i]
}
