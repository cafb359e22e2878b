package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/wasmjobs/wasmjobs/internal/rigs/abitest"
	"github.com/wasmjobs/wasmjobs/internal/tools/bench/measure"
)

// riverPeer builds the River peer and finds its Postgres: WASMJOBS_PG_URL, or the one
// scripts/postgres.sh starts when Debian's postgresql is installed and this runs as
// root (the report never installs it). When either fails, note says why, as a line of
// BENCHMARKS.md, and there is nothing to clean up.
func riverPeer(ctx context.Context) (bin, url string, cleanup func(), note string) {
	root := filepath.Dir(abitest.Dir())
	url = os.Getenv("WASMJOBS_PG_URL")
	if url == "" {
		if _, err := os.Stat("/usr/bin/pg_ctlcluster"); err != nil || os.Geteuid() != 0 {
			return "", "", nil, "\nRiver rows are missing: no Postgres (`export WASMJOBS_PG_URL=$(scripts/postgres.sh start)`).\n"
		}
		out, err := exec.CommandContext(ctx, filepath.Join(root, "scripts", "postgres.sh"), "start").Output()
		if err != nil {
			return "", "", nil, fmt.Sprintf("\nRiver rows are missing: scripts/postgres.sh start failed: %v.\n", err)
		}
		url = strings.TrimSpace(string(out))
	}
	dir, err := os.MkdirTemp("", "wasmjobs-riverpeer-")
	if err != nil {
		log.Fatal(err)
	}
	bin = filepath.Join(dir, "riverpeer")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, ".")
	build.Dir = filepath.Join(root, "internal", "tools", "bench", "riverpeer")
	if out, err := build.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return "", "", nil, fmt.Sprintf("\nRiver rows are missing: building internal/tools/bench/riverpeer failed: %v\n\n```\n%s```\n", err, out)
	}
	return bin, url, func() { os.RemoveAll(dir) }, ""
}

// runRiver runs the built peer with args and --json against url.
func runRiver(ctx context.Context, bin, url string, args []string) (measure.RiverResult, error) {
	log.Printf("running: River peer %s", strings.Join(args, " "))
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, append(slices.Clone(args), "--json", "--database-url", url)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	var r measure.RiverResult
	if err := cmd.Run(); err != nil {
		return r, fmt.Errorf("riverpeer %s failed: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		return r, fmt.Errorf("riverpeer %s printed %q: %v", strings.Join(args, " "), stdout.String(), err)
	}
	return r, nil
}

// riverShapes are river bench's two shapes, as riverpeer's flags.
func riverShapes() [][]string { return [][]string{{"-n", "200000"}, {"--duration", "30s"}} }

// riverSection runs the River peer (internal/tools/bench/riverpeer, a module of its own) in the
// given shapes (riverShapes for the report) when a Postgres is at hand, and returns
// BENCHMARKS.md's section on it. Postgres is WASMJOBS_PG_URL, or the one
// scripts/postgres.sh starts when Debian's postgresql is installed and this runs as root;
// the report never installs it. A peer that fails leaves a note, not a failed report.
func riverSection(ctx context.Context, shapes [][]string) string {
	bin, url, cleanup, note := riverPeer(ctx)
	if note != "" {
		return note
	}
	defer cleanup()
	var results []measure.RiverResult
	for _, shape := range shapes {
		r, err := runRiver(ctx, bin, url, shape)
		if err != nil {
			return fmt.Sprintf("\nRiver rows are missing: %v\n", err)
		}
		results = append(results, r)
	}

	var b strings.Builder
	fmt.Fprintf(&b, "\n## River on PostgreSQL, the peer\n\nRiver %s on PostgreSQL %s (stock settings, unix socket), driven by internal/tools/bench/riverpeer as `river bench` (v0.43.0+) drives it: 2,000 workers, 2 ms fetch cooldown, 20 ms fetch poll, jobs inserted in batches of 5,000 with InsertMany, a no-op worker, completions counted off the client's event subscription, the jobs table truncated and vacuumed first. `-n N` inserts every job, then starts the client and times it working them; `--duration D` inserts and works at once, topping the backlog up to about 75,000 every 250 ms (at least one batch each time, as river bench does). jobs/s is river bench's figure: jobs worked over the time from the client's start to the last job worked. CPU is what the River client process and every postgres process used in that time; jobs per CPU s divides the jobs by the two together, which says more than jobs/s when other work shares the machine.\n\n",
		results[0].RiverVersion, results[0].Postgres)
	b.WriteString("| shape | jobs worked | jobs inserted | jobs/s | client CPU s | Postgres CPU s | Postgres share | jobs per CPU s |\n|---|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		fmt.Fprintf(&b, "| `%s` | %d | %d | %.0f | %.1f | %.1f | %.0f%% | %.0f |\n", r.Shape, r.JobsWorked, r.JobsInserted, r.JobsPerSec, r.ClientCPUS, r.PostgresCPUS, 100*r.PostgresShare, r.JobsPerCPUS)
	}
	b.WriteString("\nCommands (with `export WASMJOBS_PG_URL=$(scripts/postgres.sh start)`):\n\n")
	for _, shape := range shapes {
		fmt.Fprintf(&b, "- `cd internal/tools/bench/riverpeer && go run . %s`\n", strings.Join(shape, " "))
	}
	return b.String()
}
