package crashfs

import (
	"errors"
	"os"
	"syscall"
)

// lseek whence values that find a file's data and holes.
const (
	seekData = 3
	seekHole = 4
)

// dataRegion returns the first region of file in [offset, limit) that may
// hold data, skipping holes (a preallocated, never written tail reads as
// one); start == limit when there is none. Where the filesystem cannot
// tell, it is all of [offset, limit).
func dataRegion(file *os.File, offset, limit int64) (start, end int64) {
	start, err := file.Seek(offset, seekData)
	if errors.Is(err, syscall.ENXIO) {
		return limit, limit
	}
	if err != nil || start >= limit {
		return min(max(start, offset), limit), limit
	}
	end, err = file.Seek(start, seekHole)
	if err != nil || end > limit {
		end = limit
	}
	return start, end
}
