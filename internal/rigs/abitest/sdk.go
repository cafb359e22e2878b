package abitest

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/wasmjobs/wasmjobs/backend"
)

// Languages are the guest languages with an SDK and a conformance handler.
var Languages = []string{"go", "rust", "c", "assemblyscript", "typescript"}

// GuestsDir is where `make guests` puts the built guest modules.
func GuestsDir() string { return filepath.Join(Dir(), "..", "build", "guests") }

// Guest returns the path of a built guest module, and whether it exists.
func Guest(name string) (string, bool) {
	p := filepath.Join(GuestsDir(), name+".wasm")
	_, err := os.Stat(p)
	return p, err == nil
}

// SDKJobID is the job id every SDK conformance case runs with, so that outputs that
// hold it are the same in every language.
const SDKJobID = "01JCONFORMANCE000000000000"

// SDKCase is a case of the cross-language conformance table: every SDK's conformance
// handler (guest-sdk/*/conformance) reads its payload and must produce exactly this.
type SDKCase struct {
	Payload string
	Headers map[string]string
	Attempt int
	// Traced runs the job under a recording span of the host: {trace_id} and {span_id}
	// in Output stand for its ids (OutputWith).
	Traced bool
	// Round and Awaited make the job a resumed run (a fan-in): its round and how the
	// children of its last wait ended.
	Round    int
	Awaited  []backend.AwaitResult
	Kind     string
	Code     *int32
	Reason   string
	DelayMs  *int64
	Output   string
	Logs     []Log
	Children []Child
}

// OutputWith is the output the case wants of a run under the span traceID and spanID
// name (both empty for a run without one).
func (c SDKCase) OutputWith(traceID, spanID string) string {
	return strings.NewReplacer("{trace_id}", traceID, "{span_id}", spanID).Replace(c.Output)
}

// SDKCases returns the cross-language table. The module is loaded as "conformance" and
// consumes the queue "conformance".
func SDKCases() []SDKCase {
	return []SDKCase{
		{Payload: "ack", Kind: "ack", Code: code(0)},
		{Payload: "retry", Kind: "retry", Code: code(1), Reason: "asked to retry", DelayMs: ms(1500)},
		{Payload: "defer", Kind: "defer", Code: code(2), Reason: "asked to defer", DelayMs: ms(2000)},
		{Payload: "dead", Kind: "dead_letter", Code: code(3), Reason: "asked to die"},
		{Payload: "echo:héllo, wörld", Kind: "ack", Code: code(0), Output: "héllo, wörld"},
		{Payload: "meta", Headers: map[string]string{"X-Test": "yes"}, Attempt: 2, Kind: "ack", Code: code(0),
			Output: SDKJobID + "\nconformance\nconformance\n2\n5\nyes\n"},
		{Payload: "meta", Kind: "ack", Code: code(0), Output: SDKJobID + "\nconformance\nconformance\n1\n5\n-\n"},
		// The trace context: the ids of the host's span the job runs in, as lowercase hex;
		// both empty without one.
		{Payload: "trace", Traced: true, Kind: "ack", Code: code(0), Output: "{trace_id}\n{span_id}\n"},
		{Payload: "trace", Kind: "ack", Code: code(0), Output: "\n\n"},
		{Payload: "children", Kind: "ack", Code: code(0), Children: []Child{{"child", "c1", 0, false}, {"child", "c2", 250, false}}},
		// Fan-out: the awaited children and a plain one, staged in order, then WAIT.
		{Payload: "fanout", Kind: "wait", Code: code(4), Output: "0 0\n",
			Children: []Child{{"child", "c1", 0, true}, {"child", "c2", 250, false}, {"child", "c3", 0, true}}},
		// Fan-in: the resumed run reads each child, in order, as "id|queue|state|reason|output|truncated".
		{Payload: "fanin", Round: 1, Awaited: []backend.AwaitResult{
			{ID: "01JCHILD000000000000000000", Queue: "child", State: backend.JobSucceeded, Output: []byte("out 1")},
			{ID: "01JCHILD000000000000000001", Queue: "child", State: backend.JobDead, Reason: "no page"},
			{ID: "01JCHILD000000000000000002", Queue: "child", State: backend.JobUnfinished, Output: []byte("partial"), OutputTruncated: true},
		}, Kind: "ack", Code: code(0), Output: "1 3\n" +
			"01JCHILD000000000000000000|child|succeeded||out 1|false\n" +
			"01JCHILD000000000000000001|child|dead|no page||false\n" +
			"01JCHILD000000000000000002|child|unfinished||partial|true\n"},
		{Payload: "log", Attempt: 3, Kind: "ack", Code: code(0),
			Logs: []Log{{"info", "conformance log line"}, {"warn", "second line, attempt 3"}}},
		{Payload: "trap", Kind: "trap", Reason: "trap: unreachable"},
		{Payload: "no such case", Kind: "dead_letter", Code: code(3), Reason: "unknown case"},
	}
}
