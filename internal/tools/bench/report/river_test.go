package main

import (
	"context"
	"os"
	"regexp"
	"testing"
)

// TestRiverSectionRunsThePeerInEachShape builds and runs internal/tools/bench/riverpeer against
// the Postgres in WASMJOBS_PG_URL, in two short shapes; without it the test is skipped.
// The duration shape runs 6 s: inserting its first 75,000 jobs alone took over 2 s on a
// busy 2-core machine, leaving River no time to work any (0 jobs worked, in CI).
func TestRiverSectionRunsThePeerInEachShape(t *testing.T) {
	if os.Getenv("WASMJOBS_PG_URL") == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("WASMJOBS_PG_URL is not set: CI must start Postgres with scripts/postgres.sh start")
		}
		t.Skip("WASMJOBS_PG_URL is not set: export WASMJOBS_PG_URL=$(scripts/postgres.sh start)")
	}
	got := riverSection(context.Background(), [][]string{{"-n", "6000"}, {"--duration", "6s"}})
	for _, want := range []string{
		`(?m)^## River on PostgreSQL, the peer$`,
		`River v0\.51\.2 on PostgreSQL \d+`,
		`(?m)^\| ` + "`-n 6000`" + ` \| 6000 \| 6000 \| [1-9]\d* \|`,
		`(?m)^\| ` + "`--duration 6s`" + ` \| [1-9]\d* \| \d{5,} \| [1-9]\d* \|`,
		"(?m)^- `cd internal/tools/bench/riverpeer && go run . --duration 6s`$",
	} {
		if !regexp.MustCompile(want).MatchString(got) {
			t.Errorf("the section does not match %s:\n%s", want, got)
		}
	}
}
