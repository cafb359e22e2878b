package fleet

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// WriteModule puts a pushed module into dir as NAME.toml and NAME.wasm, each written
// atomically (a temporary file in dir, fsynced, renamed over the old one), the manifest
// first and the wasm last: the registry takes a module when its wasm changes, and by
// then the manifest beside it is the new one (README, "Swapping a module"). A push
// without a manifest removes a stale NAME.toml, as its version has none. Files that
// already hold the pushed bytes are left alone, so a restart does not swap anything.
// It reports whether it changed a file.
func WriteModule(dir, name string, manifest, wasm []byte) (bool, error) {
	if err := CheckName(name); err != nil {
		return false, err
	}
	changed := false
	man := filepath.Join(dir, name+".toml")
	if len(manifest) == 0 {
		if err := os.Remove(man); err == nil {
			changed = true
		} else if !errors.Is(err, fs.ErrNotExist) {
			return false, fmt.Errorf("remove %s: %w", man, err)
		}
	} else {
		c, err := writeAtomic(man, manifest)
		if err != nil {
			return false, err
		}
		changed = changed || c
	}
	c, err := writeAtomic(filepath.Join(dir, name+".wasm"), wasm)
	return changed || c, err
}

// RemoveModule removes NAME.wasm, then NAME.toml, from dir: the wasm first, so that the
// registry never sees the module with its manifest gone. It reports whether it removed
// anything.
func RemoveModule(dir, name string) (bool, error) {
	if err := CheckName(name); err != nil {
		return false, err
	}
	removed := false
	for _, p := range []string{filepath.Join(dir, name+".wasm"), filepath.Join(dir, name+".toml")} {
		if err := os.Remove(p); err == nil {
			removed = true
		} else if !errors.Is(err, fs.ErrNotExist) {
			return removed, fmt.Errorf("remove %s: %w", p, err)
		}
	}
	return removed, nil
}

// writeAtomic replaces path with data unless it holds data already.
func writeAtomic(path string, data []byte) (bool, error) {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return false, nil
	}
	// A dot name: the registry ignores it while it is being written.
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".push-*")
	if err != nil {
		return false, fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp, 0o644)
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return false, fmt.Errorf("write %s: %w", path, err)
	}
	// The rename is durable once the directory is.
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		d.Sync()
		d.Close()
	}
	return true, nil
}
