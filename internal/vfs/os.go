package vfs

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
)

// OS returns the FS of the operating system, whose files flush with
// FlushAuto.
func OS() FS { return osFS{} }

// OSWith returns the FS of the operating system whose files' Sync flushes
// by the given method.
func OSWith(method FlushMethod) FS { return osFS{flush: method} }

type osFS struct{ flush FlushMethod }

type osFile struct {
	*os.File
	flush FlushMethod
}

func (f osFile) Preallocate(size int64) error { return preallocate(f.File, size) }

// Sync flushes the file by its FS's method (see FlushMethod).
func (f osFile) Sync() error {
	if f.flush == FlushAuto {
		if done, err := ringSync(f.File); done {
			return err
		}
	}
	return f.File.Sync()
}

// WriteAtSync writes p at off and flushes the file, as WriteAt followed
// by Sync. With FlushAuto both go to the kernel in one submission to a
// ring, and the goroutine waits for them in the netpoller (see
// uring_write_linux.go); what the ring leaves undone, or all of it where
// there is no ring, is done by pwrite(2) and Sync.
func (f osFile) WriteAtSync(p []byte, off int64) error {
	written := 0
	if f.flush == FlushAuto {
		n, done, err := ringWriteSync(f.File, p, off)
		if done {
			return err
		}
		written = n
	}
	if written < len(p) {
		if _, err := f.File.WriteAt(p[written:], off+int64(written)); err != nil {
			return err
		}
	}
	return f.Sync()
}

func (fs osFS) Create(name string) (File, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	return osFile{File: f, flush: fs.flush}, nil
}

func (fs osFS) Open(name string) (File, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	return osFile{File: f, flush: fs.flush}, nil
}

func (fs osFS) OpenReadWrite(name string) (File, error) {
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	return osFile{File: f, flush: fs.flush}, nil
}

func (osFS) Remove(name string) error                    { return os.Remove(name) }
func (osFS) Rename(oldname, newname string) error        { return os.Rename(oldname, newname) }
func (osFS) MkdirAll(dir string, perm os.FileMode) error { return os.MkdirAll(dir, perm) }
func (osFS) Stat(name string) (os.FileInfo, error)       { return os.Stat(name) }

func (osFS) List(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(entries))
	for _, entry := range entries {
		names = append(names, entry.Name())
	}
	sort.Strings(names)
	return names, nil
}

func (osFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		d.Close()
		return fmt.Errorf("vfs: fsync directory %s: %w", dir, err)
	}
	return d.Close()
}

func (osFS) Lock(name string) (io.Closer, error) {
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := lockFile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("vfs: lock %s: %w", name, err)
	}
	return f, nil // closing the descriptor releases the lock
}
