package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/wasmjobs/wasmjobs/host"
	"github.com/wasmjobs/wasmjobs/worker"
)

// loopbackGrant is the grant a module gets in a run with HTTPDelay: loopback on every
// port (the server's port is known only once it listens), one request a job.
const loopbackGrant = "\n[http]\nallow = [\"http://127.0.0.1:1-65535\"]\nmax_requests = 1\n"

// readManifest reads the manifest of the module file wasmPath (the defaults when it has
// none), with loopbackGrant when grant is set.
func readManifest(wasmPath string, grant bool) (host.Manifest, error) {
	if !grant {
		return host.ReadManifest(wasmPath)
	}
	path := host.ManifestPath(wasmPath)
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return host.Manifest{}, err
	}
	man, err := host.ParseManifest(path, append(data, loopbackGrant...))
	if err != nil {
		return host.Manifest{}, fmt.Errorf("the benchmark's grant: %w", err)
	}
	return man, nil
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
