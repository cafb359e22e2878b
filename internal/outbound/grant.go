// Package outbound makes a module's HTTP requests under its grant: the manifest's
// [http] table. It knows nothing of WebAssembly: the host's ABI functions start
// requests in a Session and read their results.
//
// Every request, and every redirect hop, is checked in two layers: its URL against the
// grant (scheme, host, port), and, at connect time, each address the host resolves to
// (code.dny.dev/ssrf), so that a granted name that resolves to a private or loopback
// address is refused. A URL that names an IP literal, a CIDR or localhost the grant
// names goes through a dialer that allows those prefixes, and never shares a connection
// pool with the strict dialer of name URLs.
package outbound

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/wasmjobs/wasmjobs/internal/tomlvalue"
)

// Defaults of a Grant.
const (
	DefaultTimeout     = 30 * time.Second
	DefaultMaxResponse = 10 << 20
	DefaultMaxRequests = 50
	// DefaultMaxRequestBody is max_request_body's default.
	DefaultMaxRequestBody = 10 << 20
	// MaxRequestHeader bounds the guest's headers of one request: the sum, over each
	// value, of the name's length, the value's and 4 (": " and CRLF), as on the wire.
	MaxRequestHeader = 64 << 10
	// SessionBodyFactor × max_request_body bounds the bytes of the bodies a session
	// holds, those of its requests not yet closed (each is kept for a 307/308's
	// resend).
	SessionBodyFactor = 4
	DefaultOutageWait = time.Hour
	// MaxRedirects is how many redirects a request follows.
	MaxRedirects = 5
	// MaxRequestsLimit is the most max_requests may be (Wait selects over at most this
	// many requests, well within reflect.Select's bound).
	MaxRequestsLimit = 10_000
)

// hostKind is what an entry's host names.
type hostKind int

const (
	hostName      hostKind = iota // an exact name
	hostSubdomain                 // *.domain: any name under domain, not domain itself
	hostAnyName                   // *: any name, or a public IP literal
	hostIP                        // an IP literal
	hostCIDR                      // a CIDR: IP-literal URLs inside it
	hostLocalhost                 // the name localhost, literally
)

// Entry is one entry of a grant's allow list.
type Entry struct {
	scheme         string
	kind           hostKind
	name           string       // hostName, hostLocalhost: the name; hostSubdomain: the domain
	prefix         netip.Prefix // hostIP (a single address), hostCIDR
	portLo, portHi uint16

	// Header holds the headers the host adds to each request this entry grants
	// ([http.headers."ENTRY"]); nil for none.
	Header http.Header
	// Limit is the entry's [http.limits."ENTRY"]; nil for none.
	Limit *Limit
}

// String returns the entry in its canonical form: scheme://host:port or :lo-hi.
func (e *Entry) String() string {
	var host string
	switch e.kind {
	case hostSubdomain:
		host = "*." + e.name
	case hostAnyName:
		host = "*"
	case hostIP:
		host = e.prefix.Addr().String()
		if e.prefix.Addr().Is6() {
			host = "[" + host + "]"
		}
	case hostCIDR:
		host = e.prefix.String()
		if e.prefix.Addr().Is6() {
			host = "[" + host + "]"
		}
	default:
		host = e.name
	}
	port := strconv.Itoa(int(e.portLo))
	if e.portHi != e.portLo {
		port += "-" + strconv.Itoa(int(e.portHi))
	}
	return e.scheme + "://" + host + ":" + port
}

// private reports whether the entry grants addresses the strict dialer refuses: an
// IP literal, a CIDR, or localhost.
func (e *Entry) private() bool {
	return e.kind == hostIP || e.kind == hostCIDR || e.kind == hostLocalhost
}

// Limit is an entry's [http.limits."ENTRY"]: a token bucket and a concurrency cap for
// the module's calls to it on one host (each hop of a request counts under the entry
// that grants it). A wait counts against the request's deadline; one that would pass
// it fails as KindRateLimited.
type Limit struct {
	// PerSecond is the bucket's rate; zero means no rate limit.
	PerSecond float64
	// Burst is the bucket's size; zero means 1.
	Burst int
	// Concurrency bounds the calls in flight; zero means no bound.
	Concurrency int
}

