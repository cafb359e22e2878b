// Package outboundtest holds the handlers of the hostile servers that both the
// outbound client's tests and the host's tests of its HTTP host functions aim at: what
// a server a guest calls may do to the host, written once.
package outboundtest

import (
	"compress/gzip"
	"net/http"
	"time"
)

// Drip answers 200, then a byte a second, each flushed, until the client goes: a body
// that never ends, on a connection never idle long enough for a read timeout.
func Drip(w http.ResponseWriter, r *http.Request) {
	w.WriteHeader(http.StatusOK)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		if _, err := w.Write([]byte("x")); err != nil {
			return
		}
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
			return
		case <-tick.C:
		}
	}
}

// GzipBomb returns a handler that answers zeros, gzipped, for ever, until the client
// goes: a few KiB on the wire for each MiB decompressed. Each MiB is flushed at once,
// so that the head is not held back until the server's buffer fills with compressed
// bytes. Its requests share one read-only MiB of zeros.
func GzipBomb() http.HandlerFunc {
	zeros := make([]byte, 1<<20)
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(w)
		for r.Context().Err() == nil {
			if _, err := zw.Write(zeros); err != nil {
				return
			}
			zw.Flush()
			w.(http.Flusher).Flush()
		}
	}
}
