package pebble_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	pebbledb "github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/internal/rig"
	pebblebackend "github.com/wasmjobs/wasmjobs/backend/pebble"
)

func fileExists(fs vfs.FS, path string) bool {
	_, err := fs.Stat(path)
	return err == nil
}

// Under the free-space reserve publishes fail with ErrDiskFull naming the directory;
// settles go on, accepted jobs stay, and publishes work again once space is back.
func TestDiskFullRefusesPublishesAndRecovers(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		fs := vfs.NewMem()
		plenty := vfs.DiskUsage{AvailBytes: 10 << 30, TotalBytes: 20 << 30}
		fs.TestingSetDiskUsage(plenty)
		b := open(t, pebblebackend.Config{Dir: "/data", FS: fs, FreeSpaceReserve: 1 << 30})
		defer rig.Close(t, b)
		if !fileExists(fs, "/data/BALLAST") {
			t.Fatal("no ballast file made")
		}
		q := backend.QueueConfig{Name: "jobs"}
		rig.Must(t, b.Declare(ctx, q))
		kept := backend.NewEnvelope("jobs", []byte("kept"))
		rig.Must(t, b.Publish(ctx, kept, 0))

		fs.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 100 << 20, TotalBytes: 20 << 30})
		time.Sleep(time.Second)
		err := b.Publish(ctx, backend.NewEnvelope("jobs", []byte("refused")), 0)
		if !errors.Is(err, pebblebackend.ErrDiskFull) || !strings.Contains(err.Error(), "/data") {
			t.Fatalf("Publish under the reserve = %v, want ErrDiskFull naming /data", err)
		}
		err = b.PublishBatch(ctx, []backend.Publication{{Envelope: backend.NewEnvelope("jobs", nil)}})
		if !errors.Is(err, pebblebackend.ErrDiskFull) {
			t.Fatalf("PublishBatch under the reserve = %v, want ErrDiskFull", err)
		}
		s, err := b.Consume(ctx, q)
		rig.Must(t, err)
		d := <-s.Deliveries()
		env, _ := d.Envelope()
		if env.ID != kept.ID {
			t.Fatalf("delivered %s, want the job accepted before the disk filled", env.ID)
		}
		rig.Must(t, d.Ack(ctx)) // settles go on

		fs.TestingSetDiskUsage(plenty)
		time.Sleep(time.Second)
		rig.Must(t, b.Publish(ctx, backend.NewEnvelope("jobs", []byte("again")), 0))
		d = <-s.Deliveries()
		rig.Must(t, d.Ack(ctx))
		s.Drop()
	})
}

// An ENOSPC injected into the write-ahead log makes Pebble's commit fatal: the backend
// turns it into ErrStoreFailed, the ballast is released, and a reopened store holds
// every job whose publish returned.
func TestENOSPCInTheLogKeepsEveryReturnedPublish(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	base := vfs.NewCrashableMem()
	full := &errorfs.Toggle{Injector: errorfs.InjectorFunc(func(op errorfs.Op) error {
		if strings.HasSuffix(op.Path, ".log") && op.Kind.ReadOrWrite() == errorfs.OpIsWrite {
			return syscall.ENOSPC
		}
		return nil
	})}
	b := open(t, pebblebackend.Config{Dir: "/data", FS: errorfs.Wrap(base, full)})
	rig.Must(t, b.Declare(ctx, backend.QueueConfig{Name: "jobs"}))
	var mu sync.Mutex
	var returned []string
	var wg sync.WaitGroup
	failures := make(chan error, 8)
	for p := range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
				if p == 0 && i == 200 {
					full.On()
				}
				env := backend.NewEnvelope("jobs", []byte("x"))
				if err := b.Publish(ctx, env, 0); err != nil {
					failures <- err
					return
				}
				mu.Lock()
				returned = append(returned, env.ID)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(failures)
	for err := range failures {
		if !errors.Is(err, pebblebackend.ErrStoreFailed) && !strings.Contains(err.Error(), "no space") {
			t.Errorf("Publish on a full disk: %v, want ErrStoreFailed", err)
		}
	}
	if fileExists(base, "/data/BALLAST") {
		t.Error("the ballast is still there after a write met a full disk")
	}
	if err := b.Publish(ctx, backend.NewEnvelope("jobs", nil), 0); !errors.Is(err, pebblebackend.ErrStoreFailed) {
		t.Errorf("Publish after the failure = %v, want ErrStoreFailed", err)
	}
	// The process would stop here: take the disk as it is, synced data only.
	crashed := base.CrashClone(vfs.CrashCloneCfg{})
	b2 := open(t, pebblebackend.Config{Dir: "/data", FS: crashed})
	defer rig.Close(t, b2)
	for _, id := range returned {
		if _, err := b2.JobRecord(ctx, id); err != nil {
			t.Errorf("job %s: publish returned, gone after reopening: %v", id, err)
		}
	}
	st, err := b2.QueueStats(ctx, "jobs")
	rig.Must(t, err)
	if st.Pending < len(returned) {
		t.Errorf("%d jobs waiting after reopening, want at least the %d whose publish returned", st.Pending, len(returned))
	}
	t.Logf("%d publishes returned before the disk filled; %d jobs found", len(returned), st.Pending)
}

