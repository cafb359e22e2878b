package stream

// Ring is a double-ended FIFO on a growable circular buffer, one priority level of a
// Queue: push at either end and pop from the front in O(1), with no allocation once the
// buffer has grown to the backlog. The zero value is an empty ring.
type Ring[T any] struct {
	buf  []T
	head int
	n    int
}

// Len returns how many values the ring holds.
func (r *Ring[T]) Len() int { return r.n }

func (r *Ring[T]) grow() {
	size := 2 * len(r.buf)
	if size == 0 {
		size = 16
	}
	buf := make([]T, size)
	for i := range r.n {
		buf[i] = r.buf[(r.head+i)%len(r.buf)]
	}
	r.buf, r.head = buf, 0
}

// PushBack adds v at the back.
func (r *Ring[T]) PushBack(v T) {
	if r.n == len(r.buf) {
		r.grow()
	}
	r.buf[(r.head+r.n)%len(r.buf)] = v
	r.n++
}

// PushFront adds v at the front.
func (r *Ring[T]) PushFront(v T) {
	if r.n == len(r.buf) {
		r.grow()
	}
	r.head = (r.head - 1 + len(r.buf)) % len(r.buf)
	r.buf[r.head] = v
	r.n++
}

// PopFront removes and returns the front value, or the zero value when the ring is
// empty.
func (r *Ring[T]) PopFront() T {
	var zero T
	if r.n == 0 {
		return zero
	}
	v := r.buf[r.head]
	r.buf[r.head] = zero // let the value be collected
	r.head = (r.head + 1) % len(r.buf)
	r.n--
	return v
}

// At returns the i-th value from the front; i must be in [0, Len()).
func (r *Ring[T]) At(i int) T { return r.buf[(r.head+i)%len(r.buf)] }

// Remove removes the i-th value from the front, i in [0, Len()), keeping the order of
// the others. It moves the values behind it: O(Len()), for the rare removal by an
// operator, never on the hot path.
func (r *Ring[T]) Remove(i int) {
	var zero T
	for j := i; j < r.n-1; j++ {
		r.buf[(r.head+j)%len(r.buf)] = r.buf[(r.head+j+1)%len(r.buf)]
	}
	r.buf[(r.head+r.n-1)%len(r.buf)] = zero
	r.n--
}
