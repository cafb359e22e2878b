package stream

import (
	"slices"
	"testing"
)

func TestRingKeepsOrderAcrossGrowthAndWrap(t *testing.T) {
	t.Parallel()
	var r Ring[int]
	var want []int // the model: a plain slice
	next := 0
	for round := range 200 {
		switch round % 6 {
		case 5:
			if len(want) > 0 {
				i := round % len(want)
				r.Remove(i)
				want = slices.Delete(want, i, i+1)
			}
		case 0, 1, 2:
			r.PushBack(next)
			want = append(want, next)
		case 3:
			r.PushFront(next)
			want = slices.Insert(want, 0, next)
		case 4:
			got := r.PopFront()
			if got != want[0] {
				t.Fatalf("round %d: PopFront = %d, want %d", round, got, want[0])
			}
			want = want[1:]
		}
		next++
		if r.Len() != len(want) {
			t.Fatalf("round %d: Len = %d, want %d", round, r.Len(), len(want))
		}
		for i, w := range want {
			if got := r.At(i); got != w {
				t.Fatalf("round %d: At(%d) = %d, want %d", round, i, got, w)
			}
		}
	}
	for len(want) > 0 {
		if got := r.PopFront(); got != want[0] {
			t.Fatalf("draining: PopFront = %d, want %d", got, want[0])
		}
		want = want[1:]
	}
	if got := r.PopFront(); got != 0 || r.Len() != 0 {
		t.Fatalf("empty ring: PopFront = %d, Len = %d, want 0, 0", got, r.Len())
	}
}
