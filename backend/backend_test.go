package backend_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
)

func TestNewIDSortsByCreationTime(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var ids []string
		seen := make(map[string]bool)
		for range 200 {
			id := backend.NewID()
			if len(id) != 26 || strings.Trim(id, "0123456789ABCDEFGHJKMNPQRSTVWXYZ") != "" {
				t.Fatalf("id %q is not 26 Crockford base32 digits", id)
			}
			if seen[id] {
				t.Fatalf("duplicate id %q", id)
			}
			seen[id] = true
			ids = append(ids, id)
			time.Sleep(time.Millisecond)
		}
		if !slices.IsSorted(ids) {
			t.Fatalf("ids made a millisecond apart do not sort by time: %v", ids[:5])
		}
	})
}

// TestScheduleID: a schedule's job id carries its tick as its timestamp and is the same
// for the same schedule and tick only.
func TestScheduleID(t *testing.T) {
	t.Parallel()
	tick := time.Date(2026, 11, 30, 14, 5, 0, 0, time.UTC)
	id := backend.ScheduleID("reports/nightly", tick)
	if len(id) != 26 || id[:10] != backend.ScheduleID("", tick)[:10] || id[:10] == backend.ScheduleID("", tick.Add(time.Millisecond))[:10] {
		t.Errorf("ScheduleID = %q: not an id whose timestamp is the tick's", id)
	}
	if backend.ScheduleID("reports/nightly", tick) != id {
		t.Error("ScheduleID is not the same for the same schedule and tick")
	}
	for _, other := range []string{backend.ScheduleID("reports/nightly", tick.Add(time.Second)), backend.ScheduleID("reports/nightly2", tick),
		backend.ScheduleID("reports/nightl", tick.Add(time.Nanosecond))} {
		if other == id {
			t.Errorf("ScheduleID repeats %q for another schedule or tick", id)
		}
	}
}

// TestChildIDIsStableAndValid: a child's id depends on its parent's id, its index, its
// queue and its payload only, so a retried parent repeats it, and a different child at
// the same index gets another; it is a valid id that keeps the parent's time.
func TestChildIDIsStableAndValid(t *testing.T) {
	t.Parallel()
	valid := func(id string) bool {
		return len(id) == 26 && id[0] <= '7' && strings.Trim(id, "0123456789ABCDEFGHJKMNPQRSTVWXYZ") == ""
	}
	parent, other := backend.NewID(), backend.NewID()
	payload := []byte("send the welcome mail")
	seen := map[string]bool{parent: true, other: true}
	for i := range 100 {
		id := backend.ChildID(parent, 0, i, "mail", payload)
		if id != backend.ChildID(parent, 0, i, "mail", bytes.Clone(payload)) {
			t.Fatalf("child %d of %s: two ids for the same child", i, parent)
		}
		if !valid(id) || id[:10] != parent[:10] {
			t.Fatalf("child %d of %s is %s: want a valid id with the parent's timestamp", i, parent, id)
		}
		// Another parent, queue or payload at the same index is another job.
		for _, o := range []string{
			backend.ChildID(other, 0, i, "mail", payload),
			backend.ChildID(parent, 0, i, "sms", payload),
			backend.ChildID(parent, 0, i, "mail", []byte("send the goodbye mail")),
			backend.ChildID(parent, 0, i, "mail", nil),
			backend.ChildID(parent, 0, i, "mai", append([]byte("l"), payload...)), // no field runs into the next
		} {
			if seen[id] || seen[o] || o == id {
				t.Fatalf("child %d: id %s or %s repeats another", i, id, o)
			}
			seen[o] = true
		}
		seen[id] = true
	}
	// A parent id from a foreign publisher is not in our layout: the children still get
	// valid, stable ids, at timestamp zero.
	for _, foreign := range []string{"order-17", "", "01ARZ3NDEKTSV4RRFFQ69G5FAVX", "81ARZ3NDEKTSV4RRFFQ69G5FAV", "01ARZ3NDEKTSV4RRFFQ69G5FAU"} {
		id := backend.ChildID(foreign, 0, 0, "q", nil)
		if !valid(id) || id[:10] != "0000000000" || id != backend.ChildID(foreign, 0, 0, "q", nil) || id == backend.ChildID(foreign, 0, 1, "q", nil) {
			t.Fatalf("child of %q is %s", foreign, id)
		}
	}
}

