package wal

import (
	"fmt"
	"sync"

	"github.com/latch-io/latch/internal/vfs"
)

// Zero-ahead. A segment is preallocated (fallocate), but on ext4 and XFS
// that space stays "unwritten": the first write into each block converts
// its extent, a metadata change that the flush's fsync must commit to the
// filesystem journal. Measured on latch's test machine (ext4, 4 KiB write
// + fsync, 3,000 in a row): 211 µs p50 and 75 µs of CPU per fsync into
// fallocated space, the same as appending, against 157 µs and 62 µs into
// space already written with zeros.
//
// So, with Options.ZeroAhead, the WAL keeps the space just past its write
// offset written with zeros. After a flush is acknowledged, and before the
// next one is written, the flushing leader writes one chunk of zeros past
// the furthest it zeroed and fsyncs it, while that frontier is less than
// zeroLead ahead. It does so in a goroutine of its own, so that its own
// Save returns at once; the WAL stays flushing until it is done, so a Save
// that arrives meanwhile waits for it as for any flush under way, and so
// does Close. A flush then lands in converted blocks: a chunk's conversion
// is paid once, for about a thousand flushes. The server turns it on only
// where blocks are overwritten in place (ext4, XFS: vfs.WritesInPlace); on
// a copy-on-write filesystem a flush over zeros would need new space, and
// could meet a full disk after the fact.
//
// Safety: zeros go only at or past the write offset, into space the log
// has never written (which already reads as zeros), under writeMu like any
// flush, so no record is ever overwritten and what recovery reads is
// unchanged. A failed write or fsync of zeros fails the WAL like a flush's
// (the fsync shares the segment's file: its error must not be lost), except
// a write refused for want of space (a filesystem that could not
// preallocate, or copies on write): that only stops the zeroing of the
// segment, since nothing but zeros was at stake.
const (
	zeroChunk = 1 << 20
	zeroLead  = 2 << 20
)

// zeroChunkBytes is the chunk of zeros zero-ahead writes, allocated once.
var zeroChunkBytes = sync.OnceValue(func() []byte { return make([]byte, zeroChunk) })

// zeroAheadDue reports whether the zeroed frontier of the current segment
// is less than zeroLead past the write offset, with space left to zero.
func (w *WAL) zeroAheadDue() bool {
	if !w.opts.ZeroAhead {
		return false
	}
	w.writeMu.Lock()
	defer w.writeMu.Unlock()
	_, _, due := w.nextZerosLocked()
	return due
}

// nextZerosLocked returns the chunk zeroAhead writes next; w.writeMu must
// be held.
func (w *WAL) nextZerosLocked() (start, end int64, due bool) {
	start = max(w.zeroed, w.offset)
	end = min(start+zeroChunk, w.fileSize)
	return start, end, start < w.offset+zeroLead && start < end
}

// zeroAhead writes and fsyncs the next chunk of zeros past the current
// segment's write offset, if one is due. Only the flushing goroutine calls
// it, between two flushes.
func (w *WAL) zeroAhead() {
	w.writeMu.Lock()
	defer w.writeMu.Unlock()
	start, end, due := w.nextZerosLocked()
	if !due {
		return
	}
	if _, err := w.file.WriteAt(zeroChunkBytes()[:end-start], start); err != nil {
		if vfs.IsNoSpace(err) {
			// A filesystem that could not preallocate (a sparse segment)
			// or copies on write: zeros need space of their own. They were
			// only ever zeros where zeros read already, and nothing was
			// fsynced; stop zeroing this segment and keep the WAL.
			w.logger.Warn("wal: no space to write zeros ahead; not zeroing the rest of this segment", "file", w.file.Name(), "offset", start, "error", err)
			w.zeroed = w.fileSize
			return
		}
		_ = w.fail(fmt.Errorf("write zeros to %s at %d: %w", w.file.Name(), start, err))
		return
	}
	// The planted bug (UnsafeNoSync) fsyncs nothing: these fsyncs would
	// make its flushes durable now and then, and hide it.
	if err := w.syncZerosLocked(); err != nil {
		_ = w.fail(fmt.Errorf("fsync %s after zeros at %d: %w", w.file.Name(), start, err))
		return
	}
	w.zeroed = end
}

// syncZerosLocked fsyncs the segment after a chunk of zeros, unless the WAL
// runs the planted bug UnsafeNoSync. w.writeMu must be held.
func (w *WAL) syncZerosLocked() error {
	if w.opts.UnsafeNoSync {
		return nil
	}
	return w.file.Sync()
}
