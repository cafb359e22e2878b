package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/internal/rigs/testbroker"
)

// longDelay is how long the quorum test delays the jobs it enqueues before the node
// stops: 2^13 delay units, one level of the chain, and far longer than a stop and the
// elections after it take (up to 30 s seen on a loaded machine), so that these jobs
// leave their level only once the new leaders are in place.
const longDelay = 81920 * time.Millisecond

// clusterScriptPath is the path of scripts/rabbitmq-cluster.sh.
func clusterScriptPath() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "scripts", "rabbitmq-cluster.sh")
}

// clusterScript runs scripts/rabbitmq-cluster.sh with args and returns its output.
func clusterScript(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(clusterScriptPath(), args...).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("rabbitmq-cluster.sh %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr)
	}
	return strings.TrimSpace(string(out))
}

// TestQuorumQueuesSurviveTheLeadersNode runs two hosts on quorum queues of the
// three-node test cluster (scripts/rabbitmq-cluster.sh), one connected first to node 1,
// the other to node 2, and stops the node that leads the work queue while jobs are
// enqueued and worked: every job whose enqueue was answered 202 succeeds, and a host
// whose connection went with the node reconnects by itself. Half the jobs are delayed,
// through the quorum delay chain: before the stop by longDelay, so that they wait in the
// chain across it, and after it by 1.5 s; none is enqueued delayed while the node stops,
// because RabbitMQ 3.10.8 can hold a job that passes between two delay levels at that
// moment for minutes (see README, "Quorum queues and a cluster"). The node is started
// again at the end.
func TestQuorumQueuesSurviveTheLeadersNode(t *testing.T) {
	urls := strings.Split(testbroker.ClusterURLs(t), ",")
	if len(urls) != 3 {
		t.Fatalf("want the three URLs of the cluster, got %q", urls)
	}
	dir := t.TempDir()
	q := "clu-" + uniqueSuffix()
	installModule(t, dir, "abi/echo", q, "1")
	rotated := append(slices.Clone(urls[1:]), urls[0])
	hosts := []*hostProc{
		startHost(t, dir, "--backend", strings.Join(urls, ","), "--queue-type", "quorum", "--history", "100000", "--log-level", "info"),
		startHost(t, dir, "--backend", strings.Join(rotated, ","), "--queue-type", "quorum", "--history", "100000", "--log-level", "info"),
	}

	// Enqueue through both hosts' APIs, one job at a time each, until told to stop:
	// a job counts once the API answered 202 (the broker confirmed it).
	var mu sync.Mutex
	var accepted []string
	delayed := make(map[string]bool) // accepted id -> enqueued with a delay
	var refused atomic.Int64
	// phase: 0 before the stop, 1 while the node stops and its queues elect new
	// leaders, 2 after.
	var phase atomic.Int32
	var firstLong, lastLong time.Time // when the first and last jobs delayed by longDelay were accepted
	stop := make(chan struct{})
	var publishers sync.WaitGroup
	client := &http.Client{Timeout: 30 * time.Second}
	for _, h := range hosts {
		publishers.Go(func() {
			for sent := 0; ; {
				select {
				case <-stop:
					return
				default:
				}
				// Every other job goes through the delay chain, whose queues a node's
				// stop must not strand either.
				job := map[string]string{"queue": q, "payload": "job"}
				p := phase.Load()
				delay := sent%2 == 1 && p != 1
				switch {
				case delay && p == 0:
					job["delay"] = longDelay.String()
				case delay:
					job["delay"] = "1500ms"
				}
				sent++
				body, _ := json.Marshal(job)
				resp, err := client.Post(h.url+"/v1/jobs", "application/json", bytes.NewReader(body))
				if err != nil {
					refused.Add(1)
					time.Sleep(50 * time.Millisecond)
					continue
				}
				var out struct{ ID string }
				json.NewDecoder(resp.Body).Decode(&out)
				resp.Body.Close()
				if resp.StatusCode != http.StatusAccepted {
					refused.Add(1)
					time.Sleep(50 * time.Millisecond)
					continue
				}
				mu.Lock()
				accepted = append(accepted, out.ID)
				delayed[out.ID] = delay
				if delay && p == 0 {
					if firstLong.IsZero() {
						firstLong = time.Now()
					}
					lastLong = time.Now()
				}
				mu.Unlock()
			}
		})
	}
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(accepted) }
	waitFor(t, "300 jobs enqueued before the stop", func() bool { return count() >= 300 })

	leader := clusterScript(t, "leader", q)
	t.Cleanup(func() { clusterScript(t, "start-node", leader) })
	before := count()
	phase.Store(1)
	stopped := time.Now()
	clusterScript(t, "stop-node", leader)
	took := time.Since(stopped)
	// The work queue has a new leader: the node's queues have elected theirs.
	waitFor(t, "a new leader of "+q, func() bool {
		out, err := exec.Command(clusterScriptPath(), "leader", q).Output()
		return err == nil && strings.TrimSpace(string(out)) != leader
	})
	phase.Store(2)
	t.Logf("node %d led %s; stopped in %v with %d jobs enqueued, a new leader %v later", leader[0]-'0', q, took.Round(time.Millisecond), before, (time.Since(stopped) - took).Round(time.Millisecond))
	mu.Lock()
	if since := time.Since(firstLong); since >= longDelay {
		t.Logf("the stop and the elections ended %v after the first job delayed by %v: such jobs may have passed between two levels meanwhile", since.Round(time.Millisecond), longDelay)
	}
	mu.Unlock()
	afterStop := count()
	deadline := time.Now().Add(60 * time.Second)
	for count() < afterStop+300 {
		if time.Now().After(deadline) {
			t.Fatalf("only %d jobs enqueued in the 60 s after the stop", count()-afterStop)
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	publishers.Wait()
	t.Logf("%d jobs enqueued (%d during the stop, %d after), %d enqueues refused", count(), afterStop-before, count()-afterStop, refused.Load())

	// Every accepted job succeeds on one host or the other. The wait goes on while jobs
	// keep succeeding (a loaded machine is slow, not lossy): a minute in which none of
	// the rest succeeds, once the jobs delayed by longDelay are due, is a stranding, and
	// the failure says where each job is.
	succeeded := func(id string) bool {
		for _, h := range hosts {
			var st jobState
			if h.get("/v1/jobs/"+id, &st) == http.StatusOK && st.State == "succeeded" {
				return true
			}
		}
		return false
	}
	pending := slices.Clone(accepted)
	waitStart, progress := time.Now(), time.Now()
	for {
		before := len(pending)
		pending = slices.DeleteFunc(pending, succeeded)
		if len(pending) == 0 {
			break
		}
		if len(pending) < before {
			progress = time.Now()
		}
		quietSince := progress
		if due := lastLong.Add(longDelay); due.After(quietSince) {
			quietSince = due
		}
		if time.Since(quietSince) > time.Minute || time.Since(waitStart) > 5*time.Minute {
			t.Errorf("%d of %d accepted jobs never succeeded (none for %v, %v after the last enqueue)",
				len(pending), len(accepted), time.Since(progress).Round(time.Second), time.Since(waitStart).Round(time.Second))
			t.Logf("where the hosts have them:\n%s", whereJobs(hosts, pending, delayed))
			t.Logf("the broker's queues:\n%s", clusterScript(t, "queues", q))
			t.FailNow()
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("all %d jobs succeeded %v after the last enqueue", len(accepted), time.Since(waitStart).Round(time.Second))

	// A host that lost its connection got it back by itself.
	lost := 0
	for i, h := range hosts {
		log := h.log()
		if strings.Contains(log, "RabbitMQ connection lost") {
			lost++
			if !strings.Contains(log, "RabbitMQ connection restored") {
				t.Errorf("host %d lost its connection and never restored it:\n%s", i, log)
			}
		}
	}
	if lost == 0 {
		t.Errorf("no host lost its connection when node %s stopped: the test proved nothing about reconnecting", leader)
	}
}

// whereJobs groups the jobs ids by whether they were delayed and the state each host's
// API gives them ("-" where the host does not know the job), one line a group with its
// count and an example.
func whereJobs(hosts []*hostProc, ids []string, delayed map[string]bool) string {
	type group struct {
		n       int
		example string
	}
	groups := make(map[string]*group)
	for _, id := range ids {
		key := fmt.Sprintf("delayed=%v", delayed[id])
		for i, h := range hosts {
			var st jobState
			state := "-"
			if h.get("/v1/jobs/"+id, &st) == http.StatusOK {
				state = st.State
				if st.Attempt > 0 {
					state += fmt.Sprintf("(attempt %d)", st.Attempt)
				}
			}
			key += fmt.Sprintf(" host%d=%s", i, state)
		}
		g := groups[key]
		if g == nil {
			g = &group{example: id}
			groups[key] = g
		}
		g.n++
	}
	var lines []string
	for key, g := range groups {
		lines = append(lines, fmt.Sprintf("%5d %s, e.g. %s", g.n, key, g.example))
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}
