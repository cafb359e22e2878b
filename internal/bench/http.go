package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/wasmjobs/wasmjobs/internal/outbound"
	"github.com/wasmjobs/wasmjobs/worker"
)

// loopbackGrant is the grant a module gets in a run with HTTPDelay: loopback on every
// port (the server's port is known only once it listens), one request a job.
func loopbackGrant() (*outbound.Grant, error) {
	g, err := outbound.ParseGrant(map[string]any{"allow": []any{"http://127.0.0.1:1-65535"}, "max_requests": int64(1)}, nil)
	if err != nil {
		return nil, fmt.Errorf("the benchmark's grant: %w", err)
	}
	return g, nil
}

// nativeGet is the native handler of a run with HTTPDelay: the GET of the payload's URL
// ("http-get:URL") with a net/http client whose idle pool holds concurrency
// connections, its body read whole.
func nativeGet(concurrency int) (worker.Handler, func(), error) {
	tr := &http.Transport{Proxy: nil, MaxIdleConns: concurrency, MaxIdleConnsPerHost: concurrency, IdleConnTimeout: 90 * time.Second}
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	h := worker.HandlerFunc(func(ctx context.Context, job *worker.Job) worker.Result {
		url, ok := strings.CutPrefix(string(job.Envelope.Payload), "http-get:")
		if !ok {
			return worker.Result{Outcome: worker.DeadLetter, Reason: "the payload is not http-get:URL"}
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return worker.Result{Outcome: worker.DeadLetter, Reason: err.Error()}
		}
		resp, err := client.Do(req)
		if err != nil {
			return worker.Result{Outcome: worker.Failed, Reason: err.Error()}
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err == nil && resp.StatusCode != http.StatusOK {
			err = errors.New(resp.Status)
		}
		if err != nil {
			return worker.Result{Outcome: worker.Failed, Reason: err.Error()}
		}
		return worker.Result{Output: body}
	})
	return h, tr.CloseIdleConnections, nil
}
