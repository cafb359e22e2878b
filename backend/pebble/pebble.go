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
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
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
	// Records configures the job records (see JobRecord).
	Records RecordConfig
}

// Recovered says what Open found in the directory.
type Recovered struct {
	// Ready, Delayed and Dead count the jobs found waiting, delayed (or deferred) and
	// dead-lettered, over every queue.
	Ready, Delayed, Dead int
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
	streams stream.Group
	ops     sync.WaitGroup // operations that use the store

	ids    idSet
	delays delayIndex
	recs   recordIndex
	uniq   uniqIndex

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

// Open opens (or creates) the data directory cfg.Dir, takes its lock and rebuilds the
// in-memory indexes with one scan. It fails with ErrLocked when the directory is in use,
// and with ErrCorrupt when the store is damaged.
func Open(ctx context.Context, cfg Config) (*Backend, error) {
	if cfg.Dir == "" {
		return nil, errors.New("pebble backend: Config.Dir is empty")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	fs := cfg.FS
	if fs == nil {
		fs = vfs.Default
	}
	dir := cfg.Dir
	if fs == vfs.Default {
		if abs, err := filepath.Abs(dir); err == nil {
			dir = abs
		}
	}
	b := &Backend{
		dir:         dir,
		fs:          fs,
		log:         log,
		granularity: backend.ClampGranularity(cfg.Granularity, log),
		records:     cfg.Records.normalize(),
		declaring:   make(map[string]*declaration),
		done:        make(chan struct{}),
		failCh:      make(chan struct{}),
		storeClosed: make(chan struct{}),
	}
	b.closing, b.cancel = context.WithCancel(context.Background())
	b.ids.m = make(map[string]chan struct{})
	b.ids.claims = make(map[string]int)
	b.uniq.init()
	b.recs.kick = make(chan struct{}, 1)
	b.delays.b = b
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("pebble backend: creating data directory %s: %w", dir, err)
	}
	lock, err := pebbledb.LockDirectory(dir, fs)
	if err != nil {
		if isLockHeld(err) {
			return nil, fmt.Errorf("pebble backend: %w: %s (%v)", ErrLocked, dir, err)
		}
		return nil, fmt.Errorf("pebble backend: locking data directory %s: %w", dir, err)
	}
	b.lock = lock
	b.space = newSpaceGuard(b, fs, dir, cfg.FreeSpaceReserve, cfg.BallastSize)
	cacheSize := cfg.CacheSize
	if cacheSize <= 0 {
		cacheSize = DefaultCacheSize
	}
	cache := pebbledb.NewCache(cacheSize)
	defer cache.Unref()
	opts := &pebbledb.Options{
		FS:     b.space.wrap(fs),
		Lock:   lock,
		Cache:  cache,
		Logger: pebbleLogger{log},
		EventListener: &pebbledb.EventListener{
			DataCorruption: func(info pebbledb.DataCorruptionInfo) {
				b.corruption.Store(&info)
				log.Error("data directory damaged", "dir", dir, "file", info.Path, "problem", fmt.Sprint(info.Details))
			},
			BackgroundError: func(err error) {
				log.Error("storage engine background error", "dir", dir, "error", err)
			},
		},
	}
	opts.EnsureDefaults()
	db, err := b.openDB(opts)
	if err != nil {
		lock.Close()
		return nil, err
	}
	b.db = db
	if err := b.load(ctx); err != nil {
		db.Close()
		lock.Close()
		return nil, err
	}
	b.space.start()
	b.ops.Add(1)
	go b.pruneLoop()
	return b, nil
}

// openDB opens Pebble, turning a fatal report during Open (see pebbleLogger) and a
// corruption error into ErrCorrupt that names the directory.
func (b *Backend) openDB(opts *pebbledb.Options) (db *pebbledb.DB, err error) {
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(fatalError)
			if !ok {
				panic(r)
			}
			db, err = nil, fmt.Errorf("pebble backend: %w: %s: %s", ErrCorrupt, b.dir, f.msg)
		}
	}()
	db, err = pebbledb.Open(b.dir, opts)
	if err != nil {
		if errors.Is(err, pebbledb.ErrCorruption) || b.corruption.Load() != nil {
			return nil, fmt.Errorf("pebble backend: %w: %s: %v", ErrCorrupt, b.dir, err)
		}
		return nil, fmt.Errorf("pebble backend: opening data directory %s: %w", b.dir, err)
	}
	return db, nil
}

