package host

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// Sentinel errors of the registry's rollout operations.
var (
	// ErrUnknownModule: no module of that name is in the directory.
	ErrUnknownModule = errors.New("no such module")
	// ErrNoCanary: the module has no canary under way to promote.
	ErrNoCanary = errors.New("no canary under way")
	// ErrUnknownVersion: the history holds no such version of the module.
	ErrUnknownVersion = errors.New("no such version in the module's history")
)

// The states of a version in a module's history.
const (
	HistoryCurrent    = "current"     // serves the queue
	HistoryCanary     = "canary"      // on trial
	HistoryPrevious   = "previous"    // served, then was replaced
	HistoryRolledBack = "rolled_back" // was rolled back
	HistorySuperseded = "superseded"  // a canary replaced by a newer file before it ended
)

// HistoryEntry is one version of a module kept for a rollback.
type HistoryEntry struct {
	Version string    `json:"version"`
	AddedAt time.Time `json:"added_at"`
	// State is one of current, canary, previous, rolled_back, superseded.
	State string `json:"state"`
	// Reason says why the version left service, for a rollback with both rates.
	Reason  string    `json:"reason,omitempty"`
	EndedAt time.Time `json:"ended_at,omitzero"`
	// Pinned marks the version an operator (or an automatic rollback) pinned.
	Pinned bool `json:"pinned,omitempty"`
}

// Pin holds a module on a version other than its files' until the files change: set by
// a rollback (manual or automatic), kept across restarts.
type Pin struct {
	// Version is the version that serves.
	Version string `json:"version"`
	// FileVersion is the version of the module's files when the pin was set; files of
	// another version end the pin and start a canary from Version.
	FileVersion string    `json:"file_version"`
	Reason      string    `json:"reason,omitempty"`
	At          time.Time `json:"at"`
}

// moduleHistory is what the store keeps of one module.
type moduleHistory struct {
	Versions []HistoryEntry `json:"versions"` // oldest first
	Pin      *Pin           `json:"pin,omitempty"`
	// Canary is the canary under way, so that it resumes after a restart.
	Canary *canaryState `json:"canary,omitempty"`
}

// canaryState is a canary under way as the history keeps it: which version is on trial
// against which, since when, for how long, and its counts.
type canaryState struct {
	Version   string    `json:"version"` // on trial
	Current   string    `json:"current"` // serving beside it
	StartedAt time.Time `json:"started_at"`
	// Ran is how long the trial had run when it was saved, across restarts: the time
	// the host is down does not count toward canary_time (no job is seen then).
	Ran           time.Duration `json:"ran"`
	Jobs          int           `json:"jobs"`
	Failed        int           `json:"failed"`
	CurrentJobs   int           `json:"current_jobs"`
	CurrentFailed int           `json:"current_failed"`
}

// historyStore keeps the last versions of each module, bytes and manifest, by content
// hash, in dir/NAME/ (VERSION.wasm, VERSION.toml, history.json); with no dir, in
// memory, for the life of the process.
type historyStore struct {
	dir string
	log *slog.Logger

	mu    sync.Mutex // guards mem and the files of dir
	state map[string]*moduleHistory
	blobs map[string][]byte // "name/version.wasm" -> bytes, when dir is ""
}

func newHistoryStore(dir string, log *slog.Logger) *historyStore {
	return &historyStore{dir: dir, log: log, state: make(map[string]*moduleHistory), blobs: make(map[string][]byte)}
}

