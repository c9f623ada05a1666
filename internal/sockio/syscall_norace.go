//go:build !race

package sockio

import (
	"syscall"
	"unsafe"
)

// sysRead and sysWrite are read(2) and write(2) of a non-blocking socket as
// raw system calls: they cannot block, so they need none of the runtime's
// bookkeeping of a system call, which would also wake its monitor thread
// each time an idle process makes one.
func sysRead(fd int, p []byte) (int, syscall.Errno) {
	n, _, errno := syscall.RawSyscall(syscall.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)))
	return int(n), errno
}

func sysWrite(fd int, p []byte) (int, syscall.Errno) {
	n, _, errno := syscall.RawSyscall(syscall.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)))
	return int(n), errno
}
