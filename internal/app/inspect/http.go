package inspect

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
)

// BearerToken is the token of r's "Authorization: Bearer TOKEN" header (the scheme in
// any case, RFC 9110 11.1); ok is false without one, or with another scheme.
func BearerToken(r *http.Request) (token string, ok bool) {
	scheme, token, found := strings.Cut(r.Header.Get("Authorization"), " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return token, true
}

// Guard puts in front of next what the API and the dashboard both refuse before they
// look at a token: a cross-origin state change (a page of another site that posts to
// this host), answered by deny, and, on a loopback listener (loopback true), a Host
// that is not a loopback name (LoopbackOnly), outermost.
func Guard(next http.Handler, loopback bool, deny http.HandlerFunc) http.Handler {
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(deny)
	h := cop.Handler(next)
	if loopback {
		h = LoopbackOnly(h)
	}
	return h
}

// LoopbackOnly refuses a request whose Host is not a loopback name or address, with
// 403 and a JSON error: on a loopback listener any other Host means a DNS name was
// rebound to this machine. A request without a Host (HTTP/1.0, such as a load
// balancer's health check) passes: a browser always sends one, so its absence cannot
// be a rebinding. The API and the dashboard on the same listener both use it.
func LoopbackOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Host != "" && !IsLoopbackHost(r.Host) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusForbidden)
			enc := json.NewEncoder(w)
			enc.SetEscapeHTML(false)
			enc.Encode(map[string]string{"error": fmt.Sprintf("Host %q refused: this API listens on loopback and answers only to localhost, 127.0.0.0/8 or [::1]", r.Host)})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// IsLoopbackHost reports whether host, a Host header with or without a port, names
// this machine's loopback: localhost (also fully qualified, "localhost."), an address
// of 127.0.0.0/8, or [::1].
func IsLoopbackHost(host string) bool {
	h, _, err := net.SplitHostPort(host)
	if err != nil { // no port
		h = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	}
	if strings.EqualFold(strings.TrimSuffix(h, "."), "localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}
