package wal

import (
	"errors"
	"io/fs"
	"log/slog"
	"path/filepath"
	"sync"

	"github.com/latch-io/latch/internal/vfs"
)

// A preallocated segment's blocks are reserved but unwritten (ext4 and XFS
// mark them so): the first fsync after a write into such a block must also
// commit the change of its state in the filesystem's journal. On the
// machine of docs/benchmarks.md an fsync of 4 KiB written into unwritten
// space took 0.43-0.50 ms at p50, into blocks already written with zeros
// 0.28-0.31 ms, and a 3-member cluster under 64 concurrent writers wrote
// 8% more with 9% less CPU per write on zeroed segments.
//
// So with Options.ZeroSegments the log writes zeros through a spare
// segment in the background, and takes it as its next segment: the spare
// is a file named spareName (never a segment name, so recovery ignores
// it), created, preallocated, written with zeros and fsynced by its own
// goroutine, and renamed to the next segment's name when the log rolls
// (createSegmentLocked). A segment that was not zeroed (the one Open
// starts, or one made while the spare was not ready) is left for the spare
// as soon as it is ready; a zeroed one at its end. A spare is prepared
// once the current segment holds zeroAfter bytes (unzeroed) or half its
// size (zeroed), so an idle log never writes one.
//
// The spare changes nothing the log relies on: its name is not a
// segment's until the rename, after which the new segment is durable as
// any other (the directory is fsynced before anything in it is
// acknowledged); its zeros are what a preallocated file reads as; and a
// spare that could not be made (a full disk, any error) is removed and the
// log preallocates its next segment itself, as without the option.

// spareName is the spare segment's file name in the log's directory.
const spareName = "spare.wal.tmp"

// zeroChunk is how many zeros the spare's goroutine writes per call.
const zeroChunk = 1 << 20

// spare is the background preparation of one zeroed segment file.
type spare struct {
	fs     vfs.FS
	path   string
	size   int64
	logger *slog.Logger

	mu    sync.Mutex
	file  vfs.File      // the zeroed, fsynced spare, once ready; guarded by mu
	stop  chan struct{} // closed to abandon a preparation; nil when none runs
	done  chan struct{} // closed when the preparation's goroutine returns
	ready bool          // file is set
}

func newSpare(fs vfs.FS, dir string, size int64, logger *slog.Logger) *spare {
	return &spare{fs: fs, path: filepath.Join(dir, spareName), size: size, logger: logger}
}

// removeStale removes a spare left by an earlier process.
func (s *spare) removeStale() error {
	if err := s.fs.Remove(s.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// prepare starts making the spare unless one is ready or being made.
func (s *spare) prepare() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ready || s.stop != nil {
		return
	}
	s.stop, s.done = make(chan struct{}), make(chan struct{})
	go s.make(s.stop, s.done)
}

// make creates the spare file, writes it with zeros and fsyncs it; on any
// error or on stop it removes the file.
func (s *spare) make(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	file, err := s.write(stop)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.stop = nil
		if !errors.Is(err, errSpareStopped) {
			s.logger.Debug("wal: no zeroed spare segment; the next segment is preallocated only", "error", err)
		}
		return
	}
	s.file, s.ready, s.stop = file, true, nil
}

// errSpareStopped is why write returns when stop was closed.
var errSpareStopped = errors.New("wal: spare abandoned")

// write makes the spare file; on error the file is closed and removed.
func (s *spare) write(stop <-chan struct{}) (vfs.File, error) {
	file, err := s.fs.Create(s.path)
	if err != nil {
		return nil, err
	}
	if err := s.zero(file, stop); err != nil {
		file.Close()
		_ = s.fs.Remove(s.path)
		return nil, err
	}
	return file, nil
}

// zero preallocates file, writes it with zeros and fsyncs it.
func (s *spare) zero(file vfs.File, stop <-chan struct{}) error {
	if err := file.Preallocate(s.size); err != nil {
		return err
	}
	zeros := make([]byte, min(zeroChunk, s.size))
	for offset := int64(0); offset < s.size; offset += zeroChunk {
		select {
		case <-stop:
			return errSpareStopped
		default:
		}
		if _, err := file.WriteAt(zeros[:min(zeroChunk, s.size-offset)], offset); err != nil {
			return err
		}
	}
	return file.Sync()
}

// isReady reports whether a zeroed spare waits to be taken.
func (s *spare) isReady() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ready
}

// take renames a ready spare to name and returns it, or returns nil if
// none is ready (or the rename failed: the spare is then dropped).
func (s *spare) take(name string) vfs.File {
	s.mu.Lock()
	file, ready := s.file, s.ready
	s.file, s.ready = nil, false
	s.mu.Unlock()
	if !ready {
		return nil
	}
	if err := s.fs.Rename(s.path, name); err != nil {
		s.logger.Debug("wal: could not take the zeroed spare segment", "error", err)
		file.Close()
		_ = s.fs.Remove(s.path)
		return nil
	}
	return file
}

// close abandons a preparation under way, waits for it, and removes a
// ready spare.
func (s *spare) close() {
	s.mu.Lock()
	stop, done := s.stop, s.done
	if stop != nil {
		close(stop)
	}
	s.mu.Unlock()
	if done != nil {
		<-done
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ready {
		s.file.Close()
		_ = s.fs.Remove(s.path)
		s.file, s.ready = nil, false
	}
}
