package backend

import (
	"context"
	"maps"
	"strconv"
)

// ReplayHeader is the reserved header that counts how many times an operator replayed
// the job from its dead letters (absent: never). A replayed job is new work, and a
// handler may tell it from the run that was dead-lettered by it: the host's
// idempotency keys carry it, so that an API which cached the old key's failure does
// not answer the replay with it.
const ReplayHeader = "wasmjobs-replays"

// OutageHeader is the reserved header in which the worker keeps when the outage a job
// waits out began (worker.OutageHeader); a replay drops it, as it resets Defers,
// since the replayed job's waits start afresh.
const OutageHeader = "wasmjobs-outage-since"

// Replayed turns a dead letter's envelope into the fresh job its replay puts back:
// attempt 1, no reason, no defers, ReplayHeader one more (ReplayedHeaders). Every
// backend's ReplayDeadLetter goes through it, or through ReplayedHeaders when it
// rewrites the headers of a message it does not decode.
func Replayed(ctx context.Context, env *Envelope) {
	env.Attempt, env.Reason, env.Defers = 1, "", 0
	env.Headers = ReplayedHeaders(ctx, env.Headers)
}

// ReplayedHeaders returns a copy of a dead letter's headers for its replay:
// ReplayHeader one more than ReplayGeneration reads in h, OutageHeader dropped, and
// the headers ctx carries for the replay (WithReplayHeaders) set, or removed where
// their value is "".
func ReplayedHeaders(ctx context.Context, h map[string]string) map[string]string {
	out := maps.Clone(h)
	if out == nil {
		out = make(map[string]string, 1)
	}
	out[ReplayHeader] = strconv.Itoa(ReplayGeneration(h) + 1)
	delete(out, OutageHeader)
	if extra, ok := ctx.Value(replayHeadersKey{}).(map[string]string); ok {
		for k, v := range extra {
			if v == "" {
				delete(out, k)
			} else {
				out[k] = v
			}
		}
	}
	return out
}

type replayHeadersKey struct{}

// WithReplayHeaders returns ctx carrying headers that a ReplayDeadLetter under it
// sets on the replayed job (ReplayedHeaders), such as the replaying request's trace
// context: request-scoped data that the backend passes on without reading it. Keys
// should be reserved ("wasmjobs-"); a key whose value is "" is removed from the
// replayed job (what an earlier replay set does not outlive the next); an empty h
// changes nothing.
func WithReplayHeaders(ctx context.Context, h map[string]string) context.Context {
	if len(h) == 0 {
		return ctx
	}
	return context.WithValue(ctx, replayHeadersKey{}, h)
}

// ReplayGeneration returns how many times a job was replayed from its dead letters:
// its ReplayHeader, 0 when absent or not a positive number.
func ReplayGeneration(h map[string]string) int {
	n, err := strconv.Atoi(h[ReplayHeader])
	if err != nil || n < 0 {
		return 0
	}
	return n
}
