//go:build linux

package api

import (
	"errors"
	"os"
	"path"

	"golang.org/x/sys/unix"
)

// renameNoReplace moves dir/name to newname, all inside root, and fails with an error
// that is fs.ErrExist when newname exists, even if another process made it a moment
// ago: renameat2 with RENAME_NOREPLACE checks and renames in one step, in the kernel.
// (os.Root.Rename checks for a directory in its way and then renames, two steps: one
// made in between is replaced.) Both names are resolved from directories opened
// through root, each one element: nothing is followed out of it. Where renameat2
// cannot do it, on a filesystem without RENAME_NOREPLACE (EINVAL) or a kernel without
// renameat2 (ENOSYS, before Linux 3.15), it falls back to os.Root.Rename and its two
// steps.
func renameNoReplace(root *os.Root, dir, name, newname string) error {
	return renameNoReplaceWith(unix.Renameat2, root, dir, name, newname)
}

// renameNoReplaceWith is renameNoReplace with renameat2 given: a test's stands for a
// kernel or filesystem that lacks it.
func renameNoReplaceWith(renameat2 func(olddirfd int, oldpath string, newdirfd int, newpath string, flags uint) error,
	root *os.Root, dir, name, newname string) error {
	from, err := root.Open(dir)
	if err != nil {
		return err
	}
	defer from.Close()
	to, err := root.Open(".")
	if err != nil {
		return err
	}
	defer to.Close()
	fromConn, err := from.SyscallConn()
	if err != nil {
		return err
	}
	toConn, err := to.SyscallConn()
	if err != nil {
		return err
	}
	var renameErr, innerErr error
	ctlErr := fromConn.Control(func(fromFd uintptr) {
		innerErr = toConn.Control(func(toFd uintptr) {
			renameErr = renameat2(int(fromFd), name, int(toFd), newname, unix.RENAME_NOREPLACE)
		})
	})
	ctlErr = errors.Join(ctlErr, innerErr)
	switch {
	case ctlErr != nil:
		return ctlErr
	case errors.Is(renameErr, unix.EINVAL), errors.Is(renameErr, unix.ENOSYS):
		return root.Rename(path.Join(dir, name), newname)
	case renameErr != nil:
		return &os.LinkError{Op: "renameat2", Old: path.Join(dir, name), New: newname, Err: renameErr}
	}
	return nil
}
