package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/riverqueue/river"
)

// getWorker works a job by a GET of url, its body read whole, as wasmjobs' bench
// --http-delay handlers do.
type getWorker struct {
	river.WorkerDefaults[benchArgs]
	url    string
	client *http.Client
}

// newGetWorker returns a getWorker whose client keeps idle connections for workers
// jobs at once.
func newGetWorker(url string, workers int) *getWorker {
	tr := &http.Transport{Proxy: nil, MaxIdleConns: workers, MaxIdleConnsPerHost: workers, IdleConnTimeout: 90 * time.Second}
	return &getWorker{url: url, client: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
}

func (w *getWorker) Work(ctx context.Context, _ *river.Job[benchArgs]) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, w.url, nil)
	if err != nil {
		return err
	}
	resp, err := w.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return errors.New(resp.Status)
	}
	return nil
}

// slowServer starts a loopback HTTP server that answers every request 200 "ok" after
// delay, and returns its URL and a function that stops it.
func slowServer(delay time.Duration) (url string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("riverpeer: the HTTP server: %w", err)
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

// resetPeakRSS returns what it can of the heap to the OS and resets the resident
// high-water mark to the current resident set (Linux's /proc/self/clear_refs).
func resetPeakRSS() {
	debug.FreeOSMemory()
	os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
}

// statusMB reads a figure in kB of /proc/self/status, such as "VmHWM:", in MB; 0 where
// there is none.
func statusMB(field string) float64 {
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
