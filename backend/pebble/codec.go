package pebble

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
)

// Values are a version byte followed by the fields of that version. A reader refuses a
// version it does not know rather than guess at it, so a directory written by a newer
// wasmjobs fails loudly on an older one.
const (
	// envelopeV1 is the first encoding of an envelope.
	envelopeV1 byte = 1
	// envelopeV2 adds, after the id, the concurrency key and the job's place in its
	// key's line (see encodeEnvelope); every other field is as in envelopeV1. A v1
	// value reads as a job without a key.
	envelopeV2 byte = 2
	// envelopeV3 adds, at the end, the job's round (backend.Envelope.Round: how many of
	// its waits have ended); every other field is as in envelopeV2. A v1 or v2 value
	// reads as round 0.
	envelopeV3 byte = 3
	// deadV1 is the first encoding of a dead letter: reason, time, then an envelope.
	deadV1 byte = 1
	// queueV1 is the first encoding of a queue declaration: its priority levels.
	queueV1 byte = 1
	// queueV2 adds the bound on each concurrency key's running jobs
	// (QueueConfig.KeyConcurrency), a uvarint; a v1 declaration reads as none.
	queueV2 byte = 2
)

var errShort = errors.New("value ends early")

// encodeEnvelope appends env's binary form to dst. Redelivered is not stored: a claim
// lives in memory only. line is the job's place in the line of its key (env.Key): the
// sequence of its first publish, kept by every republish of the job (a retry has a
// new sequence of its own), so that Open rebuilds each key's line in the order the
// jobs were enqueued. The key and line come right after the id, for the scan at open.
func encodeEnvelope(dst []byte, env backend.Envelope, line uint64) []byte {
	dst = append(dst, envelopeV3)
	dst = appendString(dst, env.ID)
	dst = appendString(dst, env.Key)
	dst = binary.AppendUvarint(dst, line)
	dst = appendString(dst, env.Queue)
	dst = appendBytes(dst, env.Payload)
	dst = binary.AppendUvarint(dst, uint64(len(env.Headers)))
	for k, v := range env.Headers {
		dst = appendString(dst, k)
		dst = appendString(dst, v)
	}
	dst = append(dst, env.Priority)
	dst = binary.AppendVarint(dst, int64(env.Attempt))
	dst = binary.AppendVarint(dst, int64(env.MaxAttempts))
	dst = binary.AppendVarint(dst, int64(env.Defers))
	dst = appendTime(dst, env.EnqueuedAt)
	dst = appendString(dst, env.Reason)
	dst = binary.AppendUvarint(dst, uint64(env.Round))
	return dst
}

// decodeEnvelope reads an envelope written by encodeEnvelope. Its errors wrap
// backend.ErrMalformed; the envelope returned with one holds what could be read.
func decodeEnvelope(b []byte) (backend.Envelope, error) {
	var env backend.Envelope
	r := reader{b: b}
	v := r.byte()
	if r.err == nil && (v < envelopeV1 || v > envelopeV3) {
		return env, fmt.Errorf("%w: envelope encoding version %d is not known to this build", backend.ErrMalformed, v)
	}
	env.ID = r.string()
	if v >= envelopeV2 {
		env.Key = r.string()
		r.uvarint() // the line: envelopeHead's
	}
	env.Queue = r.string()
	env.Payload = r.bytes()
	if n := r.uvarint(); r.err == nil {
		if n > uint64(len(r.b)) { // every header takes at least 2 bytes: a bound on bad input
			r.err = fmt.Errorf("%d headers in %d bytes", n, len(r.b))
		} else if n > 0 {
			env.Headers = make(map[string]string, n)
			for range n {
				k := r.string()
				env.Headers[k] = r.string()
			}
		}
	}
	env.Priority = r.byte()
	env.Attempt = r.int()
	env.MaxAttempts = r.int()
	env.Defers = r.int()
	env.EnqueuedAt = r.time()
	env.Reason = r.string()
	if v >= envelopeV3 {
		if n := r.uvarint(); n > math.MaxInt32 {
			r.err = fmt.Errorf("round %d out of range", n)
		} else {
			env.Round = int(n)
		}
	}
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("%d bytes left over", len(r.b))
	}
	if r.err != nil {
		return env, fmt.Errorf("%w: decoding a stored envelope: %v", backend.ErrMalformed, r.err)
	}
	return env, nil
}

// envelopeID reads only the job id of an encoded envelope.
func envelopeID(b []byte) (string, error) {
	h, err := envelopeHead(b)
	return h.id, err
}

// head is what the scan at open reads of an encoded envelope: its id, its concurrency
// key and its place in the key's line (zero in a v1 value, which has no key).
type head struct {
	id, key string
	line    uint64
}