// roundZeroIDs are children's ids as hosts made them before ChildID took a round.
var roundZeroIDs = [...]string{"0000000000V0VWQ927NZ3KC6MB", "0000000000RPN2EKA4RK7AQ03N", "01ARZ3NDEK07J7V0VY3VXVX8BJ"}

// TestChildIDRounds: round 0 gives the ids of before rounds existed (stored children
// keep theirs), and each later round gives every child another id, stable in itself.
func TestChildIDRounds(t *testing.T) {
	t.Parallel()
	// Ids computed before ChildID took a round: stored data holds them.
	for _, tc := range []struct {
		parent, queue, payload string
		index                  int
		want                   string
	}{
		{"01JCONFORMANCE000000000000", "child", "c1", 0, roundZeroIDs[0]},
		{"01JCONFORMANCE000000000000", "child", "c2", 1, roundZeroIDs[1]},
		{"01ARZ3NDEKTSV4RRFFQ69G5FAV", "q", "", 0, roundZeroIDs[2]},
	} {
		if got := backend.ChildID(tc.parent, 0, tc.index, tc.queue, []byte(tc.payload)); got != tc.want {
			t.Errorf("ChildID(%q, 0, %d, %q, %q) = %s, want today's %s", tc.parent, tc.index, tc.queue, tc.payload, got, tc.want)
		}
	}
	parent := backend.NewID()
	seen := map[string]int{}
	for round := range 4 {
		for i := range 20 {
			id := backend.ChildID(parent, round, i, "render", []byte("page"))
			if id != backend.ChildID(parent, round, i, "render", []byte("page")) {
				t.Fatalf("round %d child %d: two ids for the same child", round, i)
			}
			if r, ok := seen[id]; ok {
				t.Fatalf("round %d child %d has the id %s of a child of round %d", round, i, id, r)
			}
			seen[id] = round
		}
	}
}

func TestRoundUpNeverShortens(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ d, unit, want time.Duration }{
		{0, time.Millisecond, 0},
		{-time.Second, time.Millisecond, 0},
		{time.Nanosecond, time.Millisecond, time.Millisecond},
		{time.Millisecond, time.Millisecond, time.Millisecond},
		{1500 * time.Microsecond, time.Millisecond, 2 * time.Millisecond},
		{1001 * time.Millisecond, 100 * time.Millisecond, 1100 * time.Millisecond},
		{math.MaxInt64 - 5, time.Millisecond, math.MaxInt64}, // saturates: never wraps negative
		{math.MaxInt64, time.Millisecond, math.MaxInt64},
	} {
		if got := backend.RoundUp(tc.d, tc.unit); got != tc.want {
			t.Errorf("RoundUp(%v, %v) = %v, want %v", tc.d, tc.unit, got, tc.want)
		}
	}
}

func TestNormalizeDefaultsAndClamps(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in, want backend.QueueConfig
	}{
		{backend.QueueConfig{Name: "q"}, backend.QueueConfig{Name: "q", Prefetch: backend.DefaultPrefetch}},
		{backend.QueueConfig{Name: "q", Prefetch: -1, PriorityLevels: -5}, backend.QueueConfig{Name: "q", Prefetch: 1}},
		{backend.QueueConfig{Name: "q", Prefetch: 1e6, PriorityLevels: 99}, backend.QueueConfig{Name: "q", Prefetch: backend.MaxPrefetch, PriorityLevels: backend.MaxPriorityLevels}},
		{backend.QueueConfig{Name: "q", Prefetch: 64, PriorityLevels: 2}, backend.QueueConfig{Name: "q", Prefetch: 64, PriorityLevels: 2}},
	} {
		if got := tc.in.Normalize(nil); got != tc.want {
			t.Errorf("Normalize(%+v) = %+v, want %+v", tc.in, got, tc.want)
		}
	}
	if got := backend.ClampGranularity(time.Microsecond, nil); got != time.Millisecond {
		t.Errorf("ClampGranularity(1us) = %v", got)
	}
	if got := backend.ClampGranularity(time.Second, nil); got != time.Second {
		t.Errorf("ClampGranularity(1s) = %v", got)
	}
}