// isLockHeld reports whether err from taking the directory lock means that someone
// holds it (fcntl's EAGAIN or EACCES, or Pebble's own check within one process).
func isLockHeld(err error) bool {
	return errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EACCES) ||
		errors.Is(err, os.ErrExist) || strings.Contains(err.Error(), "lock held by current process")
}

// Dir returns the data directory, as an absolute path when it is on the operating
// system's filesystem.
func (b *Backend) Dir() string { return b.dir }

// Recovered says what Open found in the directory: how many jobs were waiting.
func (b *Backend) Recovered() Recovered { return b.recovered }

// queue is one declared queue: its index of ready jobs and its streams (the stream
// core's Queue), and beside them its counts, guarded by the Queue's lock.
type queue struct {
	*stream.Queue[*item]
	name string

	delayed  int
	deferred int
	dead     int
	deletes  int // settles since the queue's range was last compacted
}

func newQueue(name string, levels int) *queue {
	return &queue{Queue: stream.NewQueue[*item](levels), name: name}
}

// item is a ready job in the index: where its value is, and its id.
type item struct {
	seq         uint64
	priority    uint8 // as in its key: already clamped to the queue's levels
	id          string
	redelivered bool
}

func (q *queue) key(it *item) []byte { return readyKey(q.name, it.priority, it.seq) }

// enter starts an operation that uses the store, or says why none can start. The
// caller calls b.ops.Done when it is finished.
func (b *Backend) enter() error {
	b.queues.RLock()
	defer b.queues.RUnlock()
	if b.queues.ClosedLocked() {
		return backend.ErrShutDown
	}
	if p := b.failed.Load(); p != nil {
		return *p
	}
	b.ops.Add(1)
	return nil
}

