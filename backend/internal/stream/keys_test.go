package stream

import (
	"slices"
	"testing"
)

// popAll takes every ready item off q and returns their names in order.
func popAll(q *Queue[*job]) []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []string
	for v, ok := q.pop(); ok; v, ok = q.pop() {
		out = append(out, v.name)
	}
	return out
}

// The gate parks a key's jobs behind its first limit places, whatever their priority,
// and makes the next one ready when a place ahead is left; a job that left the FIFOs
// (taken, or removed) keeps its place until LeaveKey; a new limit applies to what is
// queued already.
func TestKeyGate(t *testing.T) {
	q := NewQueue[*job](1)
	q.SetKeyLimit(1)
	q.Push(&job{name: "a1", key: "a"})
	q.Push(&job{name: "b1", key: "b"})
	q.Push(&job{name: "a2", key: "a", level: 1}) // a higher priority does not jump its key's line
	q.Push(&job{name: "a3", key: "a"})
	q.Push(&job{name: "u"})
	if got := popAll(q); !slices.Equal(got, []string{"a1", "b1", "u"}) {
		t.Fatalf("ready %v, want a1, b1 and u", got)
	}
	q.mu.Lock()
	if n := q.KeyWaiting(); n != 2 {
		t.Fatalf("%d waiting for their key, want 2", n)
	}
	if _, ok := q.Remove(func(j *job) bool { return j.name == "a3" }); !ok {
		t.Fatal("a parked job was not found to remove")
	}
	q.LeaveKey("b1")
	q.LeaveKey("a1")
	q.mu.Unlock()
	if got := popAll(q); !slices.Equal(got, []string{"a2"}) {
		t.Fatalf("ready after a1 left %v, want a2", got)
	}
	q.Push(&job{name: "a4", key: "a"}) // behind a2 (taken) and a3 (removed, its place kept)
	q.mu.Lock()
	q.LeaveKey("a2")
	q.mu.Unlock()
	if got := popAll(q); len(got) != 0 {
		t.Fatalf("ready %v while a3 holds its place, want none", got)
	}
	q.SetKeyLimit(2)
	if got := popAll(q); !slices.Equal(got, []string{"a4"}) {
		t.Fatalf("ready after the limit rose to 2: %v, want a4", got)
	}
	q.Push(&job{name: "a5", key: "a"}) // third in its line, behind a3 and a4
	q.Push(&job{name: "c1", key: "c"})
	q.SetKeyLimit(1)
	if got := popAll(q); !slices.Equal(got, []string{"c1"}) {
		t.Fatalf("ready after the limit fell to 1: %v, want c1", got)
	}
	q.SetKeyLimit(0)
	if got := popAll(q); !slices.Equal(got, []string{"a5"}) {
		t.Fatalf("ready with no limit: %v, want a5", got)
	}
}