// Grant is a module's [http] table: where its requests may go and what bounds them.
type Grant struct {
	// Allow is the allow list, in the manifest's order.
	Allow []*Entry
	// Timeout bounds one request, connect to last byte; never past the job's deadline.
	Timeout time.Duration
	// MaxResponse bounds the body bytes a guest may read from one response, after
	// decompression.
	MaxResponse int64
	// MaxRequests bounds the requests one run of a handler may start.
	MaxRequests int
	// MaxRequestBody bounds the body of one request; a session holds at most
	// SessionBodyFactor times it in the bodies of its open requests.
	MaxRequestBody int64
	// IdempotencyHeader, when set, is the header of the idempotency keys the host adds
	// to each request that is not GET, HEAD or OPTIONS and lacks it (Session).
	IdempotencyHeader string
	// OutageWait bounds how long, in all, the host defers a job whose call found its
	// destination's circuit breaker open.
	OutageWait time.Duration
	// BreakerFailures is how many consecutive failures (connection failures, the
	// grant's timeout passing, 5xx) open a destination's circuit breaker.
	BreakerFailures int
	// BreakerCooldown is how long an open breaker refuses calls before it lets one
	// probe through.
	BreakerCooldown time.Duration
}

// FieldError is a problem with one key of the [http] table; Key is its path inside
// the table ("allow", "headers", "https://api.example.com", "Authorization").
type FieldError struct {
	Key []string
	Err error
}

func (e *FieldError) Error() string { return e.Err.Error() }
func (e *FieldError) Unwrap() error { return e.Err }

func fieldErr(err error, key ...string) error {
	var fe *FieldError
	if errors.As(err, &fe) {
		fe.Key = append(slices.Clone(key), fe.Key...)
		return fe
	}
	return &FieldError{Key: key, Err: err}
}

// LookupEnv reads an environment variable, as os.LookupEnv does.
type LookupEnv func(name string) (string, bool)

