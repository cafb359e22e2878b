package host

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"time"

	"github.com/wasmjobs/wasmjobs/internal/tomlvalue"
)

// Rollout strategies.
const (
	// StrategyCanary runs a new version of a serving module on a share of its queue's
	// jobs first, and promotes or rolls it back by how it did (the default).
	StrategyCanary = "canary"
	// StrategyImmediate swaps a new version in for every job at once.
	StrategyImmediate = "immediate"
)

// Defaults of Rollout.
const (
	DefaultCanaryPercent         = 10
	DefaultCanaryJobs            = 100
	DefaultCanaryTime            = 60 * time.Second
	DefaultCanaryMaxFailureDelta = 0.05
	DefaultCanaryMinJobs         = 20
	DefaultHistory               = 5
)

// Rollout is how a new version of a module is put in service: the manifest's
// [rollout] table. The zero value of a field means its default.
type Rollout struct {
	// Strategy is StrategyCanary (default) or StrategyImmediate.
	Strategy string
	// CanaryPercent is the share of the queue's jobs, in percent, that a canary takes,
	// chosen by a hash of the job's id. Default 10.
	CanaryPercent int
	// CanaryJobs is how many jobs a canary runs before it is promoted (if it does not do
	// worse than the current version). Default 100.
	CanaryJobs int
	// CanaryTime is how long a canary runs before it is promoted (if it does not do
	// worse). Default 60 s.
	CanaryTime time.Duration
	// CanaryMaxFailureDelta is how much higher than the current version's share of jobs
	// that did not ack the canary's share may be before it is rolled back. Default 0.05.
	CanaryMaxFailureDelta float64
	// CanaryMinJobs is how many jobs a canary must have run before it can be rolled back
	// (or promoted while it does worse). Default 20.
	CanaryMinJobs int
	// History is how many versions of the module are kept for a rollback. Default 5.
	History int
}

// withDefaults returns r with every zero field set to its default.
func (r Rollout) withDefaults() Rollout {
	return r.over(Rollout{
		Strategy:              StrategyCanary,
		CanaryPercent:         DefaultCanaryPercent,
		CanaryJobs:            DefaultCanaryJobs,
		CanaryTime:            DefaultCanaryTime,
		CanaryMaxFailureDelta: DefaultCanaryMaxFailureDelta,
		CanaryMinJobs:         DefaultCanaryMinJobs,
		History:               DefaultHistory,
	})
}

// over returns r with every zero field set to d's.
func (r Rollout) over(d Rollout) Rollout {
	r.Strategy = cmp.Or(r.Strategy, d.Strategy)
	r.CanaryPercent = cmp.Or(r.CanaryPercent, d.CanaryPercent)
	r.CanaryJobs = cmp.Or(r.CanaryJobs, d.CanaryJobs)
	r.CanaryTime = cmp.Or(r.CanaryTime, d.CanaryTime)
	r.CanaryMaxFailureDelta = cmp.Or(r.CanaryMaxFailureDelta, d.CanaryMaxFailureDelta)
	r.CanaryMinJobs = cmp.Or(r.CanaryMinJobs, d.CanaryMinJobs)
	r.History = cmp.Or(r.History, d.History)
	return r
}

// rolloutFields check the keys of the [rollout] table.
var rolloutFields = map[string]func(r *Rollout, v any) error{
	"strategy": func(r *Rollout, v any) error {
		s, ok := v.(string)
		if !ok || (s != StrategyCanary && s != StrategyImmediate) {
			return fmt.Errorf("want %q or %q, got %s", StrategyCanary, StrategyImmediate, tomlvalue.Describe(v))
		}
		r.Strategy = s
		return nil
	},
	"canary_percent":  rolloutInt(func(r *Rollout) *int { return &r.CanaryPercent }, 1, 100),
	"canary_jobs":     rolloutInt(func(r *Rollout) *int { return &r.CanaryJobs }, 1, 1_000_000),
	"canary_min_jobs": rolloutInt(func(r *Rollout) *int { return &r.CanaryMinJobs }, 1, 1_000_000),
	"history":         rolloutInt(func(r *Rollout) *int { return &r.History }, 1, 1000),
	"canary_time": func(r *Rollout, v any) error {
		s, ok := v.(string)
		d, err := time.ParseDuration(s)
		if !ok || err != nil || d <= 0 || d > 24*time.Hour {
			return fmt.Errorf("want a duration from 1ms to 24h such as \"60s\", got %s", tomlvalue.Describe(v))
		}
		r.CanaryTime = d
		return nil
	},
	"canary_max_failure_delta": func(r *Rollout, v any) error {
		var f float64
		switch x := v.(type) {
		case float64:
			f = x
		case int64:
			f = float64(x)
		default:
			return fmt.Errorf("want a number from 0.001 to 1 such as 0.05, got %s", tomlvalue.Describe(v))
		}
		if !(f >= 0.001 && f <= 1) {
			return fmt.Errorf("want a number from 0.001 to 1 such as 0.05, got %s", tomlvalue.Describe(v))
		}
		r.CanaryMaxFailureDelta = f
		return nil
	},
}

func rolloutInt(field func(*Rollout) *int, lo, hi int) func(*Rollout, any) error {
	return func(r *Rollout, v any) error {
		n, ok := v.(int64)
		if !ok {
			return fmt.Errorf("want a whole number, got %s", tomlvalue.Describe(v))
		}
		if n < int64(lo) || n > int64(hi) {
			return fmt.Errorf("want %d to %d, got %d", lo, hi, n)
		}
		*field(r) = int(n)
		return nil
	}
}

// parseRollout is the manifest field of the [rollout] table.
func parseRollout(m *Manifest, v value) error {
	table, ok := v.v.(map[string]any)
	if !ok {
		return fmt.Errorf("want a table such as [rollout] then canary_percent = 10, got %s", v.raw)
	}
	var r Rollout
	for _, k := range slices.Sorted(maps.Keys(table)) {
		check, ok := rolloutFields[k]
		if !ok {
			return &entryError{key: k, err: fmt.Errorf("unknown rollout setting (known: %s)", joinSorted(rolloutFields))}
		}
		if err := check(&r, table[k]); err != nil {
			return &entryError{key: k, err: err}
		}
	}
	m.Rollout = r
	return nil
}

func joinSorted[V any](m map[string]V) string {
	keys := slices.Sorted(maps.Keys(m))
	out := ""
	for i, k := range keys {
		if i > 0 {
			out += ", "
		}
		out += k
	}
	return out
}

// VersionOf returns the version of a module made of the bytes wasm and the manifest
// text manifest: the sha256 of the bytes alone when there is no manifest (so a module
// without one keeps the version it always had), else the sha256 of the two sha256s.
// A change of either is a new version.
func VersionOf(wasm, manifest []byte) string {
	if len(manifest) == 0 {
		return Version(wasm)
	}
	w, m := sha256.Sum256(wasm), sha256.Sum256(manifest)
	sum := sha256.Sum256(append(w[:], m[:]...))
	return hex.EncodeToString(sum[:])
}

// CanaryBucket returns the bucket, 0 to 99, of a job id: a canary taking p percent
// runs the jobs whose bucket is below p. It is a hash, so the split is the same on
// every host and at every attempt, and a test or an operator can tell which jobs a
// canary took.
func CanaryBucket(id string) int {
	h := fnv.New32a()
	h.Write([]byte(id))
	return int(h.Sum32() % 100)
}
