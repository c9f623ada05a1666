package vfs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// Journal is an FS over the operating system's that records, in an
// append-only journal file outside the data directory, what has been made
// durable: after every successful File.Sync the file's durable length, after
// every successful SyncDir the names the directory durably holds, and every
// create, rename and remove. The test-support package internal/testkit/crashfs
// (CutToJournal) reads the journal after the process was killed (SIGKILL)
// and cuts the data directory back to what a power cut at that instant would
// have left, which a real kill alone never does: the page cache keeps every
// written byte. Only the recorder and the journal's format (JournalRecord)
// live here, because latchd links them; the cut is test code.
//
// It is for tests only (latchd --unsafe-sync-journal). Records are plain
// O_APPEND writes without fsync, enough because the process dies by SIGKILL
// and the machine keeps running. A record is written only after its call
// succeeded, so the journal never claims more durability than the process
// saw; a call the kill interrupted counts as not made durable.
//
// Files are told apart by inode number, so that a rename or remove whose
// record the kill cut off is still resolved right: a journal is refused on a
// filesystem without inode numbers. Journal is safe for concurrent use.
type Journal struct {
	inner FS
	path  string // the journal file
	root  string // the data directory, absolute

	// namespaceMu is held across a namespace call (create, rename, remove,
	// directory sync, lock) and its record, so that their records are in
	// the order the calls took effect (an inode freed by one may be reused
	// by the next).
	namespaceMu sync.Mutex

	mu sync.Mutex // guards extents and appends to the journal file
	// extents is what this process wrote to each inode, by inode number.
	extents map[uint64]*extent
}

// extent is what the process knows of an inode's written bytes.
type extent struct {
	// written is the highest offset written through any handle (or set by
	// Truncate) in this process.
	written int64
	// known is set once the process created or truncated the file: then
	// written covers all of its contents. Otherwise a file written by an
	// earlier process may hold data beyond written, and a Sync counts the
	// whole file as durable (more than it may be: never less).
	known bool
	// reset is set by create and truncate until the next Sync record: the
	// durable length that record gives replaces the earlier one, instead of
	// raising it.
	reset bool
}

// Journal record operations (JournalRecord.Op).
const (
	RecordBaseline = "baseline" // a new journal: every file under root is durable
	RecordStart    = "start"    // a process opened the journal again: the files it found
	RecordCreate   = "create"
	RecordSync     = "sync"
	RecordSyncDir  = "syncdir"
	RecordRename   = "rename"
	RecordRemove   = "remove"
	RecordLock     = "lock"
	RecordCut      = "cut" // crashfs.CutToJournal cut the tree; a baseline follows
)

// JournalRecord is one line of the journal, JSON encoded.
type JournalRecord struct {
	Op   string `json:"op"`
	Path string `json:"path,omitempty"` // absolute
	To   string `json:"to,omitempty"`   // rename: the new path
	Ino  uint64 `json:"ino,omitempty"`
	// Replaced is the inode a rename replaced at To, or 0.
	Replaced uint64 `json:"replaced,omitempty"`
	// Len is the durable content length after a sync: bytes past it were
	// never written, or were written after the sync.
	Len int64 `json:"len,omitempty"`
	// Size is the file's size when it was synced (a preallocated file is
	// larger than its contents).
	Size int64 `json:"size,omitempty"`
	// Exact says Len and Size replace the durable ones (the file was
	// created or truncated since its last sync) instead of raising them.
	Exact bool `json:"exact,omitempty"`
	// Entries are the regular files of a syncdir (by name) or of a baseline
	// or start (by path, with sizes).
	Entries []JournalEntry `json:"entries,omitempty"`
	PID     int            `json:"pid,omitempty"`
	// Report is a cut record's report (crashfs.CutReport), JSON encoded.
	Report json.RawMessage `json:"report,omitempty"`

	// Offset is where the record starts in the journal, as read back.
	Offset int64 `json:"-"`
}

