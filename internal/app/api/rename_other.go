//go:build !linux

package api

import (
	"os"
	"path"
)

// renameNoReplace moves dir/name to newname, all inside root, and fails with an error
// that is fs.ErrExist when newname is a directory. Without renameat2 this is
// os.Root.Rename, which checks for a directory in its way and then renames: one made
// by another process in between those two steps is replaced.
func renameNoReplace(root *os.Root, dir, name, newname string) error {
	return root.Rename(path.Join(dir, name), newname)
}
