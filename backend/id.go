package backend

import (
	"crypto/rand"
	"encoding/binary"
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
	hi := binary.BigEndian.Uint64(b[:8])
	lo := binary.BigEndian.Uint64(b[8:])
	var out [26]byte
	// 128 bits as 26 five-bit digits: the first digit holds the top 3 bits.
	for i := 25; i >= 0; i-- {
		out[i] = crockford[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return string(out[:])
}