func TestErrorsKeepTheirSource(t *testing.T) {
	t.Parallel()
	err := error(&backend.TransportError{Op: "publish", Queue: "jobs", Err: io.ErrUnexpectedEOF})
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Error("TransportError lost its source for errors.Is")
	}
	var te *backend.TransportError
	if !errors.As(err, &te) || te.Queue != "jobs" {
		t.Error("errors.As does not find the TransportError")
	}
	if got := err.Error(); got != `backend publish "jobs": unexpected EOF` {
		t.Errorf("message %q", got)
	}
	if got := (&backend.TransportError{Op: "dial", Err: io.EOF}).Error(); got != "backend dial: EOF" {
		t.Errorf("message %q", got)
	}
	uq := backend.UnknownQueue("emails")
	if !errors.Is(uq, backend.ErrUnknownQueue) || !strings.Contains(uq.Error(), `"emails"`) {
		t.Errorf("UnknownQueue = %v", uq)
	}
}

func TestCloneSharesNothing(t *testing.T) {
	t.Parallel()
	e := backend.NewEnvelope("q", []byte("abc"))
	e.Headers = map[string]string{"k": "v"}
	c := e.Clone()
	c.Payload[0], c.Headers["k"] = 'X', "changed"
	if string(e.Payload) != "abc" || e.Headers["k"] != "v" {
		t.Fatalf("Clone shares memory: %+v", e)
	}
	if e.Attempt != 1 || e.EnqueuedAt.IsZero() || e.ID == "" {
		t.Fatalf("NewEnvelope = %+v", e)
	}
}

// CapAwaitTotal keeps outputs in order up to MaxAwaitTotal together and drops the
// rest, marking them truncated; an empty output is never marked.
func TestCapAwaitTotal(t *testing.T) {
	t.Parallel()
	out := func(n int) []byte { return make([]byte, n) }
	half := backend.MaxAwaitTotal / 2
	res := []backend.AwaitResult{{Output: out(half)}, {Output: out(half)}, {Output: out(1)}, {}, {Output: out(1), OutputTruncated: true}}
	backend.CapAwaitTotal(res)
	for i, want := range []struct {
		n         int
		truncated bool
	}{{half, false}, {half, false}, {0, true}, {0, false}, {0, true}} {
		if len(res[i].Output) != want.n || res[i].OutputTruncated != want.truncated {
			t.Errorf("result %d: %d bytes, truncated %v; want %d, %v", i, len(res[i].Output), res[i].OutputTruncated, want.n, want.truncated)
		}
	}
}

// A replay counts one replay more, drops the outage's start, sets the headers its
// context carries and removes those it carries as "", leaving the dead letter's own
// headers unchanged.
func TestReplayedHeaders(t *testing.T) {
	t.Parallel()
	dead := map[string]string{"x": "1", backend.ReplayHeader: "2", backend.OutageHeader: "123", "wasmjobs-a": "old", "wasmjobs-b": "old"}
	for name, c := range map[string]struct {
		extra map[string]string
		want  map[string]string
	}{
		"no extra": {nil, map[string]string{"x": "1", backend.ReplayHeader: "3", "wasmjobs-a": "old", "wasmjobs-b": "old"}},
		"set and remove": {map[string]string{"wasmjobs-a": "new", "wasmjobs-b": "", "wasmjobs-c": ""},
			map[string]string{"x": "1", backend.ReplayHeader: "3", "wasmjobs-a": "new"}},
	} {
		got := backend.ReplayedHeaders(backend.WithReplayHeaders(context.Background(), c.extra), dead)
		if !maps.Equal(got, c.want) {
			t.Errorf("%s: ReplayedHeaders = %v, want %v", name, got, c.want)
		}
	}
	if dead["wasmjobs-a"] != "old" || len(dead) != 5 {
		t.Errorf("the dead letter's headers changed: %v", dead)
	}
}