// get returns the module's history, read from disk the first time. Called with mu held.
func (s *historyStore) get(name string) *moduleHistory {
	if h := s.state[name]; h != nil {
		return h
	}
	h := &moduleHistory{}
	if !validModuleName(name) {
		return h // never a path outside dir, never cached
	}
	if s.dir != "" {
		path := filepath.Join(s.dir, name, "history.json")
		data, err := os.ReadFile(path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			// Not cached: the next call reads it again, and nothing overwrites it.
			s.log.Error("reading a module's history: its versions and pin are ignored until it reads", "module", name, "file", path, "error", err)
			return h
		default:
			if err := json.Unmarshal(data, h); err != nil {
				// Moved aside, not overwritten by the next save: an operator can look.
				bad := fmt.Sprintf("%s.bad-%d", path, time.Now().UnixNano())
				if rerr := os.Rename(path, bad); rerr != nil {
					s.log.Error("a module's history is corrupt and cannot be moved aside: it is ignored", "module", name, "file", path, "error", err, "rename_error", rerr)
					return &moduleHistory{}
				}
				s.log.Error("a module's history is corrupt: moved aside, starting a new one", "module", name, "file", path, "moved_to", bad, "error", err)
				h = &moduleHistory{}
			}
		}
	}
	s.state[name] = h
	return h
}

// save writes the module's history. Called with mu held.
func (s *historyStore) save(name string, h *moduleHistory) error {
	if s.dir == "" {
		return nil
	}
	data, err := json.MarshalIndent(h, "", "  ")
	if err != nil {
		return err
	}
	return writeAtomic(filepath.Join(s.dir, name, "history.json"), data)
}

// writeAtomic replaces path with data durably: a temp file written and synced, renamed
// over path, and the directory synced, so that a crash leaves the old file or the new
// one, never a short one, and a rename that was reported done survives a power loss.
func writeAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("module history: %w", err)
	}
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("module history: %w", err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("module history: writing %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("module history: %w", err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("module history: %w", err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("module history: syncing %s: %w", dir, err)
	}
	return nil
}

func (s *historyStore) blob(name, file string) string { return filepath.Join(s.dir, name, file) }

// add keeps a version's bytes and manifest (none when manifest is nil) with state, and
// prunes the oldest versions past keep, never the one serving or pinned.
func (s *historyStore) add(name, version string, wasm, manifest []byte, state string, keep int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.get(name)
	if s.dir == "" {
		s.blobs[name+"/"+version+".wasm"] = wasm
		if manifest != nil {
			s.blobs[name+"/"+version+".toml"] = manifest
		}
	} else {
		if err := writeAtomic(s.blob(name, version+".wasm"), wasm); err != nil {
			return err
		}
		if manifest != nil {
			if err := writeAtomic(s.blob(name, version+".toml"), manifest); err != nil {
				return err
			}
		}
	}
	h.Versions = slices.DeleteFunc(h.Versions, func(e HistoryEntry) bool { return e.Version == version })
	h.Versions = append(h.Versions, HistoryEntry{Version: version, AddedAt: time.Now(), State: state})
	for len(h.Versions) > max(keep, 2) {
		i := slices.IndexFunc(h.Versions, func(e HistoryEntry) bool {
			return e.State != HistoryCurrent && e.State != HistoryCanary && (h.Pin == nil || e.Version != h.Pin.Version)
		})
		if i < 0 {
			break
		}
		s.drop(name, h.Versions[i].Version)
		h.Versions = slices.Delete(h.Versions, i, i+1)
	}
	return s.save(name, h)
}

// drop forgets a version's bytes. Called with mu held.
func (s *historyStore) drop(name, version string) {
	for _, ext := range []string{".wasm", ".toml"} {
		if s.dir == "" {
			delete(s.blobs, name+"/"+version+ext)
		} else if err := os.Remove(s.blob(name, version+ext)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			s.log.Warn("removing a version pruned from a module's history", "module", name, "version", version, "error", err)
		}
	}
}

// mark sets a version's state (and the reason it left service, if any); a version that
// becomes current turns the one before it into previous.
func (s *historyStore) mark(name, version, state, reason string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.get(name)
	for i := range h.Versions {
		e := &h.Versions[i]
		switch {
		case e.Version == version:
			e.State, e.Reason = state, reason
			if state != HistoryCurrent && state != HistoryCanary {
				e.EndedAt = time.Now()
			} else {
				e.EndedAt = time.Time{}
			}
		case state == HistoryCurrent && e.State == HistoryCurrent:
			e.State, e.EndedAt = HistoryPrevious, time.Now()
		}
	}
	// The trial is over once its version leaves it, or another version serves: in the
	// same write, so that a restart never resumes a canary that ended.
	if c := h.Canary; c != nil && ((version == c.Version && state != HistoryCanary) || (state == HistoryCurrent && version != c.Current)) {
		h.Canary = nil
	}
	return s.save(name, h)
}