// Whichever write of the log meets the full disk first releases the ballast: the log's
// data or its sync. Pebble's OnDiskFull wrapper calls back on a failed Write or Sync
// but not on a failed SyncData, which is how Pebble syncs its log; when the injected
// ENOSPC met a sync first the ballast stayed (one run in four of the test above).
func TestENOSPCReleasesTheBallast(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		kind errorfs.OpKind
	}{
		{"log write", errorfs.OpFileWrite},
		{"log sync", errorfs.OpFileSyncData},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			base := vfs.NewMem()
			full := &errorfs.Toggle{Injector: errorfs.InjectorFunc(func(op errorfs.Op) error {
				if strings.HasSuffix(op.Path, ".log") && op.Kind == tc.kind {
					return syscall.ENOSPC
				}
				return nil
			})}
			b := open(t, pebblebackend.Config{Dir: "/data", FS: errorfs.Wrap(base, full)})
			rig.Must(t, b.Declare(ctx, backend.QueueConfig{Name: "jobs"}))
			if !fileExists(base, "/data/BALLAST") {
				t.Fatal("no ballast file made")
			}
			full.On()
			if err := b.Publish(ctx, backend.NewEnvelope("jobs", nil), 0); !errors.Is(err, pebblebackend.ErrStoreFailed) {
				t.Errorf("Publish on a full disk = %v, want ErrStoreFailed", err)
			}
			if fileExists(base, "/data/BALLAST") {
				t.Errorf("the ballast is still there after a %s met a full disk", tc.name)
			}
			if err := b.Close(ctx); !errors.Is(err, pebblebackend.ErrStoreFailed) {
				t.Errorf("Close of the failed store = %v, want ErrStoreFailed", err)
			}
		})
	}
}

// fillStore publishes n jobs into a new store in dir, flushes them into sstables and
// returns their ids.
func fillStore(t *testing.T, dir string, n int) []string {
	t.Helper()
	ctx := context.Background()
	b := open(t, pebblebackend.Config{Dir: dir})
	rig.Must(t, b.Declare(ctx, backend.QueueConfig{Name: "jobs"}))
	var ids []string
	for i := range n {
		env := backend.NewEnvelope("jobs", []byte(strings.Repeat("payload ", 20)+string(rune('a'+i%26))))
		rig.Must(t, b.Publish(ctx, env, 0))
		ids = append(ids, env.ID)
	}
	rig.Close(t, b)
	db, err := pebbledb.Open(dir, &pebbledb.Options{})
	rig.Must(t, err)
	rig.Must(t, db.Flush())
	rig.Must(t, db.Close())
	return ids
}

// A flipped byte in an sstable of a closed store makes Open fail with ErrCorrupt
// naming the file: never an empty queue that silently replaces the real one.
func TestDamagedTableRefusesToOpen(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "data")
	fillStore(t, dir, 500)
	tables, _ := filepath.Glob(filepath.Join(dir, "*.sst"))
	if len(tables) == 0 {
		t.Fatal("no sstable to damage")
	}
	data, err := os.ReadFile(tables[0])
	rig.Must(t, err)
	for i := 100; i < 110; i++ { // inside the first data block
		data[i] ^= 0xff
	}
	rig.Must(t, os.WriteFile(tables[0], data, 0o644))
	_, err = pebblebackend.Open(context.Background(), pebblebackend.Config{Dir: dir})
	if !errors.Is(err, pebblebackend.ErrCorrupt) || !strings.Contains(err.Error(), filepath.Base(tables[0])) {
		t.Fatalf("Open of a damaged store = %v, want ErrCorrupt naming %s", err, filepath.Base(tables[0]))
	}
	t.Log(err)
}

// A torn tail of the write-ahead log is ordinary crash recovery: Open succeeds and
// every job before the torn record is there.
func TestTornLogTailOpens(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "data")
	b := open(t, pebblebackend.Config{Dir: dir})
	rig.Must(t, b.Declare(ctx, backend.QueueConfig{Name: "jobs"}))
	const n = 50
	for range n {
		rig.Must(t, b.Publish(ctx, backend.NewEnvelope("jobs", []byte("x")), 0))
	}
	rig.Close(t, b)
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	var last string
	var size int64
	for _, l := range logs {
		if fi, err := os.Stat(l); err == nil && fi.Size() > size {
			last, size = l, fi.Size()
		}
	}
	if last == "" {
		t.Fatal("no write-ahead log with data")
	}
	rig.Must(t, os.Truncate(last, size-7)) // cut the last record short
	b = open(t, pebblebackend.Config{Dir: dir})
	defer rig.Close(t, b)
	st, err := b.QueueStats(ctx, "jobs")
	rig.Must(t, err)
	if st.Pending < n-1 {
		t.Fatalf("%d jobs after a torn log tail, want at least %d", st.Pending, n-1)
	}
}