// JournalEntry is a regular file in a JournalRecord's listing.
type JournalEntry struct {
	Name string `json:"name,omitempty"`
	Path string `json:"path,omitempty"`
	Ino  uint64 `json:"ino"`
	Size int64  `json:"size,omitempty"`
}

// ErrNoInodes is returned by NewJournal on a filesystem that does not
// report inode numbers (MemFS, or an operating system without them).
var ErrNoInodes = errors.New("vfs: the sync journal needs a filesystem with inode numbers")

// NewJournal wraps inner, which must be the operating system's FS, so that
// the durability of every file under root is recorded in the journal at
// journalPath (created if absent; it must not be under root). A new journal
// starts with a baseline: every file already under root counts as durable. A
// journal that exists continues, with a record of the files this process
// finds (the previous one may have left unsynced files behind).
func NewJournal(inner FS, journalPath, root string) (*Journal, error) {
	root, rootErr := filepath.Abs(root)
	journalPath, pathErr := filepath.Abs(journalPath)
	if err := errors.Join(rootErr, pathErr); err != nil {
		return nil, fmt.Errorf("vfs: journal: %w", err)
	}
	if within(root, journalPath) {
		return nil, fmt.Errorf("vfs: journal %s must not be inside the directory %s it records", journalPath, root)
	}
	if err := checkInodes(inner, root); err != nil {
		return nil, err
	}
	j := &Journal{inner: inner, path: journalPath, root: root, extents: map[uint64]*extent{}}
	info, err := os.Stat(journalPath)
	switch {
	case errors.Is(err, os.ErrNotExist):
		err = j.appendListing(RecordBaseline)
	case err != nil:
		return nil, fmt.Errorf("vfs: journal %s: %w", journalPath, err)
	case info.Size() == 0:
		err = j.appendListing(RecordBaseline)
	default:
		if err = DropTornRecord(journalPath, info.Size()); err == nil {
			err = j.appendListing(RecordStart)
		}
	}
	if err != nil {
		return nil, err
	}
	return j, nil
}

// checkInodes returns ErrNoInodes unless fs reports an inode number for root
// or, if root does not exist yet, its nearest existing ancestor.
func checkInodes(fs FS, root string) error {
	for dir := root; ; dir = filepath.Dir(dir) {
		info, err := fs.Stat(dir)
		if err == nil {
			if !hasInode(info) {
				return fmt.Errorf("%w: %s has none", ErrNoInodes, dir)
			}
			return nil
		}
		if !errors.Is(err, os.ErrNotExist) || filepath.Dir(dir) == dir {
			return fmt.Errorf("vfs: journal root %s: %w", root, err)
		}
	}
}

// hasInode reports whether info carries an inode number.
func hasInode(info os.FileInfo) bool { return inode(info) != 0 }

// DropTornRecord truncates the journal after its last complete record. A
// write the kill interrupted can leave part of a record (the kernel may stop
// a write between pages on SIGKILL); a record appended after it would
// otherwise start mid-line.
func DropTornRecord(path string, size int64) error {
	file, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("vfs: journal: %w", err)
	}
	defer file.Close()
	const chunk = 64 << 10
	buf := make([]byte, chunk)
	end := size
	for end > 0 {
		from := max(0, end-chunk)
		n, err := file.ReadAt(buf[:end-from], from)
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("vfs: journal: read %s: %w", path, err)
		}
		if newline := bytes.LastIndexByte(buf[:n], '\n'); newline >= 0 {
			end = from + int64(newline) + 1
			break
		}
		end = from
	}
	if end == size {
		return nil
	}
	if err := file.Truncate(end); err != nil {
		return fmt.Errorf("vfs: journal: drop the torn record of %s: %w", path, err)
	}
	return nil
}

