// Package vfs owns the filesystem interface that latch's durable storage
// (internal/wal, internal/snap) is written against, its operating-system
// implementation, and a crashable in-memory implementation for tests.
//
// The operating system's files flush (Sync) by a FlushMethod: by default
// through an io_uring where the kernel allows it, so that the goroutine
// waiting for a flush is parked in the netpoller rather than a thread
// blocked in fsync (uring_linux.go). Either way Sync returns only after
// the file's fsync, with its error. Their WriteAtSync (WriteSyncer) gives
// the ring a write and its fsync in one submission (uring_write_linux.go),
// and returns once both are done, as WriteAt followed by Sync would.
//
// Invariants of the in-memory MemFS, which crash tests rely on:
//   - A file's contents survive CrashClone only up to its last Sync; bytes
//     written after it are dropped (or, with CrashOptions.TornSectors, kept or
//     zeroed per 512-byte sector at random, as a disk writing back pages out
//     of order would leave them).
//   - A directory entry created, renamed or removed survives CrashClone only
//     if SyncDir of its directory followed the change.
//   - Injected faults (Fault) make chosen calls fail with a chosen error, or
//     sleep, so the code above can be driven through EIO, ENOSPC and a
//     simulated power cut at any call.
//
// Journal carries the same rules to real processes: wrapped around the
// operating system's FS (latchd --unsafe-sync-journal), it records what each
// Sync and SyncDir made durable, and the test-support package
// internal/testkit/crashfs (CutToJournal) cuts a killed process's data
// directory back to that, as CrashClone would.
package vfs

import (
	"errors"
	"io"
	"os"
)

// SectorSize is the unit in which MemFS models torn writes, and the unit the
// WAL uses to recognise a torn (partially persisted) tail.
const SectorSize = 512

// ErrLocked is returned by Lock when another holder has the lock.
var ErrLocked = errors.New("vfs: already locked")

// File is an open file. A File is not safe for concurrent use unless the
// implementation says so; the storage packages use each File from one
// goroutine at a time.
type File interface {
	io.Reader
	io.ReaderAt
	io.Writer
	io.WriterAt
	io.Seeker
	io.Closer
	// Sync makes the file's contents durable (fsync).
	Sync() error
	Stat() (os.FileInfo, error)
	Truncate(size int64) error
	// Preallocate reserves size bytes (reading as zeros) so that writes
	// below size cannot fail for want of space. The file's size becomes at
	// least size. On ext4 and XFS the reserved blocks stay "unwritten"
	// until first written, and that first write's fsync still commits a
	// metadata change (the WAL's zero-ahead writes zeros there first).
	Preallocate(size int64) error
	Name() string
}

// WriteSyncer is a File that can write and flush in one step: the
// operating system's files, whose WriteAtSync submits the write and its
// fsync to the kernel together. Wrappers (Fault, Journal) do not offer it,
// so code that uses it when offered, and WriteAt then Sync otherwise,
// keeps their faults and records.
type WriteSyncer interface {
	// WriteAtSync writes p at off and makes the file durable, as WriteAt
	// followed by Sync; an error says which of the two failed. After an
	// error the file is failed for the caller: the kernel may still be
	// reading p, which must not be changed or written again.
	WriteAtSync(p []byte, off int64) error
}

// FS is a filesystem. Names are slash- or OS-separated paths as given to the
// implementation; MemFS cleans them with path/filepath.
type FS interface {
	// Create creates or truncates name for reading and writing.
	Create(name string) (File, error)
	// Open opens name read-only.
	Open(name string) (File, error)
	// OpenReadWrite opens an existing file for reading and writing.
	OpenReadWrite(name string) (File, error)
	Remove(name string) error
	Rename(oldname, newname string) error
	MkdirAll(dir string, perm os.FileMode) error
	// List returns the names (not paths) of dir's entries, sorted.
	List(dir string) ([]string, error)
	Stat(name string) (os.FileInfo, error)
	// SyncDir makes dir's entries (creates, renames, removes) durable.
	SyncDir(dir string) error
	// Lock takes an exclusive advisory lock on name (created if absent),
	// held until the returned Closer is closed. ErrLocked if held elsewhere.
	Lock(name string) (io.Closer, error)
}
