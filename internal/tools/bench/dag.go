package bench

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/wasmjobs/wasmjobs/backend/pebble"
	"github.com/wasmjobs/wasmjobs/server"
)

// DAGConfig is a run of workflow acceptance: Rounds workflows of Tasks tasks each,
// posted one after the other to POST /v1/workflows of a host on the pebble backend.
type DAGConfig struct {
	// Module serves the queue "bench"; its jobs never run (every task is delayed an
	// hour), so any module that loads will do.
	Module string
	// Tasks and Rounds shape the run; zeros mean 1,000 and 5.
	Tasks, Rounds int
	// CacheDir is the engine's compilation cache; empty means a temporary one.
	CacheDir string
}

// DAG measures how long a workflow of cfg.Tasks tasks takes to be accepted: from the
// request's start to the API's 202, which answers once the whole workflow is on disk
// (one synced write). Each task depends on two earlier ones (i/2 and i-1, as a
// layered graph), so the API checks 2N dependencies and orders the graph. It returns
// each round's time.
func DAG(ctx context.Context, cfg DAGConfig) ([]time.Duration, error) {
	cfg.Tasks, cfg.Rounds = cmp.Or(cfg.Tasks, 1000), cmp.Or(cfg.Rounds, 5)
	wasm, err := os.ReadFile(cfg.Module)
	if err != nil {
		return nil, err
	}
	root, err := os.MkdirTemp("", "wasmjobs-bench-dag-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(root)
	modules := filepath.Join(root, "modules")
	if err := os.Mkdir(modules, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(modules, "bench.wasm"), wasm, 0o644); err != nil {
		return nil, err
	}
	b, err := pebble.Open(ctx, pebble.Config{Dir: filepath.Join(root, "data")})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Close(context.Background())
		return nil, err
	}
	s, err := server.New(b, server.Config{Modules: modules, Listener: ln, CacheDir: cmp.Or(cfg.CacheDir, filepath.Join(root, "cache"))})
	if err != nil {
		ln.Close()
		b.Close(context.Background())
		return nil, err
	}
	if err := s.Start(ctx); err != nil {
		return nil, err
	}
	defer s.Stop(context.Background())
	base := "http://" + ln.Addr().String()
	if err := waitServing(ctx, base, "bench"); err != nil {
		return nil, err
	}
	body := dagBody(cfg.Tasks)
	times := make([]time.Duration, 0, cfg.Rounds)
	for range cfg.Rounds {
		req, err := http.NewRequestWithContext(ctx, "POST", base+"/v1/workflows", bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		start := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, err
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		took := time.Since(start)
		if resp.StatusCode != http.StatusAccepted {
			return nil, fmt.Errorf("POST /v1/workflows of %d tasks: %d %s", cfg.Tasks, resp.StatusCode, out)
		}
		times = append(times, took)
	}
	return times, nil
}

// dagBody is the JSON of a workflow of n tasks on the queue bench, each delayed an
// hour, task i depending on tasks i/2 and i-1 (when they differ and exist).
func dagBody(n int) []byte {
	var sb strings.Builder
	sb.WriteString(`{"tasks": [`)
	for i := range n {
		if i > 0 {
			sb.WriteString(",")
		}
		var deps []string
		if i > 0 {
			deps = append(deps, fmt.Sprintf(`"t%d"`, i/2))
		}
		if i > 1 && i-1 != i/2 {
			deps = append(deps, fmt.Sprintf(`"t%d"`, i-1))
		}
		fmt.Fprintf(&sb, `{"name": "t%d", "queue": "bench", "payload": "%d", "delay": "1h", "depends_on": [%s]}`, i, i, strings.Join(deps, ", "))
	}
	sb.WriteString("]}")
	return []byte(sb.String())
}

// waitServing waits up to 30 s for the host at base to serve queue.
func waitServing(ctx context.Context, base, queue string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, err := http.NewRequestWithContext(ctx, "GET", base+"/v1/queues", nil)
		if err != nil {
			return err
		}
		if resp, err := http.DefaultClient.Do(req); err == nil {
			out, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if bytes.Contains(out, []byte(`"name":"`+queue+`"`)) {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the module did not come to serve queue %q within 30 s", queue)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Median returns the median of ds (the mean of the middle two of an even count).
func Median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(ds))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
