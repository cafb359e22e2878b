//go:build linux

package api

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// Where renameat2 or its RENAME_NOREPLACE is missing (EINVAL from a filesystem
// without the flag, ENOSYS from a kernel before 3.15), renameNoReplace falls back to
// os.Root.Rename and the backup is moved into place; a directory of the name found
// there is still refused as fs.ErrExist.
func TestRenameNoReplaceFallsBackWithoutRenameat2(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		errno error // renameat2's answer; nil: the real one
		taken bool  // the new name is a directory already
		want  error
	}{
		{name: "renameat2", want: nil},
		{name: "renameat2, taken", taken: true, want: fs.ErrExist},
		{name: "no RENAME_NOREPLACE (EINVAL)", errno: unix.EINVAL, want: nil},
		{name: "no RENAME_NOREPLACE (EINVAL), taken", errno: unix.EINVAL, taken: true, want: fs.ErrExist},
		{name: "no renameat2 (ENOSYS)", errno: unix.ENOSYS, want: nil},
		{name: "no renameat2 (ENOSYS), taken", errno: unix.ENOSYS, taken: true, want: fs.ErrExist},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			if err := os.MkdirAll(filepath.Join(dir, "tmp", "data"), 0o700); err != nil {
				t.Fatal(err)
			}
			if c.taken {
				if err := os.Mkdir(filepath.Join(dir, "nightly"), 0o700); err != nil {
					t.Fatal(err)
				}
			}
			root, err := os.OpenRoot(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer root.Close()
			renameat2 := unix.Renameat2
			if c.errno != nil {
				renameat2 = func(int, string, int, string, uint) error { return c.errno }
			}
			err = renameNoReplaceWith(renameat2, root, "tmp", "data", "nightly")
			if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
				t.Fatalf("renameNoReplace: %v, want %v", err, c.want)
			}
			if _, err := os.Stat(filepath.Join(dir, "tmp", "data")); c.want == nil && !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("tmp/data after the rename: %v, want it moved", err)
			}
		})
	}
}
