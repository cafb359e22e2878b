// Package inflight counts work under way and lets a caller wait, with a context, for
// the count to reach zero: what sync.WaitGroup does, but a wait that gives up when its
// context ends leaves no goroutine behind, and the count can be read.
package inflight

import (
	"context"
	"sync"
)

// Counter counts work under way. Its zero value is ready; its methods are safe for
// concurrent use.
type Counter struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n reaches zero; nil when nobody waits
}

// Add counts one more piece of work.
func (c *Counter) Add() {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
}

// Done counts one piece of work as finished, releasing the waiters when none is left.
func (c *Counter) Done() {
	c.mu.Lock()
	c.n--
	if c.n == 0 && c.idle != nil {
		close(c.idle)
		c.idle = nil
	}
	c.mu.Unlock()
}

// Count is the work under way now.
func (c *Counter) Count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// Wait returns when the count is zero, or ctx's error when ctx ends first.
func (c *Counter) Wait(ctx context.Context) error {
	c.mu.Lock()
	if c.n == 0 {
		c.mu.Unlock()
		return nil
	}
	if c.idle == nil {
		c.idle = make(chan struct{})
	}
	idle := c.idle
	c.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