// Declare creates the queue q.Name if it does not exist, durably. The first
// declaration wins, as on a broker: declaring it again with the same priority levels
// changes nothing, and with other levels fails and changes nothing. Concurrent
// declarations of one name are ordered: the name is claimed before the commit, so
// that only the winner's levels reach the disk.
func (b *Backend) Declare(ctx context.Context, qc backend.QueueConfig) error {
	if err := backend.ValidateQueueName(qc.Name); err != nil {
		return err
	}
	qc = qc.Normalize(b.log)
	if err := b.enter(); err != nil {
		return err
	}
	defer b.ops.Done()
	conflict := func(have int) error {
		return fmt.Errorf("queue %q exists with %d priority levels, not the %d wanted: it keeps its first declaration", qc.Name, have, qc.PriorityLevels)
	}
	b.queues.Lock()
	if q, ok := b.queues.GetLocked(qc.Name); ok {
		b.queues.Unlock()
		if q.Levels() != qc.PriorityLevels {
			return conflict(q.Levels())
		}
		return nil
	}
	if p, ok := b.declaring[qc.Name]; ok {
		b.queues.Unlock()
		if p.levels != qc.PriorityLevels {
			return conflict(p.levels)
		}
		select {
		case <-p.done:
			return p.err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	p := &declaration{levels: qc.PriorityLevels, done: make(chan struct{})}
	b.declaring[qc.Name] = p
	b.queues.Unlock()
	batch := b.db.NewBatch()
	batch.Set(queueKey(qc.Name), encodeQueue(qc.PriorityLevels), nil)
	return b.commit(ctx, batch, pebbledb.Sync, "declare", qc.Name, func() {
		b.queues.Lock()
		b.queues.PutLocked(qc.Name, newQueue(qc.Name, qc.PriorityLevels))
		delete(b.declaring, qc.Name)
		b.queues.Unlock()
		close(p.done)
	}, func() {
		b.queues.Lock()
		delete(b.declaring, qc.Name)
		b.queues.Unlock()
		p.err = fmt.Errorf("declaring queue %q in %s: the concurrent declaration failed", qc.Name, b.dir)
		close(p.done)
	})
}

// declaration is a queue being declared: its name is claimed, its commit in flight.
// err is set before done is closed.
type declaration struct {
	levels int
	done   chan struct{}
	err    error
}

// Publish puts env on env.Queue, after delay rounded up to the granularity, and returns
// once it is on disk. A job whose id the backend holds (waiting, delayed or handed
// out) is not published again: Publish reports success and changes nothing.
func (b *Backend) Publish(ctx context.Context, env backend.Envelope, delay time.Duration) error {
	return b.publish(ctx, env, delay, false)
}

// Defer holds env for delay rounded up to the granularity, then puts it on env.Queue;
// it returns once the job is on disk.
func (b *Backend) Defer(ctx context.Context, env backend.Envelope, delay time.Duration) error {
	return b.publish(ctx, env, delay, true)
}

func (b *Backend) publish(ctx context.Context, env backend.Envelope, delay time.Duration, deferred bool) error {
	if err := b.enter(); err != nil {
		return err
	}
	defer b.ops.Done()
	q, err := b.queues.Lookup(env.Queue)
	if err != nil {
		return err
	}
	if err := backend.CheckDelay(delay, backend.MaxDelay); err != nil {
		return fmt.Errorf("publishing job %s to %q: %w", env.ID, env.Queue, err)
	}
	if err := b.space.check(); err != nil {
		return err
	}
	owned, err := b.ids.reserve(ctx, env.ID)
	if err != nil || !owned {
		return err // nil when the id is held: a repeat publish is dropped
	}
	batch := b.db.NewBatch()
	apply := b.stage(batch, q, env, delay, deferred)
	b.stageRecord(batch, env, delay, deferred)
	return b.commit(ctx, batch, pebbledb.Sync, "publish", env.Queue, func() {
		b.ids.settle(env.ID, true)
		apply()
	}, func() { b.ids.settle(env.ID, false) })
}

// PublishBatch publishes every publication in one synced batch: all of them or none.
// Publications whose id the backend holds, or that repeat an id of the batch, are
// dropped.
func (b *Backend) PublishBatch(ctx context.Context, pubs []backend.Publication) error {
	if len(pubs) == 0 {
		return nil
	}
	if err := b.enter(); err != nil {
		return err
	}
	defer b.ops.Done()
	if err := b.space.check(); err != nil {
		return err
	}
	batch := b.db.NewBatch()
	apply, undo, _, err := b.stagePublications(ctx, batch, pubs)
	if err != nil {
		batch.Close()
		return err
	}
	return b.commit(ctx, batch, pebbledb.Sync, "publish batch", pubs[0].Envelope.Queue, apply, undo)
}

// stagePublications adds pubs to batch with their records. Every queue is checked
// before anything is staged. It returns what to do once the batch is committed, what
// to undo if it is not, and the ids of pubs in order.
func (b *Backend) stagePublications(ctx context.Context, batch *pebbledb.Batch, pubs []backend.Publication) (apply, undo func(), ids []string, err error) {
	queues := make([]*queue, len(pubs))
	for i, p := range pubs {
		if queues[i], err = b.queues.Lookup(p.Envelope.Queue); err != nil {
			return nil, nil, nil, err
		}
		if err := backend.CheckDelay(p.Delay, backend.MaxDelay); err != nil {
			return nil, nil, nil, fmt.Errorf("publishing job %s to %q: %w", p.Envelope.ID, p.Envelope.Queue, err)
		}
	}
	var reserved []string
	var applies []func()
	undo = func() {
		for _, id := range reserved {
			b.ids.settle(id, false)
		}
	}
	seen := make(map[string]bool, len(pubs))
	for i, p := range pubs {
		env := p.Envelope
		if env.ID != "" {
			ids = append(ids, env.ID)
			if seen[env.ID] {
				continue
			}
			seen[env.ID] = true
		}
		owned, err := b.ids.reserve(ctx, env.ID)
		if err != nil {
			undo()
			return nil, nil, nil, err
		}
		if !owned {
			continue // held already: a repeat publish is dropped
		}
		if env.ID != "" {
			reserved = append(reserved, env.ID)
		}
		applies = append(applies, b.stage(batch, queues[i], env, p.Delay, false))
		b.stageRecord(batch, env, p.Delay, false)
	}
	apply = func() {
		for _, id := range reserved {
			b.ids.settle(id, true)
		}
		for _, f := range applies {
			f()
		}
	}
	return apply, undo, ids, nil
}

// stage adds env to batch as a ready or delayed job of q and returns what to do to the
// in-memory index once the batch is committed.
func (b *Backend) stage(batch *pebbledb.Batch, q *queue, env backend.Envelope, delay time.Duration, deferred bool) func() {
	seq := b.seq.Add(1)
	value := encodeEnvelope(make([]byte, 0, 64+len(env.Payload)), env)
	priority := uint8(min(int(env.Priority), q.Levels()))
	delay = backend.RoundUp(delay, b.granularity)
	if delay <= 0 {
		batch.Set(readyKey(q.name, priority, seq), value, nil)
		it := &item{seq: seq, priority: priority, id: env.ID}
		return func() { q.Push(it) }
	}
	due := time.Now().Add(delay)
	key := delayedKey(due, seq, deferred, priority, q.name)
	batch.Set(key, value, nil)
	dl := &delayed{due: due, key: key, q: q, id: env.ID, priority: priority, deferred: deferred}
	return func() { b.delays.add(dl) }
}

// errStillWriting is wrapped by commit's error when ctx ended while the write was in
// flight: it may still land.
var errStillWriting = errors.New("the write may still complete")

// commit commits batch and then runs apply, or onFail when the commit fails. When ctx
// ends first, commit returns ctx's error at once and the commit finishes on its own
// (apply or onFail still run): a deadline is kept whatever the disk does, and the
// in-memory index always follows what is on disk.
func (b *Backend) commit(ctx context.Context, batch *pebbledb.Batch, opts *pebbledb.WriteOptions, op, queue string, apply, onFail func()) error {
	run := func() error {
		if b.beforeCommit != nil {
			b.beforeCommit(op)
		}
		err := b.apply(batch, opts)
		batch.Close()
		if err != nil {
			if onFail != nil {
				onFail()
			}
			return &backend.TransportError{Op: op, Queue: queue, Err: err}
		}
		if apply != nil {
			apply()
		}
		return nil
	}
	if ctx.Done() == nil {
		return run()
	}
	if err := ctx.Err(); err != nil {
		batch.Close()
		if onFail != nil {
			onFail()
		}
		return err
	}
	b.ops.Add(1) // the caller is inside an operation, so the count is above zero
	done := make(chan error, 1)
	go func() {
		defer b.ops.Done()
		done <- run()
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("%s to %q: %w: %w", op, queue, errStillWriting, ctx.Err())
	}
}

// apply commits batch, turning Pebble's fatal report of a failed commit into
// ErrStoreFailed: after it every operation fails until the directory is reopened.
func (b *Backend) apply(batch *pebbledb.Batch, opts *pebbledb.WriteOptions) (err error) {
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(fatalError)
			if !ok {
				panic(r)
			}
			err = b.fail(fmt.Errorf("%w: %s: %s", ErrStoreFailed, b.dir, f.msg))
		}
	}()
	return batch.Commit(opts)
}

