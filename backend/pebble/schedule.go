package pebble

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	pebbledb "github.com/cockroachdb/pebble/v2"

	"github.com/wasmjobs/wasmjobs/backend"
)

var _ backend.ScheduleStore = (*Backend)(nil)

// tickPrefix starts the keys of the schedules' last fired ticks. They are meta keys,
// which Open skips, so that a store with ticks opens with the same schema version in a
// build that has no schedules.
var tickPrefix = []byte{kindMeta, 't', 'i', 'c', 'k', 0}

func tickKey(schedule string) []byte {
	return append(append([]byte(nil), tickPrefix...), schedule...)
}

func tickValue(tick time.Time) []byte {
	return binary.BigEndian.AppendUint64(nil, uint64(tick.UnixNano()))
}

// ScheduleTicks returns the last fired tick of each schedule, as written by
// PublishTick.
func (b *Backend) ScheduleTicks(ctx context.Context) (map[string]time.Time, error) {
	if err := b.enter(); err != nil {
		return nil, err
	}
	defer b.ops.Done()
	it, err := b.db.NewIter(&pebbledb.IterOptions{LowerBound: tickPrefix, UpperBound: prefixEnd(tickPrefix)})
	if err != nil {
		return nil, &backend.TransportError{Op: "schedule ticks", Err: err}
	}
	defer it.Close()
	out := map[string]time.Time{}
	for valid := it.First(); valid; valid = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			return nil, &backend.TransportError{Op: "schedule ticks", Err: err}
		}
		name := string(it.Key()[len(tickPrefix):])
		if len(v) != 8 {
			return nil, fmt.Errorf("pebble backend: %w: last tick of schedule %q: want 8 bytes, got %d", ErrCorrupt, name, len(v))
		}
		out[name] = time.Unix(0, int64(binary.BigEndian.Uint64(v))).UTC()
	}
	if err := it.Error(); err != nil {
		return nil, &backend.TransportError{Op: "schedule ticks", Err: err}
	}
	return out, nil
}

// PublishTick publishes env and records tick as the last fired tick of schedule in one
// synced batch: after a crash both are on disk or neither is. When the backend still
// holds env.ID (the tick fired before and its job is not settled), only the tick is
// written.
func (b *Backend) PublishTick(ctx context.Context, schedule string, tick time.Time, env backend.Envelope) error {
	return b.publishWith(ctx, "publish tick", env, 0, false, func(batch *pebbledb.Batch) {
		batch.Set(tickKey(schedule), tickValue(tick), nil)
	}, "schedule tick")
}
