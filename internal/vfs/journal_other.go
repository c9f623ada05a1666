//go:build !linux

package vfs

import "os"

// inode returns 0: the sync journal uses Linux's inode numbers, so
// NewJournal refuses to start here.
func inode(os.FileInfo) uint64 { return 0 }

// dataRegion returns all of [offset, limit): holes are not looked for here.
func dataRegion(_ *os.File, offset, limit int64) (start, end int64) { return offset, limit }
