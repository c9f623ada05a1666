package vfs

import (
	"errors"
	"syscall"
)

// IsNoSpace reports whether err says the filesystem has no room left: ENOSPC,
// or EDQUOT (a quota reached). The WAL and the snapshot store refuse to
// start a write on such an error instead of failing for good, where nothing
// of the data was written yet (see their package comments).
func IsNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}
