//go:build !linux || !(amd64 || arm64 || riscv64 || loong64 || ppc64le || s390x)

package vfs

import (
	"errors"
	"os"
)

// ringSync never flushes here: io_uring is Linux's, and its system call
// numbers differ on the architectures uring_linux.go leaves out.
func ringSync(*os.File) (done bool, err error) { return false, nil }

// ringWriteSync leaves the write and its flush to pwrite(2) and Sync here.
func ringWriteSync(*os.File, []byte, int64) (written int, done bool, err error) {
	return 0, false, nil
}

// RingFlushes reports that FlushAuto does not flush through an io_uring
// here, and why.
func RingFlushes() (bool, error) {
	return false, errors.New("vfs: io_uring flushes are built for Linux on amd64, arm64, riscv64, loong64, ppc64le and s390x only")
}
