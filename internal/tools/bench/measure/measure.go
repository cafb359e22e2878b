// Package measure holds what the two benchmarks, wasmjobs bench and the River peer,
// measure with, so that their figures come from the same code: the process's resident
// memory and a loopback HTTP server that answers after a delay. It imports nothing but
// the standard library, as the peer's module builds it without the host's
// dependencies.
package measure

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"
)

// SlowServer starts a loopback HTTP server that answers every request 200 "ok" after
// delay, and returns its URL and a function that stops it.
func SlowServer(delay time.Duration) (url string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("the benchmark's HTTP server: %w", err)
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			t := time.NewTimer(delay)
			defer t.Stop()
			select {
			case <-t.C:
				w.Write([]byte("ok"))
			case <-r.Context().Done():
			}
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go srv.Serve(ln)
	return "http://" + ln.Addr().String() + "/", func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	}, nil
}

// ResetPeakRSS returns what it can of the heap to the OS and resets the process's
// resident high-water mark to its current resident set, so that the mark read at the
// end is this run's peak. It reports whether the mark could be reset (Linux only).
func ResetPeakRSS() bool {
	debug.FreeOSMemory()
	// "5" resets the peak RSS (proc(5), since Linux 4.0).
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
}

// StatusMB reads a figure in kB of /proc/self/status, such as "VmRSS:" (the resident
// set) or "VmHWM:" (its high-water mark), in MB; 0 where there is none.
func StatusMB(field string) float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			if kb, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB"))); err == nil {
				return float64(kb) / 1024
			}
		}
	}
	return 0
}
