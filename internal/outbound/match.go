package outbound

import (
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// Match returns the entry of the grant that allows u (layer 1): its scheme, host and
// port; the most specific entry when several do (an exact name before *.domain before
// *, an IP literal before a CIDR, a longer CIDR first; of two as specific, the narrower
// port range). A URL no entry allows is a
// KindDenied *Error.
func (g *Grant) Match(u *url.URL) (*Entry, error) {
	deny := func(why string) error {
		return &Error{Kind: KindDenied, Msg: fmt.Sprintf("%s://%s is not granted: %s (allow: %s)", u.Scheme, u.Host, why, g.allowList())}
	}
	scheme := strings.ToLower(u.Scheme)
	if scheme != "http" && scheme != "https" {
		return nil, deny("the scheme is not http or https")
	}
	if u.User != nil {
		return nil, deny("a URL with a user is not allowed")
	}
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	port := uint16(80)
	if scheme == "https" {
		port = 443
	}
	if p := u.Port(); p != "" {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n == 0 {
			return nil, deny("bad port")
		}
		port = uint16(n)
	}
	addr, err := netip.ParseAddr(host)
	isIP := err == nil
	if isIP {
		if addr.Zone() != "" {
			return nil, deny("an address with a zone is not allowed")
		}
		addr = addr.Unmap() // ::ffff:a.b.c.d is a.b.c.d, in the grant as at connect time
	}
	var best *Entry
	bestScore := 0
	for _, e := range g.Allow {
		if e.scheme != scheme || port < e.portLo || port > e.portHi {
			continue
		}
		score := 0
		switch e.kind {
		case hostName, hostLocalhost:
			if !isIP && host == e.name {
				score = 1000
			}
		case hostSubdomain:
			if !isIP && strings.HasSuffix(host, "."+e.name) {
				score = 300 + len(e.name)
			}
		case hostAnyName:
			// Names, and IP literals too: those go through the strict dialer, so only
			// public addresses are reached.
			score = 1
		case hostIP:
			if isIP && e.prefix.Addr() == addr {
				score = 1000
			}
		case hostCIDR:
			if isIP && e.prefix.Contains(addr) {
				score = 300 + e.prefix.Bits()
			}
		}
		// Of two entries as specific (one host, two port ranges), the narrower range
		// wins, wherever it is listed: its headers and limits are for its ports.
		if score > bestScore || score > 0 && score == bestScore && e.portHi-e.portLo < best.portHi-best.portLo {
			best, bestScore = e, score
		}
	}
	if best == nil {
		return nil, deny("no entry of allow matches its scheme, host and port")
	}
	return best, nil
}
