package pebble

import (
	"encoding/binary"
	"fmt"
	"time"
)

// The key space. Every key starts with one byte naming its kind; queue names cannot
// hold a 0x00 byte (backend.ValidateQueueName), so 0x00 ends a name inside a key.
//
//	m schema                                  -> schema version (uvarint)
//	m tick 0x00 <schedule>                    -> last fired tick of a schedule (Unix ns, 8 bytes)
//	q <queue>                                 -> queue declaration
//	r <queue> 0x00 <priority> <seq:8>         -> ready job (envelope)
//	d <due:8> <seq:8> <deferred> <priority> <queue> -> delayed job (envelope)
//	x <queue> 0x00 <at:8> <seq:8>             -> dead letter
//	j <id>                                    -> job record
//	t <finished:8> <id>                       -> finished job record, by time (retention)
//	u <queue> 0x00 <unique key>               -> job holding the key, and until when
//	w <id>                                    -> waiting job: envelope and what it awaits
//	a <len:2> <id> <index:4>                  -> how the index-th job id awaited ended
//	g <id>                                    -> group (workflow or batch)
//
// Integers are big-endian so that keys sort by them; times are Unix nanoseconds.
const (
	kindMeta    = 'm'
	kindQueue   = 'q'
	kindReady   = 'r'
	kindDelayed = 'd'
	kindDead    = 'x'
	kindRecord  = 'j'
	kindByTime  = 't'
)

// schemaVersion is the layout above. Open refuses a directory of another version.
const schemaVersion = 1

var schemaKey = []byte{kindMeta, 's', 'c', 'h', 'e', 'm', 'a'}

func queueKey(name string) []byte {
	return append([]byte{kindQueue}, name...)
}

// readyPrefix is the prefix of every ready key of queue.
func readyPrefix(queue string) []byte {
	k := make([]byte, 0, len(queue)+2)
	k = append(k, kindReady)
	k = append(k, queue...)
	return append(k, 0)
}

func readyKey(queue string, priority uint8, seq uint64) []byte {
	k := make([]byte, 0, len(queue)+12)
	k = append(k, kindReady)
	k = append(k, queue...)
	k = append(k, 0, priority)
	return binary.BigEndian.AppendUint64(k, seq)
}

func parseReadyKey(k []byte) (queue string, priority uint8, seq uint64, err error) {
	if len(k) < 12 || k[0] != kindReady || k[len(k)-10] != 0 {
		return "", 0, 0, fmt.Errorf("ready key %x: bad layout", k)
	}
	return string(k[1 : len(k)-10]), k[len(k)-9], binary.BigEndian.Uint64(k[len(k)-8:]), nil
}

func delayedKey(due time.Time, seq uint64, deferred bool, priority uint8, queue string) []byte {
	k := make([]byte, 0, 19+len(queue))
	k = append(k, kindDelayed)
	k = binary.BigEndian.AppendUint64(k, uint64(due.UnixNano()))
	k = binary.BigEndian.AppendUint64(k, seq)
	var flag byte
	if deferred {
		flag = 1
	}
	k = append(k, flag, priority)
	return append(k, queue...)
}

func parseDelayedKey(k []byte) (due time.Time, seq uint64, deferred bool, priority uint8, queue string, err error) {
	if len(k) < 20 || k[0] != kindDelayed || k[17] > 1 {
		return time.Time{}, 0, false, 0, "", fmt.Errorf("delayed key %x: bad layout", k)
	}
	due = time.Unix(0, int64(binary.BigEndian.Uint64(k[1:9])))
	return due, binary.BigEndian.Uint64(k[9:17]), k[17] == 1, k[18], string(k[19:]), nil
}

func deadPrefix(queue string) []byte {
	k := make([]byte, 0, len(queue)+2)
	k = append(k, kindDead)
	k = append(k, queue...)
	return append(k, 0)
}

func deadKey(queue string, at time.Time, seq uint64) []byte {
	k := deadPrefix(queue)
	k = binary.BigEndian.AppendUint64(k, uint64(at.UnixNano()))
	return binary.BigEndian.AppendUint64(k, seq)
}

func parseDeadKey(k []byte) (queue string, seq uint64, err error) {
	if len(k) < 19 || k[0] != kindDead || k[len(k)-17] != 0 {
		return "", 0, fmt.Errorf("dead letter key %x: bad layout", k)
	}
	return string(k[1 : len(k)-17]), binary.BigEndian.Uint64(k[len(k)-8:]), nil
}

// prefixEnd returns the first key after every key that starts with prefix.
func prefixEnd(prefix []byte) []byte {
	end := append([]byte(nil), prefix...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] != 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}
