package main

import (
	"context"
	"errors"
	"io"
	"net/http"
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
