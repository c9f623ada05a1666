//go:build race

package sockio

import (
	"errors"
	"syscall"
)

// Under the race detector, sysRead and sysWrite are the syscall package's
// calls, which tell it that a write to a socket happens before the read
// that gets its bytes, as net.Conn's do: tests that hand a value to a
// server and then send it a message rely on that.
func sysRead(fd int, p []byte) (int, syscall.Errno) {
	n, err := syscall.Read(fd, p)
	return max(n, 0), errnoOf(err)
}

func sysWrite(fd int, p []byte) (int, syscall.Errno) {
	n, err := syscall.Write(fd, p)
	return max(n, 0), errnoOf(err)
}

func errnoOf(err error) syscall.Errno {
	var errno syscall.Errno
	if err != nil && !errors.As(err, &errno) {
		return syscall.EIO
	}
	return errno
}