// saveCanary keeps the canary under way c, unless its version is no longer on trial in
// the history (its verdict was recorded since c was taken).
func (s *historyStore) saveCanary(name string, c *canaryState) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.get(name)
	if !slices.ContainsFunc(h.Versions, func(e HistoryEntry) bool { return e.Version == c.Version && e.State == HistoryCanary }) {
		return nil
	}
	h.Canary = copyOf(c)
	return s.save(name, h)
}

// canary returns the canary the module had under way, or nil.
func (s *historyStore) canary(name string) *canaryState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return copyOf(s.get(name).Canary)
}

// modules returns the names of the modules whose history the directory keeps (none in
// memory: nothing is kept across a restart there).
func (s *historyStore) modules() ([]string, error) {
	if s.dir == "" {
		return nil, nil
	}
	des, err := os.ReadDir(s.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("module history: %w", err)
	}
	var names []string
	for _, de := range des {
		if de.IsDir() && validModuleName(de.Name()) {
			names = append(names, de.Name())
		}
	}
	return names, nil
}

// setPin sets (or, with nil, clears) the module's pin.
func (s *historyStore) setPin(name string, p *Pin) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.get(name)
	if h.Pin == nil && p == nil {
		return nil
	}
	h.Pin = p
	return s.save(name, h)
}

// pin returns the module's pin, or nil.
func (s *historyStore) pin(name string) *Pin {
	s.mu.Lock()
	defer s.mu.Unlock()
	return copyOf(s.get(name).Pin)
}

// copyOf returns a copy of *p, or nil: what the store hands out or takes in is never
// shared with the caller, who may change it.
func copyOf[T any](p *T) *T {
	if p == nil {
		return nil
	}
	cp := *p
	return &cp
}

// list returns the module's versions, newest first.
func (s *historyStore) list(name string) []HistoryEntry {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.get(name)
	out := slices.Clone(h.Versions)
	slices.Reverse(out)
	for i := range out {
		out[i].Pinned = h.Pin != nil && out[i].Version == h.Pin.Version
	}
	return out
}

// resolve finds the version named by v, in full or by a prefix of at least 6 hex
// digits that names one version only.
func (s *historyStore) resolve(name, v string) (string, error) {
	var found []string
	for _, e := range s.list(name) {
		if e.Version == v {
			return v, nil
		}
		if len(v) >= 6 && strings.HasPrefix(e.Version, v) {
			found = append(found, e.Version)
		}
	}
	if len(found) == 1 {
		return found[0], nil
	}
	if len(found) > 1 {
		return "", fmt.Errorf("%w: %q names %d versions of %s; give more digits", ErrUnknownVersion, v, len(found), name)
	}
	return "", fmt.Errorf("%w: %s has no version %q", ErrUnknownVersion, name, v)
}

// load returns a kept version's bytes and manifest text (nil when it had none).
func (s *historyStore) load(name, version string) (wasm, manifest []byte, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dir == "" {
		wasm, ok := s.blobs[name+"/"+version+".wasm"]
		if !ok {
			return nil, nil, fmt.Errorf("%w: %s has no version %q kept", ErrUnknownVersion, name, version)
		}
		return wasm, s.blobs[name+"/"+version+".toml"], nil
	}
	wasm, err = os.ReadFile(s.blob(name, version+".wasm"))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil, fmt.Errorf("%w: %s has no version %q kept", ErrUnknownVersion, name, version)
		}
		return nil, nil, fmt.Errorf("module history: %w", err)
	}
	manifest, err = os.ReadFile(s.blob(name, version+".toml"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("module history: %w", err)
	}
	return wasm, manifest, nil
}
