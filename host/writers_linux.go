package host

import (
	"errors"
	"syscall"
)

// openForWriting reports whether any process has the file at path open for writing
// (links followed), so that the registry can tell a file whose writer is done from one
// still being written. Linux grants a read lease (fcntl F_SETLEASE F_RDLCK) only on a
// file that no one has open for writing, so the lease is taken and dropped at once.
// known is false when the kernel cannot tell: a file system without leases, or a file
// owned by another user while the process lacks CAP_LEASE.
//
// The file is opened with O_NONBLOCK so that the open does not wait on another
// process's write lease. A writer opening the file in the microseconds the lease is
// held waits until it is dropped (the kernel signals SIGIO to this process, which the Go
// runtime ignores).
func openForWriting(path string) (writing, known bool) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return false, false
	}
	defer syscall.Close(fd) // drops the lease
	_, _, errno := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_SETLEASE, syscall.F_RDLCK)
	switch {
	case errno == 0:
		return false, true
	case errors.Is(errno, syscall.EAGAIN):
		return true, true
	default:
		return false, false
	}
}