// within reports whether path is dir or below it (both clean and absolute).
func within(dir, path string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// AppendCut appends to the journal at journalPath a cut record carrying
// report, then a new baseline of every regular file under root: the records
// a crash cut leaves, so that the restarted process continues the journal.
func AppendCut(journalPath, root string, report json.RawMessage) error {
	journal := &Journal{inner: OS(), path: absolute(journalPath), root: root}
	if err := journal.append(JournalRecord{Op: RecordCut, Path: root, Report: report}); err != nil {
		return err
	}
	return journal.appendListing(RecordBaseline)
}

// ListJournalTree returns every regular file under root in fs (none if root
// is absent), with its inode number and size, as a baseline lists them.
func ListJournalTree(fs FS, root string) ([]JournalEntry, error) { return listTree(fs, root) }

// appendListing records op with every regular file under the root.
func (j *Journal) appendListing(op string) error {
	entries, err := listTree(j.inner, j.root)
	if err != nil {
		return err
	}
	return j.append(JournalRecord{Op: op, Path: j.root, Entries: entries, PID: os.Getpid()})
}

// listTree returns every regular file under root (none if root is absent),
// with its inode number and size.
func listTree(fs FS, root string) ([]JournalEntry, error) {
	var out []JournalEntry
	var walk func(dir string) error
	walk = func(dir string) error {
		names, err := fs.List(dir)
		if errors.Is(err, os.ErrNotExist) && dir == root {
			return nil
		}
		if err != nil {
			return fmt.Errorf("vfs: journal: list %s: %w", dir, err)
		}
		for _, name := range names {
			path := filepath.Join(dir, name)
			info, err := fs.Stat(path)
			if errors.Is(err, os.ErrNotExist) {
				continue // removed since the listing
			}
			if err != nil {
				return fmt.Errorf("vfs: journal: %w", err)
			}
			if info.IsDir() {
				if err := walk(path); err != nil {
					return err
				}
				continue
			}
			if info.Mode().IsRegular() {
				out = append(out, JournalEntry{Path: path, Ino: inode(info), Size: info.Size()})
			}
		}
		return nil
	}
	return out, walk(root)
}

// append writes one record to the journal. The file is opened for each
// record, so a Journal holds no descriptor and needs no Close. A record is
// one write(2); if SIGKILL tears it, the next NewJournal or
// crashfs.CutToJournal drops the torn part (DropTornRecord).
func (j *Journal) append(record JournalRecord) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.appendLocked(record)
}

// appendLocked is append with j.mu held, for a record that must follow the
// extent state it was made from.
func (j *Journal) appendLocked(record JournalRecord) error {
	line, err := json.Marshal(record)
	if err != nil {
		return fmt.Errorf("vfs: journal: encode %s record: %w", record.Op, err)
	}
	return appendLine(j.path, append(line, '\n'))
}

func appendLine(path string, line []byte) error {
	file, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("vfs: journal: %w", err)
	}
	if _, err := file.Write(line); err != nil {
		file.Close()
		return fmt.Errorf("vfs: journal: append to %s: %w", path, err)
	}
	if err := file.Close(); err != nil {
		return fmt.Errorf("vfs: journal: close %s: %w", path, err)
	}
	return nil
}

// absolute returns name as an absolute clean path.
func absolute(name string) string {
	if abs, err := filepath.Abs(name); err == nil {
		return abs
	}
	return filepath.Clean(name)
}

// Create creates or truncates name and records it; the new contents are
// durable only up to what a later Sync records.
func (j *Journal) Create(name string) (File, error) {
	j.namespaceMu.Lock()
	defer j.namespaceMu.Unlock()
	wrapped, err := j.wrap(j.inner.Create(name))
	if err != nil {
		return nil, err
	}
	j.mu.Lock()
	j.extents[wrapped.ino] = &extent{known: true, reset: true}
	j.mu.Unlock()
	if err := j.append(JournalRecord{Op: RecordCreate, Path: wrapped.path, Ino: wrapped.ino}); err != nil {
		wrapped.Close()
		return nil, err
	}
	return wrapped, nil
}

func (j *Journal) Open(name string) (File, error) { return j.open(j.inner.Open(name)) }

