package stream

import (
	"errors"
	"slices"
	"testing"

	"github.com/wasmjobs/wasmjobs/backend"
)

func TestADirectoryFindsNothingOnceClosed(t *testing.T) {
	var d Directory[string]
	if _, err := d.Lookup("q"); !errors.Is(err, backend.ErrUnknownQueue) {
		t.Fatalf("Lookup of an undeclared queue = %v, want ErrUnknownQueue", err)
	}
	d.Lock()
	d.PutLocked("a", "queue a")
	d.PutLocked("b", "queue b")
	d.Unlock()
	if q, err := d.Lookup("a"); err != nil || q != "queue a" {
		t.Fatalf("Lookup(a) = %q, %v", q, err)
	}
	all, err := d.Snapshot()
	slices.Sort(all)
	if err != nil || !slices.Equal(all, []string{"queue a", "queue b"}) {
		t.Fatalf("Snapshot = %v, %v", all, err)
	}
	d.Lock()
	first, again := d.CloseLocked(), d.CloseLocked()
	d.Unlock()
	if !first || again || !d.IsClosed() {
		t.Fatalf("CloseLocked = %v then %v, IsClosed %v; want true, false, true", first, again, d.IsClosed())
	}
	if _, err := d.Lookup("a"); !errors.Is(err, backend.ErrShutDown) {
		t.Fatalf("Lookup after close = %v, want ErrShutDown", err)
	}
	if _, err := d.Snapshot(); !errors.Is(err, backend.ErrShutDown) {
		t.Fatalf("Snapshot after close = %v, want ErrShutDown", err)
	}
}