// ParseGrant checks the decoded [http] table of a manifest (TOML values: strings,
// int64s, []any, map[string]any) and returns the grant. ${env:NAME} in the values of
// [http.headers."ENTRY"] is read with env (os.LookupEnv when nil); a variable that is
// not set is an error naming it. Errors are *FieldError naming the key at fault.
func ParseGrant(table map[string]any, env LookupEnv) (*Grant, error) {
	if env == nil {
		env = os.LookupEnv
	}
	g := &Grant{Timeout: DefaultTimeout, MaxResponse: DefaultMaxResponse, MaxRequests: DefaultMaxRequests,
		MaxRequestBody: DefaultMaxRequestBody, OutageWait: DefaultOutageWait,
		BreakerFailures: DefaultBreakerFailures, BreakerCooldown: DefaultBreakerCooldown}
	known := []string{"allow", "breaker_cooldown", "breaker_failures", "headers", "idempotency_header", "limits", "max_request_body", "max_requests", "max_response", "outage_wait", "timeout"}
	for _, k := range slices.Sorted(maps.Keys(table)) {
		if !slices.Contains(known, k) {
			return nil, fieldErr(fmt.Errorf("unknown http setting (known: %s)", strings.Join(known, ", ")), k)
		}
	}
	rawAllow, ok := table["allow"]
	if !ok {
		return nil, fieldErr(errors.New(`[http] needs allow, a list of "scheme://host[:port]" entries such as ["https://api.example.com"]`), "allow")
	}
	list, ok := rawAllow.([]any)
	if !ok {
		return nil, fieldErr(fmt.Errorf(`want a list of "scheme://host[:port]" entries, got %s`, tomlvalue.Describe(rawAllow)), "allow")
	}
	for _, v := range list {
		s, ok := v.(string)
		if !ok {
			return nil, fieldErr(fmt.Errorf("want strings, got %s in the list", tomlvalue.Describe(v)), "allow")
		}
		e, err := ParseEntry(s)
		if err != nil {
			return nil, fieldErr(err, "allow")
		}
		// A second listing of an entry would be shadowed by the first (Match) while
		// [http.headers] and [http.limits] could name either: refused.
		if i := slices.IndexFunc(g.Allow, func(a *Entry) bool { return a.String() == e.String() }); i >= 0 {
			return nil, fieldErr(fmt.Errorf("%q is %s again (entry %d): list each entry once", s, e, i+1), "allow")
		}
		g.Allow = append(g.Allow, e)
	}
	between := func(lo, hi int) func(any) (int, error) { return func(v any) (int, error) { return whole(v, lo, hi) } }
	for _, err := range []error{ // each field's first error, in this order
		setField(table, "timeout", &g.Timeout, duration),
		setField(table, "outage_wait", &g.OutageWait, duration),
		setField(table, "breaker_cooldown", &g.BreakerCooldown, duration),
		setField(table, "breaker_failures", &g.BreakerFailures, between(1, 1000)),
		setField(table, "max_response", &g.MaxResponse, size),
		setField(table, "max_request_body", &g.MaxRequestBody, size),
		setField(table, "max_requests", &g.MaxRequests, between(1, MaxRequestsLimit)),
	} {
		if err != nil {
			return nil, err
		}
	}
	if v, ok := table["idempotency_header"]; ok {
		s, ok := v.(string)
		if !ok || !validHeaderName(s) {
			return nil, fieldErr(fmt.Errorf("want a header name such as \"Idempotency-Key\", got %s", tomlvalue.Describe(v)), "idempotency_header")
		}
		g.IdempotencyHeader = http.CanonicalHeaderKey(s)
	}
	if v, ok := table["headers"]; ok {
		if err := g.parseTables(v, "headers", func(e *Entry, t map[string]any) error { return parseHeaders(e, t, env) }); err != nil {
			return nil, err
		}
	}
	if v, ok := table["limits"]; ok {
		if err := g.parseTables(v, "limits", parseLimit); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// setField decodes table[key] with parse into *dst when the table has the key; the error
// names the key.
func setField[T any](table map[string]any, key string, dst *T, parse func(any) (T, error)) error {
	v, ok := table[key]
	if !ok {
		return nil
	}
	x, err := parse(v)
	if err != nil {
		return fieldErr(err, key)
	}
	*dst = x
	return nil
}

// parseTables parses [http.NAME."ENTRY"] tables, each keyed by an allow entry.
func (g *Grant) parseTables(v any, name string, parse func(*Entry, map[string]any) error) error {
	tables, ok := v.(map[string]any)
	if !ok {
		return fieldErr(fmt.Errorf(`want tables such as [http.%s."https://api.example.com"], got %s`, name, tomlvalue.Describe(v)), name)
	}
	for _, key := range slices.Sorted(maps.Keys(tables)) {
		e, err := ParseEntry(key)
		if err != nil {
			return fieldErr(fmt.Errorf("key %q: %w", key, err), name, key)
		}
		var entry *Entry
		for _, a := range g.Allow {
			if a.String() == e.String() {
				entry = a // allow lists each entry once
				break
			}
		}
		if entry == nil {
			return fieldErr(fmt.Errorf("%q is not an entry of allow (%s)", key, g.allowList()), name, key)
		}
		t, ok := tables[key].(map[string]any)
		if !ok {
			return fieldErr(fmt.Errorf("want a table, got %s", tomlvalue.Describe(tables[key])), name, key)
		}
		if err := parse(entry, t); err != nil {
			return fieldErr(err, name, key)
		}
	}
	return nil
}

func (g *Grant) allowList() string {
	s := make([]string, len(g.Allow))
	for i, e := range g.Allow {
		s[i] = e.String()
	}
	return strings.Join(s, ", ")
}

var envRef = regexp.MustCompile(`\$\{([^}]*)\}`)

func parseHeaders(e *Entry, t map[string]any, env LookupEnv) error {
	if e.kind == hostAnyName {
		return errors.New("host-added headers are refused on a * entry: the guest picks the destination, so it could send them to a server of its own and read them back; " +
			"grant the API by its name and put the headers there")
	}
	e.Header = http.Header{}
	for _, name := range slices.Sorted(maps.Keys(t)) {
		s, ok := t[name].(string)
		if !ok {
			return fieldErr(fmt.Errorf("want a string, got %s", tomlvalue.Describe(t[name])), name)
		}
		if !validHeaderName(name) {
			return fieldErr(fmt.Errorf("%q is not a header name", name), name)
		}
		var bad error
		value := envRef.ReplaceAllStringFunc(s, func(ref string) string {
			inner := ref[2 : len(ref)-1]
			v, isEnv := strings.CutPrefix(inner, "env:")
			if !isEnv || v == "" {
				bad = fmt.Errorf("%s: want ${env:NAME}, the only substitution", ref)
				return ""
			}
			val, set := env(v)
			if !set {
				bad = fmt.Errorf("environment variable %s is not set (referenced as ${env:%s})", v, v)
				return ""
			}
			return val
		})
		if bad != nil {
			return fieldErr(bad, name)
		}
		if !validHeaderValue(value) {
			// The value may hold a secret: the message does not quote it.
			return fieldErr(errors.New("the value holds CR, LF or NUL"), name)
		}
		e.Header.Add(name, value)
	}
	return nil
}

func parseLimit(e *Entry, t map[string]any) error {
	l := &Limit{}
	for _, k := range slices.Sorted(maps.Keys(t)) {
		var err error
		switch k {
		case "rate":
			l.PerSecond, err = parseRate(t[k])
		case "burst":
			l.Burst, err = whole(t[k], 1, 1_000_000)
		case "concurrency":
			l.Concurrency, err = whole(t[k], 1, 100_000)
		default:
			err = errors.New("unknown limit (known: burst, concurrency, rate)")
		}
		if err != nil {
			return fieldErr(err, k)
		}
	}
	if l.Burst > 0 && l.PerSecond == 0 {
		return fieldErr(errors.New(`burst is set without rate: set rate = "N/s" too, or remove burst`), "burst")
	}
	e.Limit = l
	return nil
}

// ParseEntry parses an allow entry: scheme://host[:port], scheme http or https; host
// an exact name, *.domain (subdomains only), * (any name), an IP literal ([v6] in
// brackets) or a CIDR; port a number or an inclusive range lo-hi, by default the
// scheme's. No path, query, user or fragment.
func ParseEntry(s string) (*Entry, error) {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return nil, fmt.Errorf(`%q: want "scheme://host[:port]" such as "https://api.example.com"`, s)
	}
	e := &Entry{scheme: strings.ToLower(scheme)}
	switch e.scheme {
	case "http":
		e.portLo, e.portHi = 80, 80
	case "https":
		e.portLo, e.portHi = 443, 443
	case "*":
		return nil, fmt.Errorf("%q: the scheme must be named (http or https), not *", s)
	default:
		return nil, fmt.Errorf("%q: scheme %q is not http or https", s, scheme)
	}
	if strings.ContainsAny(rest, "?#@") {
		return nil, fmt.Errorf("%q: an entry has no user, query or fragment", s)
	}
	var host, port string
	if strings.HasPrefix(rest, "[") {
		end := strings.IndexByte(rest, ']')
		if end < 0 {
			return nil, fmt.Errorf("%q: unclosed [", s)
		}
		host, rest = rest[1:end], rest[end+1:]
		if rest != "" {
			p, ok := strings.CutPrefix(rest, ":")
			if !ok {
				return nil, fmt.Errorf("%q: an entry has no path (got %q after the host)", s, rest)
			}
			port = p
		}
		if strings.ContainsRune(host, '/') {
			p, err := netip.ParsePrefix(host)
			if err != nil || !p.Addr().Is6() {
				return nil, fmt.Errorf("%q: %q is not an IPv6 CIDR", s, host)
			}
			e.kind, e.prefix = hostCIDR, p.Masked()
		} else {
			a, err := netip.ParseAddr(host)
			if err != nil || !a.Is6() || a.Zone() != "" {
				return nil, fmt.Errorf("%q: %q is not an IPv6 address", s, host)
			}
			e.kind, e.prefix = hostIP, netip.PrefixFrom(a, 128)
		}
	} else {
		host, port, _ = strings.Cut(rest, ":")
		slash := strings.IndexByte(host, '/')
		if slash >= 0 {
			if p, err := netip.ParsePrefix(host); err == nil && p.Addr().Is4() {
				e.kind, e.prefix = hostCIDR, p.Masked()
			} else {
				return nil, fmt.Errorf("%q: an entry has no path (got %q)", s, host[slash:])
			}
		} else if a, err := netip.ParseAddr(host); err == nil && a.Is4() {
			e.kind, e.prefix = hostIP, netip.PrefixFrom(a, 32)
		} else {
			host = strings.TrimSuffix(strings.ToLower(host), ".")
			switch {
			case host == "*":
				e.kind = hostAnyName
			case strings.HasPrefix(host, "*."):
				if !validName(host[2:]) {
					return nil, fmt.Errorf("%q: %q is not a domain name", s, host[2:])
				}
				e.kind, e.name = hostSubdomain, host[2:]
			case strings.Contains(host, "*"):
				return nil, fmt.Errorf("%q: a wildcard is only * or *.domain", s)
			case host == "localhost":
				e.kind, e.name = hostLocalhost, host
			case validName(host):
				e.kind, e.name = hostName, host
			default:
				return nil, fmt.Errorf("%q: %q is not a host name or IP address", s, host)
			}
		}
	}
	if (e.kind == hostIP || e.kind == hostCIDR) && (e.prefix.Addr().IsUnspecified() || e.prefix.Addr().Is4In6()) {
		return nil, fmt.Errorf("%q: an unspecified or IPv4-mapped address cannot be granted", s)
	}
	if port != "" {
		if strings.ContainsRune(port, '/') {
			return nil, fmt.Errorf("%q: an entry has no path", s)
		}
		lo, hi, isRange := strings.Cut(port, "-")
		if !isRange {
			hi = lo
		}
		l, err1 := strconv.ParseUint(lo, 10, 16)
		h, err2 := strconv.ParseUint(hi, 10, 16)
		if err1 != nil || err2 != nil || l == 0 || h < l {
			return nil, fmt.Errorf("%q: port %q is not a number from 1 to 65535 or a range lo-hi", s, port)
		}
		e.portLo, e.portHi = uint16(l), uint16(h)
	}
	return e, nil
}

// validName reports whether s is a DNS name: dot-separated labels of letters, digits,
// '-' and '_', none empty, at most 253 characters.
func validName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for label := range strings.SplitSeq(s, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// validHeaderName reports whether s is an HTTP token (RFC 9110, 5.6.2).
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

// validHeaderValue reports whether s holds no CR, LF or NUL: no header can be smuggled.
func validHeaderValue(s string) bool { return !strings.ContainsAny(s, "\r\n\x00") }

func duration(v any) (time.Duration, error) {
	s, ok := v.(string)
	d, err := time.ParseDuration(s)
	if !ok || err != nil || d <= 0 || d > 24*time.Hour {
		return 0, fmt.Errorf("want a duration from 1ms to 24h such as \"30s\", got %s", tomlvalue.Describe(v))
	}
	return d, nil
}

func whole(v any, lo, hi int) (int, error) {
	n, ok := v.(int64)
	if !ok {
		return 0, fmt.Errorf("want a whole number, got %s", tomlvalue.Describe(v))
	}
	if n < int64(lo) || n > int64(hi) {
		return 0, fmt.Errorf("want %d to %d, got %d", lo, hi, n)
	}
	return int(n), nil
}

// size parses a number of bytes, or a string with a unit (B, KiB, MiB, GiB), from 1 B
// to 1 GiB.
func size(v any) (int64, error) {
	bad := fmt.Errorf(`want a size from 1B to 1GiB such as "10MiB" or a number of bytes, got %s`, tomlvalue.Describe(v))
	var n int64
	switch x := v.(type) {
	case int64:
		n = x
	case string:
		mult := int64(0)
		for _, u := range []struct {
			suffix string
			mult   int64
		}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}} {
			if num, ok := strings.CutSuffix(x, u.suffix); ok {
				k, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64)
				if err != nil || k < 0 || k > (1<<30)/u.mult {
					return 0, bad
				}
				n, mult = k*u.mult, u.mult
				break
			}
		}
		if mult == 0 {
			return 0, bad
		}
	default:
		return 0, bad
	}
	if n < 1 || n > 1<<30 {
		return 0, bad
	}
	return n, nil
}

// parseRate parses "N/s", "N/m" or "N/h".
func parseRate(v any) (float64, error) {
	s, ok := v.(string)
	num, unit, cut := strings.Cut(s, "/")
	per := map[string]float64{"s": 1, "m": 60, "h": 3600}[strings.TrimSpace(unit)]
	n, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if !ok || !cut || per == 0 || err != nil || !(n > 0) || n/per > 1_000_000 || n/per < 1.0/3600 {
		return 0, fmt.Errorf(`want a rate from "1/h" to "1000000/s" such as "20/s", "600/m" or "10/h", got %s`, tomlvalue.Describe(v))
	}
	return n / per, nil
}
