package vfs

import (
	"os"
	"syscall"
)

// inode returns the inode number of info, or 0 if it has none.
func inode(info os.FileInfo) uint64 {
	if stat, ok := info.Sys().(*syscall.Stat_t); ok {
		return stat.Ino
	}
	return 0
}