// Checkpoint copies a running store; the copy opens with every job.
func TestCheckpointOfARunningStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	root := t.TempDir()
	b := open(t, pebblebackend.Config{Dir: filepath.Join(root, "data")})
	defer rig.Close(t, b)
	rig.Must(t, b.Declare(ctx, backend.QueueConfig{Name: "jobs"}))
	for range 20 {
		rig.Must(t, b.Publish(ctx, backend.NewEnvelope("jobs", []byte("x")), 0))
	}
	rig.Must(t, b.Publish(ctx, backend.NewEnvelope("jobs", []byte("later")), time.Hour))
	backup := filepath.Join(root, "backup")
	rig.Must(t, b.Checkpoint(ctx, backup))
	if err := b.Checkpoint(ctx, backup); err == nil {
		t.Fatal("a checkpoint into an existing directory succeeded")
	}
	c := open(t, pebblebackend.Config{Dir: backup})
	defer rig.Close(t, c)
	if rec := c.Recovered(); rec.Ready != 20 || rec.Delayed != 1 {
		t.Fatalf("the copy holds %+v, want 20 ready and 1 delayed", rec)
	}
}

// underReserve opens a backend on a memory filesystem of 20 GiB with avail bytes free,
// a reserve of 1 GiB and a ballast of 64 MiB, closed when the test ends: call it inside
// the test's synctest bubble.
func underReserve(t *testing.T, avail uint64) (*vfs.MemFS, *pebblebackend.Backend) {
	t.Helper()
	fs := vfs.NewMem()
	fs.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: avail, TotalBytes: 20 << 30})
	b := open(t, pebblebackend.Config{Dir: "/data", FS: fs, FreeSpaceReserve: 1 << 30, BallastSize: 64 << 20})
	t.Cleanup(func() { rig.Close(t, b) })
	return fs, b
}

// Under the reserve, settles write less: a record keeps no output or logs, and an ack
// with children is refused.
func TestUnderTheReserveSettlesWriteLess(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		fs, b := underReserve(t, 10<<30)
		q := backend.QueueConfig{Name: "jobs"}
		rig.Must(t, b.Declare(ctx, q))
		rig.Must(t, b.Publish(ctx, backend.Envelope{ID: "a", Queue: "jobs"}, 0))
		rig.Must(t, b.Publish(ctx, backend.Envelope{ID: "b", Queue: "jobs"}, 0))
		fs.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 100 << 20, TotalBytes: 20 << 30})
		time.Sleep(time.Second)
		s, err := b.Consume(ctx, q)
		rig.Must(t, err)
		defer s.Drop()
		d := (<-s.Deliveries()).(backend.AtomicDelivery)
		err = d.AckWith(ctx, []backend.Publication{{Envelope: backend.Envelope{ID: "child", Queue: "jobs"}}}, nil)
		if !errors.Is(err, pebblebackend.ErrDiskFull) {
			t.Fatalf("AckWith children under the reserve = %v, want ErrDiskFull", err)
		}
		run := &backend.JobRecord{Output: []byte("big output"), Logs: []string{"a line"}}
		rig.Must(t, d.RetryWith(ctx, backend.Envelope{ID: "a", Queue: "jobs", Attempt: 2}, 0, run))
		rec, err := b.JobRecord(ctx, "a")
		rig.Must(t, err)
		if len(rec.Output) != 0 || len(rec.Logs) != 0 || !rec.OutputTruncated || !rec.LogsTruncated {
			t.Fatalf("record written under the reserve: %+v, want no output or logs, marked truncated", rec)
		}
	})
}

// A ballast not made at Open for want of room (free space between the reserve and the
// reserve plus the ballast, never under the reserve) is made once the space allows it.
func TestBallastIsMadeOnceTheSpaceAllows(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		fs, b := underReserve(t, 1<<30+1<<20)
		rig.Must(t, b.Declare(ctx, backend.QueueConfig{Name: "jobs"}))
		if fileExists(fs, "/data/BALLAST") {
			t.Fatal("ballast made without room for it")
		}
		fs.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 10 << 30, TotalBytes: 20 << 30})
		time.Sleep(time.Second)
		rig.Must(t, b.Publish(ctx, backend.Envelope{ID: "c", Queue: "jobs"}, 0))
		synctest.Wait()
		if !fileExists(fs, "/data/BALLAST") {
			t.Fatal("the ballast was not made once the space allowed it")
		}
	})
}
