package outbound

import (
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// MaxRecordPath bounds the path a CallRecord keeps, in bytes.
const MaxRecordPath = 256

// CallRecord is what a session keeps of one of its requests once it is closed: enough
// to see and measure it, and nothing secret. No header is kept (neither the guest's
// nor the grant's), the query string and fragment are dropped, and a URL's user part
// never reaches Origin.
type CallRecord struct {
	// Method is the request's method.
	Method string
	// Origin is the URL's scheme://host:port, the scheme's port when the URL names
	// none. A redirect's hops are not recorded: this is the URL the guest asked for.
	Origin string
	// Path is the URL's path, without query or fragment, cut to MaxRecordPath bytes.
	Path string
	// Grant is the allow entry that matched the URL; "" when none did (denied).
	Grant string
	// Status is the response's status; 0 when no response came.
	Status int
	// Error is how the request failed, its kind's label (Kind.Label) or "cancelled"
	// when it was closed before its response came and before its deadline passed;
	// "" when it did not fail. A
	// response whose body failed (too large, cut short) has both a Status and an Error.
	Error string
	// Duration runs from the start to the first of: the failure, the body's end (read
	// to EOF or failed), the close.
	Duration time.Duration
	// Bytes are the body bytes the guest read.
	Bytes int64
}

// Outcome is the record's outcome as a bounded label: its Error, else its status's
// class ("2xx", "3xx", "4xx", "5xx").
func (r CallRecord) Outcome() string {
	if r.Error != "" {
		return r.Error
	}
	if r.Status >= 200 && r.Status <= 599 {
		return strconv.Itoa(r.Status/100) + "xx"
	}
	return "unknown"
}

// CallCancelled is CallRecord.Error for a request closed before its response came
// and before its deadline passed.
const CallCancelled = "cancelled"

// Label names the kind as a metric label or a record's error: "denied", "blocked",
// "dns", "too_large", ...
func (k Kind) Label() string {
	if s, ok := kinds[k]; ok {
		return s.label
	}
	return "unknown"
}

// Redact returns rawURL as it may be logged and recorded: scheme://host[:port]/path,
// without its user, query string or fragment; what is not an absolute URL is cut at its
// first '?' or '#'.
func Redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil || !u.IsAbs() || u.Host == "" {
		if i := strings.IndexAny(rawURL, "?#"); i >= 0 {
			rawURL = rawURL[:i]
		}
		return rawURL
	}
	return (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path, RawPath: u.RawPath}).String()
}

// newRecord starts the record of a request to u.
func newRecord(method string, u *url.URL) CallRecord {
	scheme, port := strings.ToLower(u.Scheme), portOf(u)
	origin := scheme + "://" + strings.ToLower(u.Hostname())
	if port != "" {
		origin = scheme + "://" + net.JoinHostPort(strings.ToLower(u.Hostname()), port)
	}
	path := u.EscapedPath()
	if len(path) > MaxRecordPath {
		path = path[:MaxRecordPath]
	}
	return CallRecord{Method: method, Origin: strings.ToValidUTF8(origin, "\uFFFD"), Path: strings.ToValidUTF8(path, "\uFFFD")}
}

// portOf returns u's port: the one it names, else its scheme's (80 or 443); "" for
// another scheme naming none.
func portOf(u *url.URL) string {
	if port := u.Port(); port != "" {
		return port
	}
	return map[string]string{"http": "80", "https": "443"}[strings.ToLower(u.Scheme)]
}
