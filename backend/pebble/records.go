package pebble

import (
	"time"

	pebbledb "github.com/cockroachdb/pebble/v2"

	"github.com/wasmjobs/wasmjobs/backend"
)

// RecordConfig configures job records. (Milestone 2 fills this in.)
type RecordConfig struct{}

type recordConfig struct{}

func (c RecordConfig) normalize() recordConfig { return recordConfig{} }

type recordState int

const (
	recordSucceeded recordState = iota + 1
	recordDead
)

type recordIndex struct{}

func (r *recordIndex) load(k, v []byte) error { return nil }

func (b *Backend) stageRecord(batch *pebbledb.Batch, env backend.Envelope, delay time.Duration) {}

func (b *Backend) stageFinished(batch *pebbledb.Batch, d *delivery, state recordState, reason string) {
}
