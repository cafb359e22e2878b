package backend_test

import (
	"slices"
	"testing"
	"unicode/utf8"

	"github.com/wasmjobs/wasmjobs/backend"
)

// RecordCaps.Apply once wrote the cut lines into the caller's Logs slice, and cut inside a rune.
func TestRecordCapsKeepTheCallersLogsAndRunes(t *testing.T) {
	t.Parallel()
	logs := []string{"ok", "hé€x", "abcdef", "€€"}
	want := slices.Clone(logs)
	rec := backend.JobRecord{Logs: logs, Output: []byte("output")}
	backend.RecordConfig{MaxLogLine: 4, MaxOutput: 2}.Caps().Apply(&rec)
	if !slices.Equal(logs, want) {
		t.Errorf("the caller's Logs were changed: %q, was %q", logs, want)
	}
	if got := []string{"ok", "hé", "abcd", "€"}; !slices.Equal(rec.Logs, got) || !rec.LogsTruncated {
		t.Errorf("capped logs %q (truncated %v), want %q", rec.Logs, rec.LogsTruncated, got)
	}
	for _, l := range rec.Logs {
		if !utf8.ValidString(l) {
			t.Errorf("capped line %q is not valid UTF-8", l)
		}
	}
	if string(rec.Output) != "ou" || !rec.OutputTruncated {
		t.Errorf("capped output %q", rec.Output)
	}
}