// envelopeHead reads the head of an encoded envelope, for the scan at open.
func envelopeHead(b []byte) (head, error) {
	r := reader{b: b}
	v := r.byte()
	if r.err == nil && (v < envelopeV1 || v > envelopeV3) {
		return head{}, fmt.Errorf("envelope encoding version %d is not known to this build", v)
	}
	h := head{id: r.string()}
	if v >= envelopeV2 {
		h.key = r.string()
		h.line = r.uvarint()
	}
	return h, r.err
}

// encodeDead appends a dead letter's binary form: the reason and time, then the job's
// stored value as it was (possibly undecodable: it is kept byte for byte).
func encodeDead(dst []byte, reason string, at time.Time, value []byte) []byte {
	dst = append(dst, deadV1)
	dst = appendString(dst, reason)
	dst = appendTime(dst, at)
	return append(dst, value...)
}

// decodeDead reads a dead letter written by encodeDead.
func decodeDead(b []byte) (reason string, at time.Time, value []byte, err error) {
	r := reader{b: b}
	if v := r.byte(); r.err == nil && v != deadV1 {
		return "", time.Time{}, nil, fmt.Errorf("dead letter encoding version %d is not known to this build", v)
	}
	reason = r.string()
	at = r.time()
	return reason, at, r.b, r.err
}

func encodeQueue(levels, keyLimit int) []byte {
	return binary.AppendUvarint([]byte{queueV2, byte(levels)}, uint64(max(keyLimit, 0)))
}

func decodeQueue(b []byte) (levels, keyLimit int, err error) {
	switch {
	case len(b) == 2 && b[0] == queueV1:
		return int(b[1]), 0, nil
	case len(b) > 2 && b[0] == queueV2:
		n, k := binary.Uvarint(b[2:])
		if k > 0 && 2+k == len(b) && n <= math.MaxInt32 {
			return int(b[1]), int(n), nil
		}
	}
	return 0, 0, fmt.Errorf("queue declaration %x: unknown encoding", b)
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

func appendBytes(dst, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

// appendTime stores t as Unix nanoseconds, with a flag for the zero time (which has no
// Unix nanosecond value).
func appendTime(dst []byte, t time.Time) []byte {
	if t.IsZero() {
		return append(dst, 0)
	}
	dst = append(dst, 1)
	return binary.AppendVarint(dst, t.UnixNano())
}

// reader decodes fields one after the other; the first error sticks and every later
// read returns a zero value.
type reader struct {
	b   []byte
	err error
}

func (r *reader) byte() byte {
	if r.err != nil {
		return 0
	}
	if len(r.b) == 0 {
		r.err = errShort
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

// count reads how many items follow, each at least a byte long: a count beyond the
// bytes left (a bound on bad input) is errShort. It reads as 0 after an error.
func (r *reader) count() uint64 {
	n := r.uvarint()
	if r.err == nil && n > uint64(len(r.b)) {
		r.err = errShort
	}
	if r.err != nil {
		return 0
	}
	return n
}

// finish says whether the value was read whole: nil, or an error decoding what.
func (r *reader) finish(what string) error {
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("%d bytes left over", len(r.b))
	}
	if r.err != nil {
		return fmt.Errorf("decoding %s: %w", what, r.err)
	}
	return nil
}

func (r *reader) uvarint() uint64 { return readVarint(r, binary.Uvarint) }

// readVarint reads one number with decode (binary.Uvarint or binary.Varint).
func readVarint[T uint64 | int64](r *reader, decode func([]byte) (T, int)) T {
	if r.err != nil {
		return 0
	}
	v, n := decode(r.b)
	if n <= 0 {
		r.err = errShort
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) int() int {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 || v > math.MaxInt32 || v < math.MinInt32 {
		r.err = errors.New("bad integer")
		return 0
	}
	r.b = r.b[n:]
	return int(v)
}

func (r *reader) bytes() []byte {
	n := r.uvarint()
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.err = errShort
		return nil
	}
	if n == 0 {
		return nil
	}
	out := make([]byte, n)
	copy(out, r.b)
	r.b = r.b[n:]
	return out
}

func (r *reader) string() string {
	n := r.uvarint()
	if r.err != nil {
		return ""
	}
	if n > uint64(len(r.b)) {
		r.err = errShort
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

func (r *reader) time() time.Time {
	switch r.byte() {
	case 0:
		return time.Time{}
	case 1:
		if r.err != nil {
			return time.Time{}
		}
		v, n := binary.Varint(r.b)
		if n <= 0 {
			r.err = errShort
			return time.Time{}
		}
		r.b = r.b[n:]
		return time.Unix(0, v)
	default:
		if r.err == nil {
			r.err = errors.New("bad time flag")
		}
		return time.Time{}
	}
}
