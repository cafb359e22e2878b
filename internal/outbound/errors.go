package outbound

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/url"
	"strconv"
	"strings"
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

// kinds are each kind's name (String) and label (Label), in one table so that a new
// kind gets both.
var kinds = map[Kind]struct{ name, label string }{
	KindBadRequest:       {"bad request", "bad_request"},
	KindDenied:           {"denied", "denied"},
	KindBlocked:          {"blocked address", "blocked"},
	KindDNS:              {"DNS failure", "dns"},
	KindRefused:          {"connection refused", "refused"},
	KindTLS:              {"TLS failure", "tls"},
	KindTimeout:          {"timeout", "timeout"},
	KindTooLarge:         {"response too large", "too_large"},
	KindTooManyRequests:  {"too many requests", "too_many_requests"},
	KindRateLimited:      {"rate limited", "rate_limited"},
	KindCircuitOpen:      {"circuit open", "circuit_open"},
	KindConnection:       {"connection failed", "connection"},
	KindTooManyRedirects: {"too many redirects", "too_many_redirects"},
	KindRequestTooLarge:  {"request too large", "request_too_large"},
}

// String names the kind ("denied", "blocked address", ...).
func (k Kind) String() string {
	if s, ok := kinds[k]; ok {
		return s.name
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
	// the slot the rate promises it (its next token's time, or one token's time after
	// the slot it promised the request held back before, so that held-back requests
	// are spaced by the rate), or a second from now for a concurrency slot.
	Until time.Time
}

// Error returns "kind: message".
func (e *Error) Error() string { return e.Kind.String() + ": " + e.Msg }

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// classify turns an error of net/http into an *Error. An *Error inside it (from the
// grant check, the dialer, the resolver or a limit) keeps its kind. The message names
// URLs without their query strings (errText): it is logged at the job and reaches the
// guest.
func classify(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		var ue *url.Error
		if errors.As(err, &ue) && errors.As(ue.Err, &e) {
			// A dialer's or resolver's failure names an address, not the request: the
			// copy says which URL it was (a grant's refusal, a breaker's and a limit's
			// name their destination already).
			switch e.Kind {
			case KindBlocked, KindDNS, KindRefused, KindTimeout, KindConnection:
				c := *e
				c.Msg = ue.Op + " " + Redact(ue.URL) + ": " + e.Msg
				return &c
			}
		}
		return e
	}
	msg := errText(err)
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

// errText is err's text with every URL in it redacted (Redact): a *url.Error's own,
// and each quoted string of the rest, since net/http quotes what a server sent (a
// Location header that does not parse, with its query string) inside the error a
// *url.Error wraps.
func errText(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Op + " " + Redact(ue.URL) + ": " + redactQuoted(ue.Err.Error())
	}
	return redactQuoted(err.Error())
}

// redactQuoted returns s with each Go-quoted string in it ("...", as %q writes it)
// redacted as a URL, and quoted again.
func redactQuoted(s string) string {
	var b strings.Builder
	for {
		i := strings.IndexByte(s, '"')
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		b.WriteString(s[:i])
		q, err := strconv.QuotedPrefix(s[i:])
		if err != nil {
			// An unpaired quote: nothing after it can be told apart as a URL, so it is
			// cut as Redact cuts what is not one.
			b.WriteString(Redact(s[i:]))
			return b.String()
		}
		u, _ := strconv.Unquote(q)
		b.WriteString(strconv.Quote(Redact(u)))
		s = s[i+len(q):]
	}
}
