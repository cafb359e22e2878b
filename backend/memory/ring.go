package memory

// ring is a double-ended FIFO of messages on a growable circular buffer.
type ring struct {
	buf  []*message
	head int
	n    int
}

func (r *ring) len() int { return r.n }

func (r *ring) grow() {
	size := 2 * len(r.buf)
	if size == 0 {
		size = 16
	}
	buf := make([]*message, size)
	for i := range r.n {
		buf[i] = r.buf[(r.head+i)%len(r.buf)]
	}
	r.buf, r.head = buf, 0
}

func (r *ring) pushBack(m *message) {
	if r.n == len(r.buf) {
		r.grow()
	}
	r.buf[(r.head+r.n)%len(r.buf)] = m
	r.n++
}

func (r *ring) pushFront(m *message) {
	if r.n == len(r.buf) {
		r.grow()
	}
	r.head = (r.head - 1 + len(r.buf)) % len(r.buf)
	r.buf[r.head] = m
	r.n++
}

func (r *ring) popFront() *message {
	if r.n == 0 {
		return nil
	}
	m := r.buf[r.head]
	r.buf[r.head] = nil
	r.head = (r.head + 1) % len(r.buf)
	r.n--
	return m
}

// at returns the i-th message from the front.
func (r *ring) at(i int) *message { return r.buf[(r.head+i)%len(r.buf)] }
