// Package pebble is the embedded durable implementation of the backend contract: queues,
// delays and dead letters kept in one data directory by the Pebble storage engine
// (github.com/cockroachdb/pebble/v2), owned by one process.
//
// What is on disk, and when:
//   - A publish (Publish, Defer, ReplayDeadLetter, a declaration) commits with a synced
//     write and returns only then; concurrent publishes share one fsync (Pebble's group
//     commit). A job whose publish returned survives a crash.
//   - A settle (Ack, Retry, Defer, DeadLetter) is one atomic batch committed without its
//     own fsync: it reaches the disk with the next synced commit (any publish), a
//     rotation of the log, or Close (WALBytesPerSync is 0: nothing syncs on a timer).
//     A settle lost in a crash means the job is delivered again, never that it is lost.
//   - A claim (a delivery handed to a consumer) lives in memory only: the directory has
//     one owner (a second Open fails with ErrLocked), so after a crash everything
//     unsettled is simply still there and is delivered again, at the same attempt.
//
// The in-memory indexes (a FIFO per queue and priority, a heap of due times) are rebuilt
// by one scan of the store at Open, which also reads every data block of the live keys
// (not the filter blocks) and so finds damage to any job before it runs (ErrCorrupt). Delays use the time package's timers, so tests
// can run the backend on vfs.NewMem inside a testing/synctest bubble; keep such tests
// small, though: a memtable flush or compaction inside a bubble hands Pebble's pooled
// writers a channel of the bubble, and a later flush outside it then crashes the test
// binary ("send on synctest channel from outside bubble"). Close flushes only a
// memtable over 1 MiB for that reason.
package pebble

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	pebbledb "github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/internal/stream"
)

// Sentinel errors of this backend. Each is wrapped with the data directory's name.
var (
	// ErrLocked is returned by Open when another Backend, in this process or another,
	// has the directory open.
	ErrLocked = errors.New("data directory is in use by another process")
	// ErrCorrupt is returned by Open when the store is damaged: a checksum mismatch, a
	// value that does not decode, a key of an unknown layout. The message names the
	// file or key and the problem.
	ErrCorrupt = errors.New("data directory is damaged")
	// ErrDiskFull is returned by publishing operations while the free space of the
	// directory's filesystem is under the reserve (Config.FreeSpaceReserve).
	ErrDiskFull = errors.New("not enough free disk space")
	// ErrStoreFailed is returned by every operation after the storage engine reported
	// an error it cannot continue from (such as a failed write of its log, or a job the
	// index holds whose value cannot be read). Every stream ends with it, Consume
	// returns it, and Close releases the directory without closing the engine. Jobs
	// whose publish returned are on disk; restart the process to reopen the directory.
	ErrStoreFailed = errors.New("storage engine failed")
)

// Defaults of Config.
const (
	// DefaultFreeSpaceReserve is the free space under which publishes are refused.
	DefaultFreeSpaceReserve = 256 << 20
	// DefaultBallastSize is the size of the ballast file (preallocated, see
	// Config.BallastSize) deleted when a write meets a full disk.
	DefaultBallastSize = 64 << 20
	// DefaultCacheSize is Pebble's block cache.
	DefaultCacheSize = 64 << 20
	// DefaultMemTableSize is the size of each of Pebble's memtables (Pebble's own
	// default is 4 MiB). Most jobs are published and settled within one memtable's
	// life, so that their ready keys and first records never reach a table: at 16 MiB
	// a backlog of 200,000 jobs is worked with a third less CPU a job than at 4.
	DefaultMemTableSize = 16 << 20
)

