package pebble

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// ballastName is the ballast file in the data directory.
const ballastName = "BALLAST"

// spaceCheckEvery bounds how often the free space is read: publishes between two reads
// use the last answer.
const spaceCheckEvery = 250 * time.Millisecond

// spaceGuard keeps the free-space reserve. Pebble treats a failed write of its log as
// fatal, so the store must not reach a full disk: publishes are refused while the free
// space is under the reserve, and a
// ballast file is deleted when a write meets a full disk anyway, so that what was in
// progress can finish. Settles go on under the reserve, but write less: a job record
// keeps no output and no log lines, and an ack with children is refused (ErrDiskFull;
// the worker then fails the job the retry way), since children are new work.
type spaceGuard struct {
	b        *Backend
	fs       vfs.FS // the unwrapped filesystem: the ballast is handled there
	dir      string
	reserve  int64
	ballast  int64
	disabled bool

	mu        sync.Mutex
	checkedAt time.Time
	low       error // ErrDiskFull while under the reserve, else nil
	hitFull   atomic.Bool
	making    atomic.Bool
	// missing is set while the ballast is not there (released, or never made for
	// want of space): check makes it once the space allows it.
	missing atomic.Bool
}

func newSpaceGuard(b *Backend, fs vfs.FS, dir string, reserve, ballast int64) *spaceGuard {
	g := &spaceGuard{b: b, fs: fs, dir: dir, reserve: reserve, ballast: ballast}
	if g.reserve == 0 {
		g.reserve = DefaultFreeSpaceReserve
	}
	if g.ballast == 0 {
		g.ballast = DefaultBallastSize
	}
	g.disabled = g.reserve < 0
	return g
}

// wrap returns fs with the disk-full backstop: on ENOSPC the ballast goes, the write is
// tried once more, and publishes are refused until the space is back.
//
// vfs.OnDiskFull (Pebble v2.1.7) calls back on an ENOSPC from a file's Write, WriteAt
// and Sync but not from SyncData, SyncTo or Preallocate, and Pebble syncs its log
// with SyncData: a full disk met first by a log sync failed the store and left the
// ballast in place. fullSyncFS, under OnDiskFull, releases the ballast on those too
// (without a retry: a sync that failed is not tried again, see OnDiskFull's Sync).
func (g *spaceGuard) wrap(fs vfs.FS) vfs.FS {
	return vfs.OnDiskFull(fullSyncFS{FS: fs, onFull: g.release}, g.release)
}

// release deletes the ballast after a write met a full disk; it is called again by
// every later ENOSPC, and deletes nothing once the ballast is gone.
func (g *spaceGuard) release() {
	g.hitFull.Store(true)
	g.missing.Store(true)
	if err := g.fs.Remove(g.fs.PathJoin(g.dir, ballastName)); err == nil {
		g.b.log.Error("disk full: released the ballast file", "dir", g.dir)
	}
}

// fullSyncFS calls onFull when a file's SyncData, SyncTo or Preallocate fails with
// ENOSPC, the calls vfs.OnDiskFull lets through (see spaceGuard.wrap).
type fullSyncFS struct {
	vfs.FS
	onFull func()
}

func (fs fullSyncFS) file(f vfs.File, err error) (vfs.File, error) {
	if f != nil {
		f = fullSyncFile{File: f, onFull: fs.onFull}
	}
	return f, err
}

func (fs fullSyncFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	return fs.file(fs.FS.Create(name, category))
}

func (fs fullSyncFS) OpenReadWrite(name string, category vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	return fs.file(fs.FS.OpenReadWrite(name, category, opts...))
}

func (fs fullSyncFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	return fs.file(fs.FS.ReuseForWrite(oldname, newname, category))
}

// Unwrap returns the wrapped FS (the embedded one's Unwrap would skip a layer).
func (fs fullSyncFS) Unwrap() vfs.FS { return fs.FS }

type fullSyncFile struct {
	vfs.File
	onFull func()
}

func (f fullSyncFile) full(err error) error {
	if errors.Is(err, syscall.ENOSPC) {
		f.onFull()
	}
	return err
}

func (f fullSyncFile) SyncData() error { return f.full(f.File.SyncData()) }

func (f fullSyncFile) SyncTo(length int64) (bool, error) {
	fullSync, err := f.File.SyncTo(length)
	return fullSync, f.full(err)
}

func (f fullSyncFile) Preallocate(offset, length int64) error {
	return f.full(f.File.Preallocate(offset, length))
}

// start makes the ballast if there is room for it.
func (g *spaceGuard) start() { g.makeBallast() }

func (g *spaceGuard) stop() {}

// check returns ErrDiskFull, naming the directory, while the free space is under the
// reserve or after a write met a full disk.
func (g *spaceGuard) check() error {
	if g.disabled {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	now := time.Now()
	if !g.checkedAt.IsZero() && now.Sub(g.checkedAt) < spaceCheckEvery && !g.hitFull.Load() {
		return g.low
	}
	g.checkedAt = now
	usage, err := g.fs.GetDiskUsage(g.dir)
	if errors.Is(err, vfs.ErrUnsupported) {
		g.low = nil // a filesystem that cannot tell (a memory one): no reserve
		return nil
	}
	if err != nil {
		g.b.log.Warn("reading free disk space", "dir", g.dir, "error", err)
		return g.low // keep the last answer
	}
	was := g.low
	if int64(usage.AvailBytes) < g.reserve {
		g.low = fmt.Errorf("pebble backend: %w in %s: %s free, under the reserve of %s; free some space (jobs already accepted are kept)",
			ErrDiskFull, g.dir, bytesString(usage.AvailBytes), bytesString(uint64(g.reserve)))
		if was == nil {
			g.b.log.Error("disk almost full: refusing new jobs", "dir", g.dir, "free", usage.AvailBytes, "reserve", g.reserve)
		}
		return g.low
	}
	g.low = nil
	if g.hitFull.Swap(false) || was != nil {
		g.b.log.Info("disk space back above the reserve: accepting jobs again", "dir", g.dir, "free", usage.AvailBytes)
	}
	if g.missing.Load() && int64(usage.AvailBytes) >= g.reserve+g.ballast && g.b.enter() == nil {
		go func() { // counted in ops: Close waits for it
			defer g.b.ops.Done()
			g.makeBallast()
		}()
	}
	return nil
}

// makeBallast creates the ballast file when it is missing and the space allows it.
// It preallocates rather than writes, so it costs no I/O.
func (g *spaceGuard) makeBallast() {
	if g.ballast <= 0 || g.disabled || !g.making.CompareAndSwap(false, true) {
		return
	}
	defer g.making.Store(false)
	path := g.fs.PathJoin(g.dir, ballastName)
	if _, err := g.fs.Stat(path); err == nil {
		return
	}
	if usage, err := g.fs.GetDiskUsage(g.dir); err == nil && int64(usage.AvailBytes) < g.reserve+g.ballast {
		g.missing.Store(true)
		return
	}
	g.missing.Store(false)
	f, err := g.fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		g.b.log.Warn("creating the ballast file", "path", path, "error", err)
		return
	}
	err = f.Preallocate(0, g.ballast)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		g.b.log.Warn("creating the ballast file", "path", path, "error", err)
		g.fs.Remove(path)
	}
}

func bytesString(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
