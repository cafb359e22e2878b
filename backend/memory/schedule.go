package memory

import (
	"context"
	"maps"
	"sync"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
)

var _ backend.ScheduleStore = (*Backend)(nil)

// scheduleTicks is the last fired tick of each schedule, for as long as the backend
// lives (as long as the jobs it holds).
type scheduleTicks struct {
	mu    sync.Mutex // held across a tick's publish, so that publish and record go together
	ticks map[string]time.Time
}

// ScheduleTicks returns the last fired tick of each schedule fired through this
// backend.
func (b *Backend) ScheduleTicks(ctx context.Context) (map[string]time.Time, error) {
	if b.queues.IsClosed() {
		return nil, backend.ErrShutDown
	}
	b.ticks.mu.Lock()
	defer b.ticks.mu.Unlock()
	return maps.Clone(b.ticks.ticks), nil
}

// PublishTick publishes env and records tick as schedule's last fired tick; a failed
// publish records nothing.
func (b *Backend) PublishTick(ctx context.Context, schedule string, tick time.Time, env backend.Envelope) error {
	b.ticks.mu.Lock()
	defer b.ticks.mu.Unlock()
	if err := b.Publish(ctx, env, 0); err != nil {
		return err
	}
	if b.ticks.ticks == nil {
		b.ticks.ticks = map[string]time.Time{}
	}
	b.ticks.ticks[schedule] = tick
	return nil
}
