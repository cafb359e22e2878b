package host

import (
	"context"
	"slices"
	"time"

	"github.com/fsnotify/fsnotify"
)

// How soon the registry looks at a change before its debounce runs out.
const (
	// settleDelay is the least time between two looks at the directory before the
	// debounce: the first event after a quiet spell is looked at at once, and the
	// events that follow it closely (the writes of a file, many files changed
	// together) are looked at together, so that a stream of events costs at most a
	// read of the directory's names and fingerprints each settleDelay.
	settleDelay = time.Millisecond
	// writingPoll is how often it looks again at a module file still open for
	// writing, until its writer closes it or the debounce runs out: no event says
	// that a writer closed a file (fsnotify does not expose inotify's CLOSE_WRITE).
	writingPoll = 5 * time.Millisecond
	// canarySaveEvery is how long after a canary under way changed (a job counted, or
	// a tick of trialSaveEvery: the time it ran grows) its state is saved in its
	// history: a kill of the host loses the counts of that last stretch at most (a
	// drain saves them all, at Retire), and a busy canary costs a durable write each
	// canarySaveEvery, not one a job.
	canarySaveEvery = 250 * time.Millisecond
)

// follow reads the directory when its watcher reports a change: at once for the
// modules whose files are finished, after the debounce for the rest; and at every
// rescan.
func (r *Registry) follow() {
	defer close(r.done)
	var events <-chan fsnotify.Event
	var errs <-chan error
	if r.watcher != nil {
		events, errs = r.watcher.Events, r.watcher.Errors
	}
	rescan := time.NewTicker(r.cfg.Rescan)
	defer rescan.Stop()
	debounce := time.NewTimer(time.Hour)
	debounce.Stop()
	// settle reads what is finished before the debounce runs out: armed by an event
	// that came less than settleDelay after the last such read, and again while a
	// module file is open for writing.
	settle := time.NewTimer(time.Hour)
	settle.Stop()
	settleArmed := false
	var lastSettle time.Time // when the last read before the debounce began
	var burst time.Time      // when the first event of the changes not read yet came
	// save saves the canaries' state canarySaveEvery after one changed.
	save := time.NewTimer(time.Hour)
	save.Stop()
	saveArmed := false
	settled := func() {
		lastSettle = time.Now()
		switch r.read(r.ctx, burst, true) {
		case readAll:
			debounce.Stop() // nothing left for it to read
			burst = time.Time{}
		case leftWriting:
			settle.Reset(writingPoll)
			settleArmed = true
		case leftUnsure: // the debounce reads it
		}
	}
	for {
		select {
		case <-r.ctx.Done():
			debounce.Stop()
			settle.Stop()
			save.Stop()
			return
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			if ev.Op != fsnotify.Chmod {
				if burst.IsZero() {
					burst = time.Now()
				}
				debounce.Reset(r.cfg.Debounce)
				switch wait := settleDelay - time.Since(lastSettle); {
				case settleArmed:
				case wait <= 0:
					settled()
				default:
					settle.Reset(wait)
					settleArmed = true
				}
			}
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			// An overflow loses events: the next read of the directory catches up.
			r.log.Warn("watching the modules directory", "dir", r.cfg.Dir, "error", err)
			debounce.Reset(r.cfg.Debounce)
		case <-settle.C:
			settleArmed = false
			settled()
		case <-debounce.C:
			settle.Stop()
			settleArmed = false
			r.sync(r.ctx, burst)
			burst = time.Time{}
		case <-rescan.C:
			r.Sync(r.ctx)
		case <-r.kick:
			r.Sync(r.ctx)
		case <-r.endc:
			r.recordEnded(r.ctx)
		case <-r.changec:
			if !saveArmed {
				save.Reset(canarySaveEvery)
				saveArmed = true
			}
		case <-save.C:
			saveArmed = false
			r.saveCanaries(r.ctx, true)
		}
	}
}

// Rescan asks the registry to read the directory now, without waiting for Rescan.
func (r *Registry) Rescan() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Sync reads the directory once and brings the modules in line with it.
func (r *Registry) Sync(ctx context.Context) { r.sync(ctx, time.Time{}) }

// sync is Sync after a burst of watcher events, the first of which came at noticed.
func (r *Registry) sync(ctx context.Context, noticed time.Time) { r.read(ctx, noticed, false) }

// left is what a read of the directory left unread, in order: the larger of two is
// what both need.
type left int

const (
	readAll     left = iota // every change was read (or there was none)
	leftUnsure              // a change that may be unfinished: the debounce reads it
	leftWriting             // a module file open for writing: look again soon
)

// read reads the directory and brings the modules in line with it, after a burst of
// watcher events the first of which came at noticed. A quick read, before the debounce
// ran out, reads only the modules whose changed files are finished (see finished) and
// removes nothing; it says what it left.
func (r *Registry) read(ctx context.Context, noticed time.Time, quick bool) left {
	if err := r.lockSync(ctx); err != nil {
		return leftUnsure
	}
	defer r.unlockSync()
	r.noticed = noticed
	names, err := r.list()
	if err != nil {
		r.log.Error("reading the modules directory", "dir", r.cfg.Dir, "error", err)
		return leftUnsure
	}
	if !quick && !r.swept {
		r.endTrialsOfGone(names)
	}
	res := readAll
	for _, name := range names {
		res = max(res, r.syncModule(ctx, name, quick))
	}
	r.mu.Lock()
	var gone []string
	for name := range r.entries {
		if !slices.Contains(names, name) {
			gone = append(gone, name)
		}
	}
	r.mu.Unlock()
	if quick && len(gone) > 0 {
		// A file that is gone may be in the middle of a replacement (an editor renames
		// the old file away, then writes the new one): the debounce decides.
		return max(res, leftUnsure)
	}
	for _, name := range gone {
		r.remove(ctx, name)
	}
	return res
}
