package backend

import (
	"cmp"
	"slices"
	"time"
	"unicode/utf8"
)

// Defaults of RecordConfig.
const (
	// DefaultRecordMaxCount is how many finished job records are kept at most.
	DefaultRecordMaxCount = 100_000
	// DefaultRecordMaxAge is how long a finished job record is kept at most.
	DefaultRecordMaxAge = 7 * 24 * time.Hour
	// DefaultRecordMaxOutput caps the output kept in a record, in bytes.
	DefaultRecordMaxOutput = 64 << 10
	// DefaultRecordMaxLogLines caps the guest log lines kept in a record.
	DefaultRecordMaxLogLines = 100
	// DefaultRecordMaxLogLine caps one log line, in bytes.
	DefaultRecordMaxLogLine = 1024
	// DefaultRecordPruneInterval is how often finished records are pruned.
	DefaultRecordPruneInterval = time.Minute
)

// RecordConfig configures the job records a backend that keeps them writes: how many
// finished ones (succeeded, dead or cancelled) it keeps and for how long, pruning the
// oldest first, and how much of a run each keeps. Records of jobs still held are never
// pruned.
type RecordConfig struct {
	// MaxCount is how many finished records are kept. Zero means DefaultRecordMaxCount;
	// a negative value keeps none.
	MaxCount int
	// MaxAge is how long a finished record is kept. Zero means DefaultRecordMaxAge; a
	// negative value keeps them regardless of age.
	MaxAge time.Duration
	// MaxOutput caps a record's output in bytes. Zero means DefaultRecordMaxOutput; a
	// negative value keeps no output.
	MaxOutput int
	// MaxLogLines caps a record's log lines, the first ones kept. Zero means
	// DefaultRecordMaxLogLines; a negative value keeps none.
	MaxLogLines int
	// MaxLogLine caps one log line in bytes. Zero means DefaultRecordMaxLogLine.
	MaxLogLine int
	// PruneInterval is how often finished records are pruned. Zero means
	// DefaultRecordPruneInterval.
	PruneInterval time.Duration
}

// pick is v, def for zero, and 0 for a negative v: a RecordConfig field's meaning.
func pick(v, def int) int {
	switch {
	case v == 0:
		return def
	case v < 0:
		return 0
	}
	return v
}

// Retention returns how many finished records c keeps (0 for none) and for how long
// (0 for regardless of age), and how often they are pruned, defaults filled in.
func (c RecordConfig) Retention() (maxCount int, maxAge, interval time.Duration) {
	maxAge = cmp.Or(c.MaxAge, DefaultRecordMaxAge)
	if maxAge < 0 {
		maxAge = 0
	}
	interval = c.PruneInterval
	if interval <= 0 {
		interval = DefaultRecordPruneInterval
	}
	return pick(c.MaxCount, DefaultRecordMaxCount), maxAge, interval
}

// Caps returns what c lets a record keep of a run, defaults filled in.
func (c RecordConfig) Caps() RecordCaps {
	return RecordCaps{
		MaxOutput:   pick(c.MaxOutput, DefaultRecordMaxOutput),
		MaxLogLines: pick(c.MaxLogLines, DefaultRecordMaxLogLines),
		MaxLogLine:  pick(c.MaxLogLine, DefaultRecordMaxLogLine),
	}
}

// RecordCaps bound what a record keeps of a run: output bytes, log lines, and the bytes
// of one line.
type RecordCaps struct {
	MaxOutput, MaxLogLines, MaxLogLine int
}

// Apply cuts rec's output and log lines to the caps, marking what it cut. The caller's
// slices are never written: the log lines are cloned once, if one of them is cut. A
// line is cut at a rune boundary, so that it stays valid UTF-8.
func (c RecordCaps) Apply(rec *JobRecord) {
	if len(rec.Output) > c.MaxOutput {
		rec.Output, rec.OutputTruncated = rec.Output[:c.MaxOutput], true
	}
	if len(rec.Logs) > c.MaxLogLines {
		rec.Logs, rec.LogsTruncated = rec.Logs[:c.MaxLogLines], true
	}
	cloned := false
	for i, l := range rec.Logs {
		if len(l) <= c.MaxLogLine {
			continue
		}
		if !cloned {
			rec.Logs, cloned = slices.Clone(rec.Logs), true
		}
		rec.Logs[i], rec.LogsTruncated = cutUTF8(l, c.MaxLogLine), true
	}
}

// cutUTF8 returns the longest prefix of s of at most n bytes that does not end inside a
// multi-byte rune.
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
