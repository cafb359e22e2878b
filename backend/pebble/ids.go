package pebble

import (
	"context"
	"sync"
)

// idSet knows the ids of the jobs the backend holds (waiting, delayed, handed out), to
// drop a repeat publish. An id maps to nil once committed, to an open channel while its
// publish is in flight.
type idSet struct {
	mu     sync.Mutex
	m      map[string]chan struct{}
	claims map[string]int // ids of jobs handed out and not settled
}

func (s *idSet) claim(id string) {
	s.mu.Lock()
	s.claims[id]++
	s.mu.Unlock()
}

func (s *idSet) unclaim(id string) {
	s.mu.Lock()
	if s.claims[id]--; s.claims[id] <= 0 {
		delete(s.claims, id)
	}
	s.mu.Unlock()
}

func (s *idSet) claimed(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.claims[id] > 0
}

// holds reports whether the backend holds id, or a publish of it is in flight.
func (s *idSet) holds(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.m[id]
	return ok
}

// settled waits, with ctx, while a publish (or another reservation) of id is in
// flight, and then reports whether the backend holds id.
func (s *idSet) settled(ctx context.Context, id string) (bool, error) {
	for {
		s.mu.Lock()
		ch, ok := s.m[id]
		s.mu.Unlock()
		if !ok || ch == nil {
			return ok, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
}

// reserve makes the caller the publisher of id, or reports false when the backend holds
// it already. It waits while another publish of id is in flight. The empty id is never
// held.
func (s *idSet) reserve(ctx context.Context, id string) (bool, error) {
	if id == "" {
		return true, nil
	}
	for {
		s.mu.Lock()
		ch, ok := s.m[id]
		if !ok {
			s.m[id] = make(chan struct{})
			s.mu.Unlock()
			return true, nil
		}
		s.mu.Unlock()
		if ch == nil {
			return false, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
}

// tryReserve is reserve without the wait. When it does not reserve id, held says why:
// true when the backend holds id (a live job's), false when another reservation of id
// is under way (a publish, replay or delete in flight, which may still write nothing).
// The caller that got ok ends the reservation with settle. The empty id is never
// reserved, and reads as held: no job is stored under it.
func (s *idSet) tryReserve(id string) (ok, held bool) {
	if id == "" {
		return false, true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if ch, found := s.m[id]; found {
		return false, ch == nil
	}
	s.m[id] = make(chan struct{})
	return true, false
}

// settle ends a reservation: id is held when committed, else free again.
func (s *idSet) settle(id string, committed bool) {
	if id == "" {
		return
	}
	s.mu.Lock()
	ch := s.m[id]
	if committed {
		s.m[id] = nil
	} else {
		delete(s.m, id)
	}
	s.mu.Unlock()
	if ch != nil {
		close(ch)
	}
}

// add marks id held (a job found at Open).
func (s *idSet) add(id string) {
	if id == "" {
		return
	}
	s.mu.Lock()
	s.m[id] = nil
	s.mu.Unlock()
}

// remove forgets id: its job left the backend.
func (s *idSet) remove(id string) {
	if id == "" {
		return
	}
	s.mu.Lock()
	if ch, ok := s.m[id]; ok && ch == nil {
		delete(s.m, id)
	}
	s.mu.Unlock()
}
