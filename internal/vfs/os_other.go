//go:build !linux

package vfs

import "os"

func preallocate(f *os.File, size int64) error {
	info, err := f.Stat()
	if err != nil {
		return err
	}
	if info.Size() >= size {
		return nil
	}
	return f.Truncate(size)
}

// lockFile is a no-op where flock is not wired up; latch targets Linux.
func lockFile(*os.File) error { return nil }

// WritesInPlace reports whether the filesystem holding path is known to
// write over a file's allocated blocks in place; on this system it is never
// known.
func WritesInPlace(string) bool { return false }
