package pebble

// ring is a double-ended FIFO of ready jobs on a growable circular buffer.
type ring struct {
	buf  []*item
	head int
	n    int
}

func (r *ring) len() int { return r.n }

func (r *ring) grow() {
	size := 2 * len(r.buf)
	if size == 0 {
		size = 16
	}
	buf := make([]*item, size)
	for i := range r.n {
		buf[i] = r.buf[(r.head+i)%len(r.buf)]
	}
	r.buf, r.head = buf, 0
}

func (r *ring) pushBack(it *item) {
	if r.n == len(r.buf) {
		r.grow()
	}
	r.buf[(r.head+r.n)%len(r.buf)] = it
	r.n++
}

func (r *ring) pushFront(it *item) {
	if r.n == len(r.buf) {
		r.grow()
	}
	r.head = (r.head - 1 + len(r.buf)) % len(r.buf)
	r.buf[r.head] = it
	r.n++
}

func (r *ring) popFront() *item {
	if r.n == 0 {
		return nil
	}
	it := r.buf[r.head]
	r.buf[r.head] = nil
	r.head = (r.head + 1) % len(r.buf)
	r.n--
	return it
}
