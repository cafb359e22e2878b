package outbound

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/url"
	"syscall"
	"time"
)

// Kind is what kind of failure an *Error is.
type Kind int

// The kinds of failure. Each is a distinct status of the ABI (abi.StatusHTTP*).
const (
	// KindBadRequest: the request itself is malformed (method, URL, a header with CR
	// or LF); nothing was sent.
	KindBadRequest Kind = iota + 1
	// KindDenied: the URL, or a redirect hop's, is outside the grant; nothing was sent
	// to it.
	KindDenied
	// KindBlocked: every address the host resolved to is one the grant does not
	// allow (private, loopback, link-local, ...); no connection was made.
	KindBlocked
	// KindDNS: the host name did not resolve.
	KindDNS
	// KindRefused: the destination refused the connection.
	KindRefused
	// KindTLS: the TLS handshake failed (an unknown authority, a wrong name).
	KindTLS
	// KindTimeout: the request's timeout, or the job's deadline, passed.
	KindTimeout
	// KindTooLarge: the body passed max_response.
	KindTooLarge
	// KindTooManyRequests: the run already started max_requests requests.
	KindTooManyRequests
	// KindRateLimited: a wait for a limit of [http.limits] would pass the request's
	// deadline.
	KindRateLimited
	// KindCircuitOpen: the destination's circuit breaker is open, or half-open with
	// its one probe out; nothing was sent. Error.Until says when calls go again.
	KindCircuitOpen
	// KindConnection: the connection failed otherwise (reset, closed early, a protocol
	// error).
	KindConnection
	// KindTooManyRedirects: more than MaxRedirects redirects.
	KindTooManyRedirects
	// KindRequestTooLarge: the request's body passes max_request_body, its headers
	// MaxRequestHeader, or its body the bytes a session may hold
	// (SessionBodyFactor × max_request_body); nothing was sent.
	KindRequestTooLarge
)

var kindNames = map[Kind]string{
	KindBadRequest: "bad request", KindDenied: "denied", KindBlocked: "blocked address", KindDNS: "DNS failure",
	KindRefused: "connection refused", KindTLS: "TLS failure", KindTimeout: "timeout", KindTooLarge: "response too large",
	KindTooManyRequests: "too many requests", KindRateLimited: "rate limited", KindCircuitOpen: "circuit open",
	KindConnection: "connection failed", KindTooManyRedirects: "too many redirects", KindRequestTooLarge: "request too large",
}

// String names the kind ("denied", "blocked address", ...).
func (k Kind) String() string {
	if s, ok := kindNames[k]; ok {
		return s
	}
	return "unknown"
}

// Error is a request's failure: its kind and what happened.
type Error struct {
	Kind Kind
	// Msg says what happened, without secrets (host-added headers never appear).
	Msg string
	// Err is the underlying error, if any.
	Err error
	// Until, for KindCircuitOpen, is when the destination's breaker lets a call
	// through again (a quarter of the cooldown from now, when it is half-open with
	// its probe out); for KindRateLimited, when the limit would let the request go:
	// the rate's next token, or a second from now for a concurrency slot.
	Until time.Time
}

// Error returns "kind: message".
func (e *Error) Error() string { return e.Kind.String() + ": " + e.Msg }

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// classify turns an error of net/http into an *Error. An *Error inside it (from the
// grant check, the dialer or the resolver) is returned as it is. The message names the
// URL without its query string (Redact): it is logged at the job and kept in its
// record.
func classify(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	msg := err.Error()
	var ue *url.Error
	if errors.As(err, &ue) {
		msg = ue.Op + " " + Redact(ue.URL) + ": " + ue.Err.Error()
	}
	var netErr net.Error
	var certErr *tls.CertificateVerificationError
	var unknownCA x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var recErr tls.RecordHeaderError
	var alert tls.AlertError
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &netErr) && netErr.Timeout():
		return &Error{Kind: KindTimeout, Msg: msg, Err: err}
	case errors.Is(err, context.Canceled):
		return &Error{Kind: KindTimeout, Msg: "cancelled: the job ended or the request was closed", Err: err}
	case errors.Is(err, syscall.ECONNREFUSED):
		return &Error{Kind: KindRefused, Msg: msg, Err: err}
	case errors.As(err, &certErr), errors.As(err, &unknownCA), errors.As(err, &hostErr),
		errors.As(err, &recErr), errors.As(err, &alert):
		return &Error{Kind: KindTLS, Msg: msg, Err: err}
	}
	return &Error{Kind: KindConnection, Msg: msg, Err: err}
}