// fail marks the store failed with err (the first error wins, and is returned): every
// later operation fails with it and every stream ends with it, so that no job is handed
// out whose settle cannot be written. The process must reopen the directory (restart)
// to continue: a Pebble that reported a fatal error is not closed cleanly.
func (b *Backend) fail(err error) error {
	b.failed.CompareAndSwap(nil, &err)
	b.failOnce.Do(func() { close(b.failCh) })
	return *b.failed.Load()
}

// failure returns the error that broke the store, or nil.
func (b *Backend) failure() error {
	if p := b.failed.Load(); p != nil {
		return *p
	}
	return nil
}

// Consume starts a stream of the declared queue qc.Name with prefetch qc.Prefetch.
func (b *Backend) Consume(ctx context.Context, qc backend.QueueConfig) (backend.Stream, error) {
	qc = qc.Normalize(b.log)
	q, err := b.queues.Lookup(qc.Name)
	if err != nil {
		return nil, err
	}
	if err := b.failure(); err != nil {
		return nil, err
	}
	s, err := q.Consume(ctx, stream.Options[*item]{
		Prefetch: qc.Prefetch,
		Deliver:  func(c *stream.Claim[*item]) (backend.Delivery, error) { return b.deliver(q, c) },
		Group:    &b.streams,
		Closed:   b.done,
		Failed:   b.failCh,
		Failure:  b.failure,
		Order:    bySeq,
		Released: func(it *item) { b.ids.unclaim(it.id) },
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Close ends every stream (their unsettled deliveries stay on disk, to be delivered
// again after the next Open), waits for writes in progress, closes the store and
// releases the directory. It waits for ctx at most; the store is then closed once the
// last write finishes. Close is idempotent: a later call waits, under its own ctx, for
// the store to be closed and returns the same result.
func (b *Backend) Close(ctx context.Context) error {
	b.queues.Lock()
	first := b.queues.CloseLocked()
	if first {
		close(b.done)
		b.streams.Close()
		b.cancel()
	}
	b.queues.Unlock()
	if first {
		b.delays.stop()
		b.space.stop()
	}
	if first {
		go func() {
			_ = b.streams.Wait(context.Background()) // no deadline: only its own end
			b.ops.Wait()
			b.closeErr = b.closeStore()
			close(b.storeClosed)
		}()
	}
	// Every call, the first or a later one, waits for the store to be closed (under its
	// own ctx) and returns the result of closing it.
	select {
	case <-b.storeClosed:
		return b.closeErr
	case <-ctx.Done():
		return fmt.Errorf("pebble backend close %s: waiting for streams and writes: %w", b.dir, ctx.Err())
	}
}

// flushOnCloseOver is the memtable size above which Close flushes it.
const flushOnCloseOver = 1 << 20

func (b *Backend) closeStore() (err error) {
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(fatalError)
			if !ok {
				panic(r)
			}
			err = fmt.Errorf("%w: %s: %s", ErrStoreFailed, b.dir, f.msg)
		}
		if lerr := b.lock.Close(); lerr != nil && err == nil {
			err = fmt.Errorf("pebble backend: releasing the lock of %s: %w", b.dir, lerr)
		}
	}()
	if err := b.failure(); err != nil {
		// Pebble reported a fatal error: closing it may meet the same failure again
		// (or wait on a log writer that is gone). Only the lock is released; what
		// was committed is on disk, and the next Open recovers from the log.
		b.log.Error("not closing a failed store: restart the process to reopen it", "dir", b.dir, "error", err)
		return err
	}
	if b.db.Metrics().MemTable.Size > flushOnCloseOver {
		// Flushing a large memtable makes the next Open read tables instead of
		// replaying the log: a clean stop restarts faster (a million jobs waiting:
		// 3.1 s to 1.8-1.9 s here). A small one replays in no time and is left alone,
		// which also keeps tests in synctest bubbles clear of Pebble's flush pools.
		if err := b.db.Flush(); err != nil {
			b.log.Warn("flushing the store before closing", "dir", b.dir, "error", err)
		}
	}
	if err := b.db.Close(); err != nil {
		return fmt.Errorf("pebble backend: closing %s: %w", b.dir, err)
	}
	return nil
}

// fatalError is what pebbleLogger.Fatalf panics with: Pebble calls Fatalf when it cannot
// go on (a failed commit, a checksum mismatch it has no listener for). Where the
// backend called into Pebble it recovers it as an error; anywhere else it ends the
// process, as Pebble's own Fatalf would.
type fatalError struct{ msg string }

// pebbleLogger sends Pebble's messages to slog.
type pebbleLogger struct{ log *slog.Logger }

func (l pebbleLogger) Infof(format string, args ...any) {
	l.log.Debug("pebble: " + fmt.Sprintf(format, args...))
}

func (l pebbleLogger) Errorf(format string, args ...any) {
	l.log.Error("pebble: " + fmt.Sprintf(format, args...))
}

func (l pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	l.log.Error("pebble: fatal: " + msg)
	panic(fatalError{msg: msg})
}

// idSet knows the ids of the jobs the backend holds (waiting, delayed, handed out), to
// drop a repeat publish. An id maps to nil once committed, to an open channel while its
// publish is in flight.
type idSet struct {
	mu     sync.Mutex
	m      map[string]chan struct{}
	claims map[string]int // ids of jobs handed out and not settled
}

func (s *idSet) claim(id string) {
	s.mu.Lock()
	s.claims[id]++
	s.mu.Unlock()
}

func (s *idSet) unclaim(id string) {
	s.mu.Lock()
	if s.claims[id]--; s.claims[id] <= 0 {
		delete(s.claims, id)
	}
	s.mu.Unlock()
}

func (s *idSet) claimed(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.claims[id] > 0
}

// reserve makes the caller the publisher of id, or reports false when the backend holds
// it already. It waits while another publish of id is in flight. The empty id is never
// held.
func (s *idSet) reserve(ctx context.Context, id string) (bool, error) {
	if id == "" {
		return true, nil
	}
	for {
		s.mu.Lock()
		ch, ok := s.m[id]
		if !ok {
			s.m[id] = make(chan struct{})
			s.mu.Unlock()
			return true, nil
		}
		s.mu.Unlock()
		if ch == nil {
			return false, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
}

// tryReserve is reserve without the wait. When it does not reserve id, held says why:
// true when the backend holds id (a live job's), false when another reservation of id
// is under way (a publish, replay or delete in flight, which may still write nothing).
// The caller that got ok ends the reservation with settle. The empty id is never
// reserved, and reads as held: no job is stored under it.
func (s *idSet) tryReserve(id string) (ok, held bool) {
	if id == "" {
		return false, true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if ch, found := s.m[id]; found {
		return false, ch == nil
	}
	s.m[id] = make(chan struct{})
	return true, false
}

// settle ends a reservation: id is held when committed, else free again.
func (s *idSet) settle(id string, committed bool) {
	if id == "" {
		return
	}
	s.mu.Lock()
	ch := s.m[id]
	if committed {
		s.m[id] = nil
	} else {
		delete(s.m, id)
	}
	s.mu.Unlock()
	if ch != nil {
		close(ch)
	}
}

// add marks id held (a job found at Open).
func (s *idSet) add(id string) {
	if id == "" {
		return
	}
	s.mu.Lock()
	s.m[id] = nil
	s.mu.Unlock()
}

// remove forgets id: its job left the backend.
func (s *idSet) remove(id string) {
	if id == "" {
		return
	}
	s.mu.Lock()
	if ch, ok := s.m[id]; ok && ch == nil {
		delete(s.m, id)
	}
	s.mu.Unlock()
}

// Checkpoint writes a consistent copy of the store into dir, which must not exist,
// while the backend runs: for `wasmjobs backup`. Tables are hard-linked where the
// filesystem allows it, so the copy is cheap; the log is flushed first, so the copy
// holds every job whose publish returned before the call. To restore, stop the host
// and use the copy as its data directory.
func (b *Backend) Checkpoint(ctx context.Context, dir string) error {
	if err := b.enter(); err != nil {
		return err
	}
	defer b.ops.Done()
	if err := ctx.Err(); err != nil {
		return err
	}
	if _, err := b.fs.Stat(dir); err == nil {
		return fmt.Errorf("pebble backend: checkpoint of %s into %s: the target exists", b.dir, dir)
	}
	if err := b.db.Checkpoint(dir, pebbledb.WithFlushedWAL()); err != nil {
		return fmt.Errorf("pebble backend: checkpoint of %s into %s: %w", b.dir, dir, err)
	}
	return nil
}
