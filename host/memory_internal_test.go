package host

import (
	"bytes"
	"testing"
)

// TestReusedMemoryIsZeroWhereTheGuestCanSeeIt: memory reused from an ended VM (every
// byte 0xAB) is zero wherever the guest is given it (the first allocation, in which a
// start function could run before restore, and every grow after), except the bytes
// restore overwrites itself while overwrite is set.
func TestReusedMemoryIsZeroWhereTheGuestCanSeeIt(t *testing.T) {
	t.Parallel()
	const page = 65536
	old := bytes.Repeat([]byte{0xab}, 8*page)
	l := &limitedMemory{limit: 8 * page, hint: 4 * page, reuse: old}
	zero := func(b []byte) bool { return bytes.Count(b, []byte{0}) == len(b) }
	if b := l.Reallocate(2 * page); len(b) != 2*page || !zero(b) {
		t.Fatalf("the first allocation of reused memory: %d bytes, all zero %v", len(b), zero(b))
	}
	if &l.buf[0] != &old[0] {
		t.Fatal("the first allocation did not reuse the memory")
	}
	l.setOverwrite(4 * page) // restore's grow: it writes these bytes itself
	if b := l.Reallocate(4 * page); len(b) != 4*page || zero(b[2*page:]) {
		t.Fatalf("restore's grow: %d bytes; want its bytes left for restore to overwrite", len(b))
	}
	l.setOverwrite(0)
	if b := l.Reallocate(6 * page); len(b) != 6*page || !zero(b[4*page:]) {
		t.Fatalf("a grow after restore: %d bytes, its new ones all zero %v", len(b), zero(b[4*page:]))
	}
	if got := l.take(16 * page); len(got) != 8*page || l.buf != nil {
		t.Fatalf("take: %d bytes, buf %v; want the whole capacity, and the memory forgets it", len(got), l.buf != nil)
	}
	l2 := &limitedMemory{limit: 32 * page, buf: make([]byte, page, 16*page)}
	if got := l2.take(8 * page); got != nil {
		t.Fatal("take kept memory whose capacity passes the bound")
	}
}
