package host_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/host"
	"github.com/wasmjobs/wasmjobs/worker"
)

// TestCanaryTimePromotes runs a canary that sees too few jobs to reach canary_jobs: at
// canary_time it is promoted, unless it does worse, in which case it waits for
// canary_min_jobs and is then rolled back. Virtual time.
func TestCanaryTimePromotes(t *testing.T) {
	for _, c := range []struct {
		name, next string
		want       string
	}{
		{"good", "abi/ack", host.VerdictPromoted},
		{"failing", "hostile/trap", host.VerdictRolledBack},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				e, err := host.NewEngine(ctx, host.Config{NoCache: true})
				if err != nil {
					t.Fatal(err)
				}
				defer e.Close(ctx)
				cur, err := e.Load(ctx, "svc", variant(t, "abi/ack", "v1"), host.Manifest{})
				if err != nil {
					t.Fatal(err)
				}
				next, err := e.Load(ctx, "svc", testdataModule(t, c.next), host.Manifest{})
				if err != nil {
					t.Fatal(err)
				}
				h := host.NewHandler(cur, nil)
				ended := make(chan host.Verdict, 1)
				h.StartCanary(next, host.Rollout{CanaryPercent: 100, CanaryMinJobs: 5}, func(v host.Verdict) { ended <- v })
				run := func(i int) worker.Result {
					env := backend.NewEnvelope("svc", nil)
					env.ID = fmt.Sprintf("job-%d", i)
					return h.Handle(ctx, &worker.Job{Envelope: env, Attempt: 1, MaxAttempts: 3})
				}
				for i := range 3 {
					if res := run(i); res.Role != host.RoleCanary {
						t.Fatalf("job %d ran as %q, want on the canary", i, res.Role)
					}
				}
				time.Sleep(host.DefaultCanaryTime - time.Second)
				synctest.Wait()
				if h.Canary() == nil {
					t.Fatalf("the canary ended before canary_time")
				}
				time.Sleep(time.Second)
				synctest.Wait()
				if c.want == host.VerdictRolledBack {
					// Worse, with 3 jobs of the 5 it needs: still on trial.
					if h.Canary() == nil || len(ended) != 0 {
						t.Fatalf("a failing canary with too few jobs ended at canary_time")
					}
					run(3)
					run(4)
				}
				select {
				case v := <-ended:
					if v.Kind != c.want {
						t.Fatalf("verdict %+v, want %s", v, c.want)
					}
				default:
					t.Fatalf("no verdict; canary %+v", h.Canary())
				}
				if h.Canary() != nil {
					t.Fatal("the canary still runs after its verdict")
				}
				wantV := cur.Version()
				if c.want == host.VerdictPromoted {
					wantV = next.Version()
				}
				if res := run(99); res.Version != wantV || res.Role != "" {
					t.Fatalf("a job after the verdict ran on %s as %q, want %s", res.Version, res.Role, wantV)
				}
				h.Module().Retire()
			})
		})
	}
}
