package pebble

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	pebbledb "github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/internal/stream"
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
		records:     normalizeRecords(cfg.Records),
		declaring:   make(map[string]*declaration),
		done:        make(chan struct{}),
		failCh:      make(chan struct{}),
		storeClosed: make(chan struct{}),
	}
	b.closing, b.cancel = context.WithCancel(context.Background())
	b.streams = stream.Streams[*item]{
		Closed:   b.done,
		Failed:   b.failCh,
		Failure:  b.failure,
		Order:    bySeq,
		Released: func(it *item) { b.ids.unclaim(it.id) },
	}
	b.ids.m = make(map[string]chan struct{})
	b.ids.claims = make(map[string]int)
	b.uniq.init()
	b.waits.init()
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
		FS:           b.space.wrap(fs),
		Lock:         lock,
		Cache:        cache,
		MemTableSize: uint64(cmp.Or(max(cfg.MemTableSize, 0), DefaultMemTableSize)),
		Logger:       pebbleLogger{log},
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
	b.release(b.released...)
	b.released = nil
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
		b.waits.stopTimers()
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
