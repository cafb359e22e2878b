package backend

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"strconv"
	"strings"
	"time"
)

// crockford is Crockford's base32 alphabet: sortable, no I, L, O or U.
const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// NewID returns a new job id: 26 characters of Crockford base32 holding a 48-bit Unix
// millisecond timestamp followed by 80 random bits (the ULID layout). IDs sort by
// creation time to the millisecond; within one millisecond their order is random.
func NewID() string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(time.Now().UnixMilli())<<16)
	rand.Read(b[6:]) // never fails (crypto/rand.Read panics rather than return an error)
	return encodeID(b)
}

// ChildID returns the id of the child job number index (0-based) that round round of
// the job parent stages (round is Envelope.Round: 0 on a first run, n after n waits),
// for queue and payload: the same for the same five, whichever attempt of the parent
// publishes it, so that a retried publish repeats an id instead of making a new job,
// and a backend that knows ids can drop the repeat. A retried parent that stages a
// different child at the same index (another queue or payload, say because its
// input changed) gets a different id, so that child is not dropped as a repeat; so
// does a later round, so that a parent that waits again never stages a child under
// the id of one it already waited for. Round 0 gives the ids of hosts that had no
// rounds, so stored children keep theirs. It is a valid id in NewID's layout: the
// parent's timestamp (zero when parent is not such an id), then 80 bits of a SHA-256
// of the five.
func ChildID(parent string, round, index int, queue string, payload []byte) string {
	var b [16]byte
	ms, _ := idMillis(parent)
	binary.BigEndian.PutUint64(b[:8], ms<<16)
	payloadSum := sha256.Sum256(payload)
	h := sha256.New()
	h.Write([]byte("wasmjobs child\x00"))
	fields := [][]byte{[]byte(parent), []byte(strconv.Itoa(index)), []byte(queue), payloadSum[:]}
	if round > 0 {
		fields = append(fields, []byte("round "+strconv.Itoa(round)))
	}
	for _, field := range fields {
		// Each field after its length, so that no two tuples write the same bytes.
		h.Write(binary.AppendUvarint(nil, uint64(len(field))))
		h.Write(field)
	}
	copy(b[6:], h.Sum(nil)[:10])
	return encodeID(b)
}

// idMillis returns the timestamp of an id in NewID's layout.
func idMillis(id string) (uint64, bool) {
	if len(id) != 26 || id[0] > '7' { // 26 digits of 5 bits hold 130: the first holds 3
		return 0, false
	}
	var v uint64
	for i := range 10 { // 3 + 9×5 bits: the timestamp
		d := strings.IndexByte(crockford, id[i])
		if d < 0 {
			return 0, false
		}
		v = v<<5 | uint64(d)
	}
	for i := 10; i < 26; i++ {
		if strings.IndexByte(crockford, id[i]) < 0 {
			return 0, false
		}
	}
	return v, true
}

// encodeID writes 128 bits as 26 five-bit digits: the first digit holds the top 3 bits.
func encodeID(b [16]byte) string {
	hi := binary.BigEndian.Uint64(b[:8])
	lo := binary.BigEndian.Uint64(b[8:])
	var out [26]byte
	for i := 25; i >= 0; i-- {
		out[i] = crockford[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return string(out[:])
}

// ScheduleID returns the id of the job that the tick at tick of the schedule named
// schedule (its module and name, such as "reports/nightly") fires: the same on every
// host and after every restart, so that a tick fired twice (by two hosts around a
// failover, or again after a crash between the publish and the write of the tick)
// repeats an id instead of making a second job where the backend knows ids, and can be
// told apart where it does not. It is a valid id in NewID's layout: the tick's
// timestamp, then 80 bits of a SHA-256 of the two.
func ScheduleID(schedule string, tick time.Time) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(tick.UnixMilli())<<16)
	h := sha256.New()
	h.Write([]byte("wasmjobs schedule\x00"))
	h.Write(binary.AppendUvarint(nil, uint64(len(schedule))))
	h.Write([]byte(schedule))
	h.Write(binary.BigEndian.AppendUint64(nil, uint64(tick.UnixNano())))
	copy(b[6:], h.Sum(nil)[:10])
	return encodeID(b)
}
