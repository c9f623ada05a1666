// Package snap owns latch's snapshot files: one file per (group, index),
// written to a temporary name, fsynced, renamed and the directory fsynced, so
// a crash leaves either the whole snapshot or none of it under its name.
// Every file carries a header checksum and a CRC32C of its body; Load
// returns the newest snapshot of a group that verifies and reports the newer
// ones that did not. Bodies stream through: a snapshot of hundreds of MB is
// never held in memory.
//
// Files are named "<group %016x>-<index %016x>.snap"; "*.tmp" files are
// unfinished writes, removed by New.
//
// A full filesystem (ENOSPC, EDQUOT) met before the rename is ErrNoSpace:
// the temporary file is removed and no durable state changed, so the caller
// may try again later. Any error after the rename is not: the file is in
// place, and whether the directory entry is durable is unknown.
package snap

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/latch-io/latch/internal/vfs"
)

var (
	// ErrNoSnapshot is returned by Load when a group has no valid snapshot.
	ErrNoSnapshot = errors.New("snap: no snapshot")
	// ErrCorrupt is matched by every error reporting a damaged file.
	ErrCorrupt = errors.New("snap: corrupt snapshot")
	// ErrNoSpace is returned by Save and Receive when the filesystem filled
	// up before the file was renamed into place: its temporary file is
	// removed and nothing refers to it, so no durable state was touched;
	// the snapshot may be tried again later.
	ErrNoSpace = errors.New("snap: no space left for the snapshot; nothing was installed")
)

// CorruptError names a damaged snapshot file and the byte offset of the damage.
type CorruptError struct {
	File   string
	Offset int64
	Reason error
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("snap: corrupt snapshot: %s at byte offset %d: %v", e.File, e.Offset, e.Reason)
}

func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }
func (e *CorruptError) Unwrap() error        { return e.Reason }

// Meta describes a snapshot: the state of group after applying Index (of Term).
type Meta struct {
	Group, Index, Term uint64
	ConfState          raftpb.ConfState
}

// Options configure a Store.
type Options struct {
	// Keep is how many snapshots per group are kept; default 3.
	Keep   int
	Logger *slog.Logger
}

// Store is a directory of snapshot files. It is safe for concurrent use.
type Store struct {
	fs     vfs.FS
	dir    string
	opts   Options
	logger *slog.Logger
	mu     sync.Mutex // serializes renames into dir and pruning
}

const (
	snapSuffix = ".snap"
	tempSuffix = ".tmp"
)

func fileName(group, index uint64) string {
	return fmt.Sprintf("%016x-%016x%s", group, index, snapSuffix)
}

func parseFileName(name string) (group, index uint64, ok bool) {
	stem, found := strings.CutSuffix(name, snapSuffix)
	groupHex, indexHex, split := strings.Cut(stem, "-")
	if !found || !split || len(groupHex) != 16 || len(indexHex) != 16 {
		return 0, 0, false
	}
	group, errGroup := strconv.ParseUint(groupHex, 16, 64)
	index, errIndex := strconv.ParseUint(indexHex, 16, 64)
	return group, index, errGroup == nil && errIndex == nil
}

// New opens (creating if absent) the snapshot directory and removes
// unfinished temporary files.
func New(fs vfs.FS, dir string, opts Options) (*Store, error) {
	if opts.Keep <= 0 {
		opts.Keep = 3
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("snap: create %s: %w", dir, err)
	}
	store := &Store{fs: fs, dir: dir, opts: opts, logger: opts.Logger}
	names, err := fs.List(dir)
	if err != nil {
		return nil, fmt.Errorf("snap: list %s: %w", dir, err)
	}
	for _, name := range names {
		if strings.HasSuffix(name, tempSuffix) {
			if err := fs.Remove(filepath.Join(dir, name)); err != nil {
				return nil, fmt.Errorf("snap: remove unfinished %s: %w", name, err)
			}
		}
	}
	return store, nil
}

