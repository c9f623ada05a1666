//go:build linux

package vfs

import (
	"errors"
	"os"
	"syscall"
)

func preallocate(f *os.File, size int64) error {
	info, err := f.Stat()
	if err != nil {
		return err
	}
	if info.Size() >= size {
		return nil
	}
	// Mode 0 extends the file size and allocates zeroed blocks.
	err = syscall.Fallocate(int(f.Fd()), 0, 0, size)
	if errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.ENOSYS) {
		return f.Truncate(size)
	}
	return err
}

func lockFile(f *os.File) error {
	err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return ErrLocked
	}
	return err
}

// Filesystem magic numbers (statfs f_type) of the filesystems that write
// over a file's allocated blocks in place.
const (
	ext4Magic = 0xEF53 // ext2, ext3 and ext4
	xfsMagic  = 0x58465342
)

// WritesInPlace reports whether the filesystem holding path is known to
// write over a file's allocated blocks in place (ext2/3/4, XFS): data
// written over zeros then needs no new space, and a preallocated block
// that was written once needs no metadata change when written again. It is
// false for copy-on-write filesystems (btrfs, ZFS), where every overwrite
// takes new space, for any other, and when path cannot be examined.
func WritesInPlace(path string) bool {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return false
	}
	switch st.Type {
	case ext4Magic, xfsMagic:
		return true
	}
	return false
}