func (j *Journal) OpenReadWrite(name string) (File, error) {
	return j.open(j.inner.OpenReadWrite(name))
}

// open returns the wrapped file as a File (nil, not a nil *journalFile, on
// error).
func (j *Journal) open(file File, err error) (File, error) {
	wrapped, err := j.wrap(file, err)
	if err != nil {
		return nil, err
	}
	return wrapped, nil
}

// wrap returns the file an inner call opened (or its error) with the
// journal watching its writes and syncs; it closes the file if it cannot.
func (j *Journal) wrap(file File, openErr error) (*journalFile, error) {
	if openErr != nil {
		return nil, openErr
	}
	info, err := file.Stat()
	if err != nil {
		err = fmt.Errorf("vfs: journal: %w", err)
	} else if !hasInode(info) {
		err = fmt.Errorf("%w: %s", ErrNoInodes, file.Name())
	}
	if err != nil {
		file.Close()
		return nil, err
	}
	return &journalFile{File: file, journal: j, path: absolute(file.Name()), ino: inode(info)}, nil
}

// Rename renames and records it, with the inode the rename replaced.
func (j *Journal) Rename(oldname, newname string) error {
	j.namespaceMu.Lock()
	defer j.namespaceMu.Unlock()
	var ino, replaced uint64
	if info, err := j.inner.Stat(oldname); err == nil {
		ino = inode(info)
	}
	if info, err := j.inner.Stat(newname); err == nil && info.Mode().IsRegular() {
		replaced = inode(info)
	}
	if err := j.inner.Rename(oldname, newname); err != nil {
		return err
	}
	return j.append(JournalRecord{Op: RecordRename, Path: absolute(oldname), To: absolute(newname), Ino: ino, Replaced: replaced})
}

// Remove removes and records the removal of a regular file.
func (j *Journal) Remove(name string) error {
	j.namespaceMu.Lock()
	defer j.namespaceMu.Unlock()
	info, statErr := j.inner.Stat(name)
	if err := j.inner.Remove(name); err != nil {
		return err
	}
	if statErr != nil || !info.Mode().IsRegular() {
		return nil
	}
	ino := inode(info)
	j.mu.Lock()
	delete(j.extents, ino)
	j.mu.Unlock()
	return j.append(JournalRecord{Op: RecordRemove, Path: absolute(name), Ino: ino})
}

// SyncDir syncs dir and records the regular files it then holds.
func (j *Journal) SyncDir(dir string) error {
	j.namespaceMu.Lock()
	defer j.namespaceMu.Unlock()
	if err := j.inner.SyncDir(dir); err != nil {
		return err
	}
	names, err := j.inner.List(dir)
	if err != nil {
		return fmt.Errorf("vfs: journal: list synced directory: %w", err)
	}
	var entries []JournalEntry
	for _, name := range names {
		info, err := j.inner.Stat(filepath.Join(dir, name))
		if errors.Is(err, os.ErrNotExist) {
			continue // removed behind the journal's back since the listing
		}
		if err != nil {
			return fmt.Errorf("vfs: journal: %w", err)
		}
		if info.Mode().IsRegular() {
			entries = append(entries, JournalEntry{Name: name, Ino: inode(info)})
		}
	}
	return j.append(JournalRecord{Op: RecordSyncDir, Path: absolute(dir), Entries: entries})
}

// Lock takes the lock and records its file, which a cut leaves alone.
func (j *Journal) Lock(name string) (io.Closer, error) {
	j.namespaceMu.Lock()
	defer j.namespaceMu.Unlock()
	closer, err := j.inner.Lock(name)
	if err != nil {
		return nil, err
	}
	if err := j.append(JournalRecord{Op: RecordLock, Path: absolute(name)}); err != nil {
		closer.Close()
		return nil, err
	}
	return closer, nil
}