// Save writes a snapshot: header, the bytes write produces (streamed, never
// held in memory), trailer; then fsync, rename, directory fsync, and pruning
// to Keep per group. When Save returns nil the snapshot is durable.
func (s *Store) Save(meta Meta, write func(io.Writer) error) error {
	header, err := encodeHeader(meta)
	if err != nil {
		return err
	}
	return s.install(meta.Group, meta.Index, func(w io.Writer) error {
		if _, err := w.Write(header); err != nil {
			return err
		}
		body := &checksumWriter{w: w}
		if err := write(body); err != nil {
			return fmt.Errorf("snap: write body: %w", err)
		}
		_, err := w.Write(encodeTrailer(body.length, body.checksum))
		return err
	})
}

// writeErrors passes writes to w and keeps the first error.
type writeErrors struct {
	w   io.Writer
	err error
}

func (e *writeErrors) Write(p []byte) (int, error) {
	n, err := e.w.Write(p)
	if err != nil && e.err == nil {
		e.err = err
	}
	return n, err
}

// install writes a file through fill to a temporary name and makes it
// durable under its final name.
func (s *Store) install(group, index uint64, fill func(io.Writer) error) (err error) {
	final := filepath.Join(s.dir, fileName(group, index))
	temp := final + tempSuffix
	file, err := s.fs.Create(temp)
	if err != nil {
		if vfs.IsNoSpace(err) {
			return fmt.Errorf("%w: create %s: %v", ErrNoSpace, temp, err)
		}
		return fmt.Errorf("snap: create %s: %w", temp, err)
	}
	renamed := false
	written := &writeErrors{w: file}
	defer func() {
		if err != nil && !renamed {
			file.Close()
			s.fs.Remove(temp)
			// fill may report a write error without wrapping it: the
			// file's own write error says whether the disk was full.
			if vfs.IsNoSpace(err) || vfs.IsNoSpace(written.err) {
				err = fmt.Errorf("%w: %v", ErrNoSpace, err)
			}
		}
	}()
	buffered := bufio.NewWriterSize(written, 256<<10)
	if err := fill(buffered); err != nil {
		return err
	}
	if err := buffered.Flush(); err != nil {
		return fmt.Errorf("snap: write %s: %w", temp, err)
	}
	if err := file.Sync(); err != nil {
		return fmt.Errorf("snap: fsync %s: %w", temp, err)
	}
	if err := file.Close(); err != nil {
		return fmt.Errorf("snap: close %s: %w", temp, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.fs.Rename(temp, final); err != nil {
		return fmt.Errorf("snap: rename %s: %w", temp, err)
	}
	renamed = true
	if err := s.fs.SyncDir(s.dir); err != nil {
		return fmt.Errorf("snap: fsync directory %s: %w", s.dir, err)
	}
	return s.pruneLocked(group)
}

// indexes returns the indexes of group's snapshot files, newest first.
func (s *Store) indexes(group uint64) ([]uint64, error) {
	names, err := s.fs.List(s.dir)
	if err != nil {
		return nil, fmt.Errorf("snap: list %s: %w", s.dir, err)
	}
	var indexes []uint64
	for _, name := range names {
		if fileGroup, index, ok := parseFileName(name); ok && fileGroup == group {
			indexes = append(indexes, index)
		}
	}
	slices.Sort(indexes)
	slices.Reverse(indexes)
	return indexes, nil
}

// pruneLocked removes group's snapshots beyond the Keep newest. s.mu must be held.
func (s *Store) pruneLocked(group uint64) error {
	indexes, err := s.indexes(group)
	if err != nil || len(indexes) <= s.opts.Keep {
		return err
	}
	for _, index := range indexes[s.opts.Keep:] {
		if err := s.fs.Remove(filepath.Join(s.dir, fileName(group, index))); err != nil {
			return fmt.Errorf("snap: prune: %w", err)
		}
	}
	if err := s.fs.SyncDir(s.dir); err != nil {
		return fmt.Errorf("snap: fsync directory %s after pruning: %w", s.dir, err)
	}
	return nil
}

// Load returns the newest snapshot of group whose file verifies (a full
// streaming pass over it first), with a reader of its body that verifies
// again as it is read, and the errors of newer files that did not verify,
// for the caller to log. ErrNoSnapshot if no file verifies.
func (s *Store) Load(group uint64) (Meta, io.ReadCloser, []error, error) {
	indexes, err := s.indexes(group)
	if err != nil {
		return Meta{}, nil, nil, err
	}
	var skipped []error
	for _, index := range indexes {
		meta, body, err := s.Open(group, index)
		if err == nil {
			return meta, body, skipped, nil
		}
		s.logger.Warn("snap: skipping invalid snapshot", "group", group, "index", index, "error", err)
		skipped = append(skipped, err)
	}
	return Meta{}, nil, skipped, fmt.Errorf("%w for group %d", ErrNoSnapshot, group)
}

// Open verifies the snapshot of group at index with a full pass and returns
// its meta and a verifying reader of its body.
func (s *Store) Open(group, index uint64) (Meta, io.ReadCloser, error) {
	name := filepath.Join(s.dir, fileName(group, index))
	if err := s.verify(name, group, index); err != nil {
		return Meta{}, nil, err
	}
	file, err := s.fs.Open(name)
	if err != nil {
		return Meta{}, nil, fmt.Errorf("snap: open %s: %w", name, err)
	}
	meta, body, err := readStream(file, name)
	if err != nil {
		file.Close()
		return Meta{}, nil, err
	}
	return meta, readCloser{Reader: body, Closer: file}, nil
}

func (s *Store) verify(name string, group, index uint64) error {
	file, err := s.fs.Open(name)
	if err != nil {
		return fmt.Errorf("snap: open %s: %w", name, err)
	}
	defer file.Close()
	meta, body, err := readStream(file, name)
	if err != nil {
		return err
	}
	if meta.Group != group || meta.Index != index {
		return &CorruptError{File: name, Offset: 0, Reason: fmt.Errorf("%w: header says group %d index %d", errFormat, meta.Group, meta.Index)}
	}
	_, err = io.Copy(io.Discard, body)
	return err
}

type readCloser struct {
	io.Reader
	io.Closer
}

// OpenFile returns the raw bytes of the stored snapshot file of group at
// index and its size, for sending to a peer, which passes them to
// ReceiveFile.
func (s *Store) OpenFile(group, index uint64) (io.ReadCloser, int64, error) {
	name := filepath.Join(s.dir, fileName(group, index))
	file, err := s.fs.Open(name)
	if err != nil {
		return nil, 0, fmt.Errorf("snap: open %s: %w", name, err)
	}
	info, err := file.Stat()
	if err != nil {
		file.Close()
		return nil, 0, fmt.Errorf("snap: stat %s: %w", name, err)
	}
	return file, info.Size(), nil
}

// ReceiveFile stores a snapshot file streamed from a peer (OpenFile's bytes)
// durably, after verifying its header names group and index and its body
// checksum; then Open reads it. Nothing is stored if verification fails.
func (s *Store) ReceiveFile(group, index uint64, r io.Reader) (Meta, error) {
	var meta Meta
	err := s.install(group, index, func(w io.Writer) error {
		source := fmt.Sprintf("snapshot of group %d at %d from peer", group, index)
		var body *bodyReader
		var err error
		meta, body, err = readStream(io.TeeReader(r, w), source)
		if err != nil {
			return err
		}
		if meta.Group != group || meta.Index != index {
			return &CorruptError{File: source, Offset: 0, Reason: fmt.Errorf("%w: header says group %d index %d", errFormat, meta.Group, meta.Index)}
		}
		_, err = io.Copy(io.Discard, body)
		return err
	})
	return meta, err
}
