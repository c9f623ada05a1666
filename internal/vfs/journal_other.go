//go:build !linux

package vfs

import "os"

// inode returns 0: the sync journal uses Linux's inode numbers, so
// NewJournal refuses to start here.
func inode(os.FileInfo) uint64 { return 0 }
