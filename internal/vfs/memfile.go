package vfs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// memFile is an open MemFS file. It keeps its inode after the name is
// removed or renamed, as an open descriptor does.
type memFile struct {
	fs       *MemFS
	name     string
	node     *memNode
	writable bool
	position int64 // guarded by fs.mu
	closed   bool  // guarded by fs.mu
}

var errReadOnly = errors.New("file opened read-only")

func (f *memFile) Name() string { return f.name }

func (f *memFile) usableLocked(write bool) error {
	if f.closed {
		return fs.ErrClosed
	}
	if write && !f.writable {
		return errReadOnly
	}
	return nil
}

func (f *memFile) Read(p []byte) (int, error) {
	if v := f.fs.check(OpRead, f.name); v.err != nil {
		return 0, pathError("read", f.name, v.err)
	}
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.usableLocked(false); err != nil {
		return 0, pathError("read", f.name, err)
	}
	n, err := readAtLocked(f.node, p, f.position)
	f.position += int64(n)
	if err == io.EOF && n > 0 {
		err = nil
	}
	return n, err
}

func (f *memFile) ReadAt(p []byte, offset int64) (int, error) {
	if v := f.fs.check(OpRead, f.name); v.err != nil {
		return 0, pathError("read", f.name, v.err)
	}
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.usableLocked(false); err != nil {
		return 0, pathError("read", f.name, err)
	}
	return readAtLocked(f.node, p, offset)
}

func readAtLocked(node *memNode, p []byte, offset int64) (int, error) {
	if offset < 0 {
		return 0, fmt.Errorf("negative offset %d", offset)
	}
	if offset >= int64(len(node.data)) {
		return 0, io.EOF
	}
	n := copy(p, node.data[offset:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (f *memFile) Write(p []byte) (int, error) {
	f.fs.mu.Lock()
	position := f.position
	f.fs.mu.Unlock()
	n, err := f.writeAt(p, position, "write")
	f.fs.mu.Lock()
	f.position = position + int64(n)
	f.fs.mu.Unlock()
	return n, err
}

func (f *memFile) WriteAt(p []byte, offset int64) (int, error) {
	return f.writeAt(p, offset, "writeat")
}

func (f *memFile) writeAt(p []byte, offset int64, op string) (int, error) {
	v := f.fs.check(OpWrite, f.name)
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.usableLocked(true); err != nil {
		return 0, pathError(op, f.name, err)
	}
	if v.err != nil {
		if !v.partial {
			return 0, pathError(op, f.name, v.err)
		}
		half := p[:len(p)/2]
		writeAtLocked(f.node, half, offset)
		return len(half), pathError(op, f.name, v.err)
	}
	writeAtLocked(f.node, p, offset)
	return len(p), nil
}

func writeAtLocked(node *memNode, p []byte, offset int64) {
	end := int(offset) + len(p)
	node.markDirty(min(int(offset), len(node.data)), end)
	if end > len(node.data) {
		if end <= cap(node.data) {
			node.data = node.data[:end]
		} else {
			grown := make([]byte, end, max(end, 2*cap(node.data)))
			copy(grown, node.data)
			node.data = grown
		}
	}
	copy(node.data[offset:], p)
}

func (f *memFile) Seek(offset int64, whence int) (int64, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.usableLocked(false); err != nil {
		return 0, pathError("seek", f.name, err)
	}
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		offset += f.position
	case io.SeekEnd:
		offset += int64(len(f.node.data))
	default:
		return 0, pathError("seek", f.name, fmt.Errorf("bad whence %d", whence))
	}
	if offset < 0 {
		return 0, pathError("seek", f.name, fmt.Errorf("negative position %d", offset))
	}
	f.position = offset
	return offset, nil
}

func (f *memFile) Close() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return pathError("close", f.name, fs.ErrClosed)
	}
	f.closed = true
	return nil
}

// Sync makes the inode's current contents the ones a crash keeps.
func (f *memFile) Sync() error {
	if v := f.fs.check(OpSync, f.name); v.err != nil {
		return pathError("sync", f.name, v.err)
	}
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.usableLocked(false); err != nil {
		return pathError("sync", f.name, err)
	}
	n := f.node
	if cap(n.synced) < len(n.data) {
		grown := make([]byte, len(n.data))
		copy(grown, n.synced)
		n.synced = grown
	}
	n.synced = n.synced[:len(n.data)]
	if from, to := n.dirtyFrom, min(n.dirtyTo, len(n.data)); from < to {
		copy(n.synced[from:to], n.data[from:to])
	}
	n.dirtyFrom, n.dirtyTo = 0, 0
	return nil
}

func (f *memFile) Stat() (os.FileInfo, error) {
	if v := f.fs.check(OpStat, f.name); v.err != nil {
		return nil, pathError("stat", f.name, v.err)
	}
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	return memInfo{name: filepath.Base(f.name), size: int64(len(f.node.data)), dir: f.node.isDir}, nil
}

func (f *memFile) Truncate(size int64) error {
	if v := f.fs.check(OpTruncate, f.name); v.err != nil {
		return pathError("truncate", f.name, v.err)
	}
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.usableLocked(true); err != nil {
		return pathError("truncate", f.name, err)
	}
	if size < 0 {
		return pathError("truncate", f.name, fmt.Errorf("negative size %d", size))
	}
	if size <= int64(len(f.node.data)) {
		clear(f.node.data[size:])
		f.node.data = f.node.data[:size]
		return nil
	}
	writeAtLocked(f.node, make([]byte, size-int64(len(f.node.data))), int64(len(f.node.data)))
	return nil
}

func (f *memFile) Preallocate(size int64) error {
	if v := f.fs.check(OpPreallocate, f.name); v.err != nil {
		return pathError("preallocate", f.name, v.err)
	}
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.usableLocked(true); err != nil {
		return pathError("preallocate", f.name, err)
	}
	if size > int64(len(f.node.data)) {
		writeAtLocked(f.node, make([]byte, size-int64(len(f.node.data))), int64(len(f.node.data)))
	}
	return nil
}
