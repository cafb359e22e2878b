package pebble

import (
	"testing"

	"github.com/wasmjobs/wasmjobs/backend"
)

// A record written as v2 (before attempts kept their calls) still reads: v3 adds
// nothing after v2's fields when there is no attempt, and each attempt's calls after
// them otherwise.
func TestRecordV2StillDecodes(t *testing.T) {
	t.Parallel()
	rec := backend.JobRecord{ID: "01J", Queue: "q", State: backend.JobPending, Attempt: 1, Logs: []string{"a"}, ModuleRole: "current"}
	b := encodeRecord(&rec)
	b[0] = recordV2
	got, err := decodeRecord(b)
	if err != nil || got.ID != "01J" || got.ModuleRole != "current" || len(got.Logs) != 1 {
		t.Fatalf("v2 record: %+v, %v", got, err)
	}
	rec.Attempts = []backend.AttemptRecord{{Attempt: 1, State: backend.JobRetrying, Calls: []backend.CallRecord{{Method: "GET", Target: "http://a:80"}}}}
	b = encodeRecord(&rec)
	if got, err := decodeRecord(b); err != nil || len(got.Attempts) != 1 || len(got.Attempts[0].Calls) != 1 {
		t.Fatalf("v3 record: %+v, %v", got, err)
	}
	b[0] = recordV2 // a v2 reader stops before the calls: bytes left over
	if _, err := decodeRecord(b); err == nil {
		t.Fatal("a v3 record with calls read as v2 gave no error")
	}
}