// Config configures a Backend. Only Dir is required.
type Config struct {
	// Dir is the data directory. It is created if missing.
	Dir string
	// FS is the filesystem the directory lives on. Nil means the operating system's;
	// tests pass vfs.NewMem() or vfs.NewCrashableMem().
	FS vfs.FS
	// Logger receives the backend's and Pebble's messages (Pebble's informational ones
	// at debug level). Nil discards them.
	Logger *slog.Logger
	// Granularity is the unit delays are rounded up to. Zero means 1 ms; a finer value
	// is clamped to backend.MinGranularity and logged.
	Granularity time.Duration
	// FreeSpaceReserve is the free space, in bytes, under which publishes and acks
	// with children fail with ErrDiskFull. Other settles still go through (they free
	// the job's value), writing job records without output or log lines. Zero means
	// DefaultFreeSpaceReserve; a negative value turns the check off.
	FreeSpaceReserve int64
	// BallastSize is the size of the file "BALLAST" kept in the directory (space
	// preallocated, not written) and deleted when a write meets a full disk (ENOSPC),
	// so that the write can be tried once more and the store refuse further work. It is
	// made, at Open or later, whenever it is missing and the free space is at least
	// the reserve plus the ballast. Zero means DefaultBallastSize; a negative value
	// means no ballast.
	BallastSize int64
	// CacheSize is the size of Pebble's block cache in bytes. Zero means
	// DefaultCacheSize.
	CacheSize int64
	// MemTableSize is the size of each memtable in bytes: up to two are held in
	// memory (a third kept for reuse), and the last one's log is replayed when the
	// directory is opened. Pebble reserves them in the block cache, so CacheSize
	// should be well above three of them: the defaults leave 16 MiB of its 64 for
	// blocks. Zero means DefaultMemTableSize.
	MemTableSize int64
	// Records configures the job records (see JobRecord).
	Records RecordConfig
}

// Recovered says what Open found in the directory.
type Recovered struct {
	// Ready, Delayed and Dead count the jobs found ready (pending), delayed (or deferred) and
	// dead-lettered, over every queue.
	Ready, Delayed, Dead int
	// Waiting counts the jobs found waiting for other jobs.
	Waiting int
	// Queues counts the declared queues.
	Queues int
	// Took is how long the scan of the store took.
	Took time.Duration
}

// Backend is a durable backend on one data directory. It is safe for concurrent use.
type Backend struct {
	dir         string
	fs          vfs.FS
	log         *slog.Logger
	granularity time.Duration
	db          *pebbledb.DB
	lock        *pebbledb.Lock
	seq         atomic.Uint64
	hot         hotValues // ready jobs' values kept in memory until delivered
	recovered   Recovered
	space       *spaceGuard
	records     recordConfig

	// failed holds the error that broke the store (ErrStoreFailed), if one did;
	// failCh is closed when it is set, and ends every stream.
	failed   atomic.Pointer[error]
	failCh   chan struct{}
	failOnce sync.Once
	// corruption holds the last corruption Pebble reported.
	corruption atomic.Pointer[pebbledb.DataCorruptionInfo]

	// queues is the declared queues and whether the backend is closed; its lock
	// guards declaring, the names whose declaration is being committed.
	queues    stream.Directory[*queue]
	declaring map[string]*declaration
	done      chan struct{} // closed by Close
	// storeClosed is closed once the store is closed; closeErr, set before, says how.
	storeClosed chan struct{}
	closeErr    error
	// closing is cancelled by Close: background work (compactions) stops with it.
	closing context.Context
	cancel  context.CancelFunc
	streams stream.Streams[*item]
	ops     sync.WaitGroup // operations that use the store

	ids    idSet
	delays delayIndex
	recs   recordIndex
	uniq   uniqIndex
	waits  waitIndex
	groups groupIndex
	// released holds the waiting jobs Open found ready to release, until it has.
	released []*waiter

	// replaying holds the dead-letter keys being replayed, deleted or purged: the one
	// that stores a key first owns it.
	replaying sync.Map

	// beforeCommit, when set (by tests only), is called before each commit with the
	// operation's name.
	beforeCommit func(op string)
}

var (
	_ backend.Backend         = (*Backend)(nil)
	_ backend.DeadLetterStore = (*Backend)(nil)
	_ backend.StatsReader     = (*Backend)(nil)
	_ backend.BatchPublisher  = (*Backend)(nil)
	_ backend.JobRecordReader = (*Backend)(nil)
	_ backend.AtomicDelivery  = (*delivery)(nil)
)

// Dir returns the data directory, as an absolute path when it is on the operating
// system's filesystem.
func (b *Backend) Dir() string { return b.dir }

// Recovered says what Open found in the directory: how many jobs were waiting.
func (b *Backend) Recovered() Recovered { return b.recovered }