func (j *Journal) MkdirAll(dir string, perm os.FileMode) error { return j.inner.MkdirAll(dir, perm) }
func (j *Journal) List(dir string) ([]string, error)           { return j.inner.List(dir) }
func (j *Journal) Stat(name string) (os.FileInfo, error)       { return j.inner.Stat(name) }

// wroteLocked raises the inode's written extent to end. j.mu must be held.
func (j *Journal) wroteLocked(ino uint64, end int64) {
	ext := j.extentLocked(ino)
	ext.written = max(ext.written, end)
}

// extentLocked returns the inode's extent, a new unknown one if the process
// has not created or written it yet. j.mu must be held.
func (j *Journal) extentLocked(ino uint64) *extent {
	ext, ok := j.extents[ino]
	if !ok {
		ext = &extent{}
		j.extents[ino] = ext
	}
	return ext
}

// journalFile is a File of a Journal: it reports its writes, truncations
// and syncs to the journal. Like the File it wraps, it is used by one
// goroutine at a time.
type journalFile struct {
	File
	journal  *Journal
	path     string // absolute, as opened
	ino      uint64
	position int64 // the offset Read and Write use, as the wrapped file's
}

func (f *journalFile) Read(p []byte) (int, error) {
	n, err := f.File.Read(p)
	f.position += int64(n)
	return n, err
}

func (f *journalFile) Write(p []byte) (int, error) {
	n, err := f.File.Write(p)
	f.wrote(p[:n], f.position)
	f.position += int64(n)
	return n, err
}

func (f *journalFile) WriteAt(p []byte, offset int64) (int, error) {
	n, err := f.File.WriteAt(p, offset)
	f.wrote(p[:n], offset)
	return n, err
}

// wrote raises the file's written extent to the end of p, written at
// offset, less its trailing zeros. In the journal's model every byte past a
// file's durable length reads as zero after a cut, so zeros written there
// change nothing: counting them would make the next Sync claim them
// durable, and with them the data written over them later, before its own
// Sync (the WAL writes zeros ahead of its records, zeroahead.go).
func (f *journalFile) wrote(p []byte, offset int64) {
	last := len(p) - 1
	for last >= 0 && p[last] == 0 {
		last--
	}
	if last < 0 {
		return
	}
	f.journal.mu.Lock()
	f.journal.wroteLocked(f.ino, offset+int64(last)+1)
	f.journal.mu.Unlock()
}

func (f *journalFile) Seek(offset int64, whence int) (int64, error) {
	position, err := f.File.Seek(offset, whence)
	if err == nil {
		f.position = position
	}
	return position, err
}

// Truncate sets the file's contents to size bytes: they replace its durable
// length at the next Sync.
func (f *journalFile) Truncate(size int64) error {
	if err := f.File.Truncate(size); err != nil {
		return err
	}
	f.journal.mu.Lock()
	defer f.journal.mu.Unlock()
	ext := f.journal.extentLocked(f.ino)
	ext.written, ext.known, ext.reset = size, true, true
	return nil
}

// Sync fsyncs the file, then records what is now durable: everything the
// process wrote to the inode, and its size. The record is appended under
// the lock it was made under, so that two handles' syncs of one inode are
// recorded in the order they read its extent (an Exact record replaces the
// durable length: a later one must not precede an earlier one). A failed
// journal append fails the Sync, so the process stops rather than run with
// a journal that under-states what it relied on.
func (f *journalFile) Sync() error {
	if err := f.File.Sync(); err != nil {
		return err
	}
	info, err := f.File.Stat()
	if err != nil {
		return fmt.Errorf("vfs: journal: %w", err)
	}
	f.journal.mu.Lock()
	defer f.journal.mu.Unlock()
	ext := f.journal.extentLocked(f.ino)
	length := ext.written
	if !ext.known {
		length = max(length, info.Size())
	}
	record := JournalRecord{Op: RecordSync, Path: f.path, Ino: f.ino, Len: length, Size: info.Size(), Exact: ext.reset}
	ext.reset = false
	return f.journal.appendLocked(record)
}
