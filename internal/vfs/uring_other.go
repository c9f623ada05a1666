//go:build !linux

package vfs

import (
	"errors"
	"os"
)

// ringSync never flushes here: io_uring is Linux's.
func ringSync(*os.File) (done bool, err error) { return false, nil }

func ringAvailable() (bool, error) { return false, errors.New("vfs: io_uring is Linux only") }
