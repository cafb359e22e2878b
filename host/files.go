package host

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// fingerprint identifies the files' contents cheaply: size, modification time and
// inode of the module and its manifest, links followed.
type fingerprint struct {
	wasm, manifest fileID
}

type fileID struct {
	size  int64
	mtime time.Time
	ino   uint64
	ok    bool
}

func statID(path string) fileID {
	fi, err := os.Stat(path)
	if err != nil {
		return fileID{}
	}
	id := fileID{size: fi.Size(), mtime: fi.ModTime(), ok: true}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		id.ino = st.Ino
	}
	return id
}

// finished tells whether a module's changed files, of fingerprint fp (seen is the
// fingerprint last read), are finished as far as can be told before the debounce runs
// out: the module file is there, the manifest did not go away, and no process has
// either open for writing. A file renamed into place, or written and closed, is
// finished; one still open for writing may be half written; and where the system
// cannot tell (no read leases), nothing is finished before the debounce.
func finished(file string, fp, seen fingerprint) left {
	if !fp.wasm.ok || (seen.manifest.ok && !fp.manifest.ok) {
		return leftUnsure // perhaps gone for good, perhaps in the middle of a replacement
	}
	paths := []string{file}
	if fp.manifest.ok {
		paths = append(paths, ManifestPath(file))
	}
	for _, p := range paths {
		switch writing, known := openForWriting(p); {
		case writing:
			return leftWriting
		case !known:
			return leftUnsure
		}
	}
	return readAll
}

// wholeModule reports whether wasm is a Wasm binary whose sections end exactly at its
// end. A file cut short inside a section is not; a writer that opens and closes the
// file for each piece it appends could otherwise be caught between two pieces.
func wholeModule(wasm []byte) bool {
	if len(wasm) < 8 || string(wasm[:4]) != "\x00asm" {
		return false
	}
	for b := wasm[8:]; len(b) > 0; {
		b = b[1:] // the section's id
		var size uint64
		n := 0
		for shift := 0; ; shift += 7 {
			if n == len(b) || n == 5 { // a u32 takes at most 5 bytes
				return false
			}
			c := b[n]
			n++
			size |= uint64(c&0x7f) << shift
			if c < 0x80 {
				break
			}
		}
		b = b[n:]
		if uint64(len(b)) < size {
			return false
		}
		b = b[size:]
	}
	return true
}

// list returns the module names of the directory: regular files (links followed) named
// NAME.wasm, NAME not starting with a dot.
func (r *Registry) list() ([]string, error) {
	des, err := os.ReadDir(r.cfg.Dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, de := range des {
		n := de.Name()
		if strings.HasPrefix(n, ".") || !strings.HasSuffix(n, ".wasm") || len(n) == len(".wasm") {
			continue
		}
		fi, err := os.Stat(filepath.Join(r.cfg.Dir, n))
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		names = append(names, strings.TrimSuffix(n, ".wasm"))
	}
	return names, nil
}
