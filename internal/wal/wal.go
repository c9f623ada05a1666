package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/latch-io/latch/internal/vfs"
)

// DefaultSegmentSize is the preallocated size of a segment file.
const DefaultSegmentSize = 64 << 20

var (
	// ErrClosed is returned by calls on a closed WAL.
	ErrClosed = errors.New("wal: closed")
	// ErrInvalidBatch is returned by Save for a batch the log must not
	// hold (an entry index that leaves a gap); nothing of the call is written.
	ErrInvalidBatch = errors.New("wal: invalid batch")
	// ErrNoSpace is returned by Save when the filesystem had no room to
	// preallocate the space a flush needs (a new segment, or a larger one
	// for an oversized flush). Nothing of the call was written, the WAL did
	// not fail: the same call may be made again, and succeeds once space
	// was freed.
	ErrNoSpace = errors.New("wal: no space left to preallocate a segment; nothing was written")
)

// Options configure a WAL.
type Options struct {
	// SegmentSize is the preallocated size of each segment file; a flush
	// larger than a segment gets a segment of its own. Default 64 MiB.
	SegmentSize int64
	// Logger receives repairs (torn tails) and released segments. Default
	// slog.Default().
	Logger *slog.Logger
	// UnsafeNoSync makes Save return without fsyncing the segment: the
	// planted bug "acknowledge before fsync" (etcd #10508) that the
	// durability checks must catch. Tests only; never in production.
	UnsafeNoSync bool
	// ZeroAhead keeps a segment's space just past the write offset written
	// with zeros (zeroahead.go), so that a flush's fsync need not convert
	// preallocated blocks. Off by default: it adds writes and fsyncs that
	// tests counting them do not expect; the server turns it on where the
	// filesystem overwrites blocks in place (vfs.WritesInPlace).
	ZeroAhead bool
}

// SnapshotMarker records that a durable snapshot of a group at Index, Term
// exists: entries at or below Index are covered by it.
type SnapshotMarker struct {
	Index, Term uint64
	// Installed marks a snapshot received from the leader and installed in
	// place of the log: raft then discards every entry, those above Index
	// too (they may conflict with the leader's log), and so does replay.
	// A snapshot this server took itself leaves the entries above it.
	Installed bool
}

// Batch is one consensus group's part of a raft Ready. Its records are
// written in the order snapshot marker, entries, hard state.
type Batch struct {
	Group uint64
	// HardState is not written when raft.IsEmptyHardState.
	HardState raftpb.HardState
	Entries   []raftpb.Entry
	// Snapshot, when set, says a snapshot at this index was installed or
	// taken: entries at or below it are dropped from the group's log.
	Snapshot *SnapshotMarker
}

// GroupState is what the log holds for a group after Open.
type GroupState struct {
	Snapshot  SnapshotMarker
	HardState raftpb.HardState
	// Entries are those after Snapshot.Index, contiguous.
	Entries []raftpb.Entry
}

// WAL is the write-ahead log of one server process, shared by all its
// consensus groups. Save, Release and Close are safe for concurrent use.
type WAL struct {
	fs     vfs.FS
	dir    string
	opts   Options
	logger *slog.Logger
	lock   io.Closer

	mu sync.Mutex // guards the fields down to writeMu
	// idle is signalled (on mu) when flushing becomes false.
	idle sync.Cond
	// pending are accepted Save calls not yet written, in log order.
	// Invariant: len(pending) > 0 implies flushing.
	pending []*saveRequest
	// flushing is true while one Save goroutine (the leader) writes.
	flushing bool
	// err is the sticky failure: once a write or fsync failed, every call
	// returns it; the log is never written again.
	err    error
	closed bool
	// queued is each group's log after every accepted Save, used to
	// refuse invalid batches before they are queued.
	queued map[uint64]*groupLog

	writeMu sync.Mutex // held by the goroutine writing or deleting segments; guards the fields below
	// segments are the segment files on disk, oldest first; the last is being written.
	segments   []segmentState
	file       vfs.File // the last segment
	offset     int64    // where the next flush goes in file
	headerEnd  int64    // the end of file's segment header
	fileSize   int64    // file's preallocated size
	zeroed     int64    // file is written with zeros (or records) up to here (zeroahead.go)
	dirDirty   bool     // a segment was created and the directory not yet synced
	written    map[uint64]*groupLog
	released   map[uint64]uint64
	flushBytes []byte

	// stats counts what the flushes wrote (Stats); updated under writeMu.
	stats flushStats
}

// flushStats are the WAL's running counts of its flushes.
type flushStats struct {
	flushes, saves, groups, entries atomic.Uint64
}

// Stats are running counts since Open: Flushes is the number of flushes
// written (each one write and one fsync; the zeros written ahead are not
// counted), Saves the Save calls they carried, Groups the sum over
// flushes of the distinct groups in each (so Groups/Flushes is how many
// groups one fsync covered), and Entries
// the raft entries written. Entries/Flushes is the batching group commit
// achieved: with several shards it counts the entries of every group a
// flush carried, where a Save call carries one group's.
type Stats struct {
	Flushes, Saves, Groups, Entries uint64
}

// Stats returns the WAL's running counts; safe for concurrent use.
func (w *WAL) Stats() Stats {
	return Stats{
		Flushes: w.stats.flushes.Load(),
		Saves:   w.stats.saves.Load(),
		Groups:  w.stats.groups.Load(),
		Entries: w.stats.entries.Load(),
	}
}

// saveRequest is one Save call waiting for its flush.
type saveRequest struct {
	body     []byte  // framed records
	pooled   *[]byte // body's buffer, if it came from bodyBuffers[class]
	class    int
	batches  []Batch
	maxIndex map[uint64]uint64
	done     chan error // receives errLeader, or the outcome
}

// bodyClasses are the capacities of the pooled buffers for the bodies of
// save requests, bodyBuffers their pools: a flush copies the bodies into its
// frame, so a body's buffer is free again as soon as the frame is built. The
// smallest holds about fifty 256-byte entries, the largest a thousand (a
// save under heavy load). A body that fits none gets a buffer of its own.
var bodyClasses = [...]int{16 << 10, 64 << 10, 256 << 10}

var bodyBuffers [len(bodyClasses)]sync.Pool

// newBody gives request an empty body of capacity size at least.
func (request *saveRequest) newBody(size int) {
	class := 0
	for class < len(bodyClasses) && size > bodyClasses[class] {
		class++
	}
	if class == len(bodyClasses) {
		request.body = make([]byte, 0, size)
		return
	}
	request.class = class
	request.pooled, _ = bodyBuffers[class].Get().(*[]byte)
	if request.pooled == nil {
		b := make([]byte, 0, bodyClasses[class])
		request.pooled = &b
	}
	request.body = (*request.pooled)[:0]
}

// releaseBody gives back the body's buffer, if pooled; the body is not
// read after.
func (request *saveRequest) releaseBody() {
	if request.pooled != nil && cap(request.body) == bodyClasses[request.class] {
		*request.pooled = request.body[:0]
		bodyBuffers[request.class].Put(request.pooled)
	}
	request.pooled, request.body = nil, nil
}

// errLeader tells a waiting Save that it now writes for everyone.
var errLeader = errors.New("wal: take over flushing")

// Open opens the log in dir, creating it if absent, verifies and repairs it
// and returns what it holds for each group. A torn tail of the newest
// segment is truncated; any other damage returns an error wrapping
// ErrCorrupt that names the file and byte offset. Open starts a new segment.
func Open(fs vfs.FS, dir string, opts Options) (*WAL, map[uint64]*GroupState, error) {
	if opts.SegmentSize <= 0 {
		opts.SegmentSize = DefaultSegmentSize
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, fmt.Errorf("wal: create %s: %w", dir, err)
	}
	lock, err := fs.Lock(filepath.Join(dir, "LOCK"))
	if err != nil {
		return nil, nil, fmt.Errorf("wal: lock %s: %w", dir, err)
	}
	w, states, err := open(fs, dir, opts)
	if err != nil {
		lock.Close()
		return nil, nil, err
	}
	w.lock = lock
	return w, states, nil
}

func open(fs vfs.FS, dir string, opts Options) (*WAL, map[uint64]*GroupState, error) {
	recovered, err := recoverLog(fs, dir, opts.Logger)
	if err != nil {
		return nil, nil, err
	}
	w := &WAL{
		fs: fs, dir: dir, opts: opts, logger: opts.Logger,
		queued: map[uint64]*groupLog{}, written: map[uint64]*groupLog{}, released: map[uint64]uint64{},
		segments: recovered.segments,
	}
	w.idle.L = &w.mu
	states := map[uint64]*GroupState{}
	for group, log := range recovered.groups {
		w.queued[group] = log.clone(true)
		w.written[group] = log.clone(true)
		states[group] = &GroupState{Snapshot: log.snapshot, HardState: log.hardState, Entries: log.entries}
	}
	w.writeMu.Lock()
	defer w.writeMu.Unlock()
	if err := w.createSegmentLocked(recovered.lastSequence + 1); err != nil {
		return nil, nil, err
	}
	if err := w.syncSegmentLocked(); err != nil {
		w.file.Close()
		return nil, nil, err
	}
	return w, states, nil
}

// Save writes every batch and returns once they are durable: all records of
// concurrent Save calls are written together and share one fsync (group
// commit). Batches of one call are written in order and contiguously, and a
// crash keeps all or none of them. Any write or fsync failure is returned to
// this and every later call: the WAL never retries (the page cache may have
// dropped the data) and the caller must stop the process.
func (w *WAL) Save(batches ...Batch) error {
	request, err := encodeRequest(batches)
	if err != nil {
		return err
	}
	w.mu.Lock()
	if err := w.acceptLocked(request); err != nil {
		w.mu.Unlock()
		return err
	}
	if len(request.body) == 0 {
		w.mu.Unlock()
		request.releaseBody()
		return nil
	}
	w.pending = append(w.pending, request)
	leader := !w.flushing
	w.flushing = true
	w.mu.Unlock()
	if !leader {
		if err := <-request.done; err != errLeader {
			return err
		}
	}
	w.flushPending()
	return <-request.done
}

// acceptLocked validates a request against the queued state and applies it.
// w.mu must be held.
func (w *WAL) acceptLocked(request *saveRequest) error {
	if w.err != nil {
		return w.err
	}
	if w.closed {
		return ErrClosed
	}
	trial := map[uint64]*groupLog{}
	for i := range request.batches {
		batch := &request.batches[i]
		if !writesRecords(batch) {
			continue
		}
		log, ok := trial[batch.Group]
		if !ok {
			log = newGroupLog(true)
			if queued, ok := w.queued[batch.Group]; ok {
				log = queued.clone(true)
			}
			trial[batch.Group] = log
		}
		if err := log.applyBatch(batch); err != nil {
			return fmt.Errorf("%w: group %d: %v", ErrInvalidBatch, batch.Group, err)
		}
	}
	for group, log := range trial {
		w.queued[group] = log
	}
	return nil
}

// writesRecords reports whether batch puts any record in the log. A batch
// that does not (no marker, no entry, an empty hard state) must leave the
// writer's state of its group untouched: replay learns of a group only from
// its records, so a segment checkpoint naming a group replay has never met
// makes the log unreadable.
func writesRecords(batch *Batch) bool {
	return batch.Snapshot != nil || len(batch.Entries) > 0 || !raft.IsEmptyHardState(batch.HardState)
}

func encodeRequest(batches []Batch) (*saveRequest, error) {
	request := &saveRequest{batches: batches, maxIndex: map[uint64]uint64{}, done: make(chan error, 1)}
	request.newBody(encodedSize(batches))
	var err error
	for i := range batches {
		batch := &batches[i]
		if batch.Snapshot != nil {
			request.body = appendRecord(request.body, recordSnapshotMarker, encodeSnapshotMarker(batch.Group, *batch.Snapshot))
		}
		for j := range batch.Entries {
			if request.body, err = appendEntryRecord(request.body, batch.Group, &batch.Entries[j]); err != nil {
				return nil, err
			}
			request.maxIndex[batch.Group] = max(request.maxIndex[batch.Group], batch.Entries[j].Index)
		}
		if !raft.IsEmptyHardState(batch.HardState) {
			request.body = appendRecord(request.body, recordHardState, encodeHardState(batch.Group, batch.HardState))
		}
	}
	if len(request.body) > maxPayload {
		return nil, fmt.Errorf("%w: %d bytes in one call", ErrInvalidBatch, len(request.body))
	}
	return request, nil
}

// encodedSize is an upper bound of the bytes encodeRequest writes for
// batches, so that it encodes into one allocation.
func encodedSize(batches []Batch) int {
	size := 0
	for i := range batches {
		batch := &batches[i]
		// Each record: header, group uvarint and, for the marker and the
		// hard state, at most four more uvarints and a flag.
		size += 2 * (recordHeaderSize + 5*binary.MaxVarintLen64 + 1)
		for j := range batch.Entries {
			size += recordHeaderSize + binary.MaxVarintLen64 + batch.Entries[j].Size()
		}
	}
	return size
}

// flushPending is run by the leader: it writes every pending request as one
// flush, reports to each, and hands leadership to the next waiter, if any,
// so that no caller writes for others indefinitely.
func (w *WAL) flushPending() {
	w.writeMu.Lock()
	w.mu.Lock()
	requests, failed := w.pending, w.err
	w.pending = nil
	w.mu.Unlock()
	err := failed
	if err == nil {
		err = w.writeFlushLocked(requests)
		switch {
		case errors.Is(err, ErrNoSpace):
			w.unqueue()
		case err != nil:
			err = w.fail(err)
		}
	}
	w.writeMu.Unlock()
	for _, request := range requests {
		request.done <- err
	}
	if err == nil && w.zeroAheadDue() {
		// Every caller is answered; the zeros are written before the next
		// flush, without holding up the return of this leader's Save.
		go func() {
			w.zeroAhead()
			w.handOff()
		}()
		return
	}
	w.handOff()
}

// handOff ends a leader's turn: it makes the first waiting Save the next
// leader, or marks the WAL idle when none waits (or fails them all if the
// WAL failed).
func (w *WAL) handOff() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.pending) == 0 {
		w.flushing = false
		w.idle.Broadcast()
		return
	}
	if w.err != nil {
		for _, request := range w.pending {
			request.done <- w.err
		}
		w.pending = nil
		w.flushing = false
		w.idle.Broadcast()
		return
	}
	w.pending[0].done <- errLeader
}

// unqueue forgets the requests of a flush refused for want of space: the
// queued state becomes the written one again, with the requests still
// pending (accepted after that flush began) applied on top.
func (w *WAL) unqueue() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.queued = map[uint64]*groupLog{}
	for group, log := range w.written {
		w.queued[group] = log.clone(true)
	}
	for _, request := range w.pending {
		for i := range request.batches {
			batch := &request.batches[i]
			if !writesRecords(batch) {
				continue
			}
			log, ok := w.queued[batch.Group]
			if !ok {
				log = newGroupLog(true)
				w.queued[batch.Group] = log
			}
			_ = log.applyBatch(batch) // validated when accepted, on top of what is now queued again
		}
	}
}

// fail makes err the sticky failure of the WAL and returns it.
func (w *WAL) fail(err error) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil {
		w.err = fmt.Errorf("wal: failed, the process must restart: %w", err)
		w.logger.Error("wal: write failed; refusing all further writes", "error", err)
	}
	return w.err
}

// writeFlushLocked writes requests as one flush and fsyncs it. w.writeMu
// must be held.
func (w *WAL) writeFlushLocked(requests []*saveRequest) error {
	bodyLength := 0
	for _, request := range requests {
		bodyLength += len(request.body)
	}
	frameLength := int64(recordHeaderSize + 4 + bodyLength)
	if w.offset+frameLength > w.opts.SegmentSize && w.offset > w.headerEnd {
		if err := w.rollLocked(); err != nil {
			return err
		}
	}
	frame := appendRecord(w.flushBytes[:0], recordFlush, encodeFlush(bodyLength))
	for _, request := range requests {
		frame = append(frame, request.body...)
		request.releaseBody()
	}
	w.flushBytes = frame[:0]
	if end := w.offset + int64(len(frame)); end > w.fileSize {
		if err := w.file.Preallocate(end); err != nil {
			return noSpaceOr(fmt.Errorf("preallocate %s: %w", w.file.Name(), err))
		}
		w.fileSize = end
	}
	if err := w.writeDurableLocked(frame); err != nil {
		return err
	}
	w.offset += int64(len(frame))
	w.recordWrittenLocked(requests)
	w.countFlushLocked(requests)
	return nil
}

// countFlushLocked adds a written flush of requests to w.stats. w.writeMu
// must be held.
func (w *WAL) countFlushLocked(requests []*saveRequest) {
	var groups [8]uint64
	seen := groups[:0]
	entries := 0
	for _, request := range requests {
		for i := range request.batches {
			batch := &request.batches[i]
			entries += len(batch.Entries)
			if writesRecords(batch) && !slices.Contains(seen, batch.Group) {
				seen = append(seen, batch.Group)
			}
		}
	}
	w.stats.flushes.Add(1)
	w.stats.saves.Add(uint64(len(requests)))
	w.stats.groups.Add(uint64(len(seen)))
	w.stats.entries.Add(uint64(entries))
}

func (w *WAL) recordWrittenLocked(requests []*saveRequest) {
	current := &w.segments[len(w.segments)-1]
	for _, request := range requests {
		for i := range request.batches {
			batch := &request.batches[i]
			if !writesRecords(batch) {
				continue // the reader never learns of the group: no checkpoint may name it
			}
			log, ok := w.written[batch.Group]
			if !ok {
				log = newGroupLog(true)
				w.written[batch.Group] = log
			}
			_ = log.applyBatch(batch) // validated when accepted
		}
		for group, index := range request.maxIndex {
			current.maxIndex[group] = max(current.maxIndex[group], index)
		}
	}
}

// syncSegmentLocked fsyncs the current segment and, if it is new, the directory.
func (w *WAL) syncSegmentLocked() error {
	if w.opts.UnsafeNoSync {
		return nil
	}
	if err := w.file.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", w.file.Name(), err)
	}
	return w.syncDirLocked()
}

// writeDurableLocked writes frame at the write offset and makes it durable
// as syncSegmentLocked does: in one step where the segment's file offers it
// (vfs.WriteSyncer: the write and its fsync submitted to the kernel
// together), else a write and then the flush.
func (w *WAL) writeDurableLocked(frame []byte) error {
	both, ok := w.file.(vfs.WriteSyncer)
	if !ok || w.opts.UnsafeNoSync {
		if _, err := w.file.WriteAt(frame, w.offset); err != nil {
			return fmt.Errorf("write %s at %d: %w", w.file.Name(), w.offset, err)
		}
		return w.syncSegmentLocked()
	}
	if err := both.WriteAtSync(frame, w.offset); err != nil {
		return fmt.Errorf("write and fsync %s at %d: %w", w.file.Name(), w.offset, err)
	}
	return w.syncDirLocked()
}

// syncDirLocked makes the WAL directory's entries durable if a segment was
// created or removed since it last did.
func (w *WAL) syncDirLocked() error {
	if w.dirDirty {
		if err := w.fs.SyncDir(w.dir); err != nil {
			return fmt.Errorf("fsync directory %s: %w", w.dir, err)
		}
		w.dirDirty = false
	}
	return nil
}

// rollLocked starts the next segment, then closes the current one (already
// durable: every flush is fsynced before it is acknowledged). If the new
// segment cannot be preallocated for want of space, the current one stays
// open and ErrNoSpace is returned.
func (w *WAL) rollLocked() error {
	previous := w.file
	if err := w.createSegmentLocked(w.segments[len(w.segments)-1].sequence + 1); err != nil {
		return err
	}
	if err := previous.Close(); err != nil {
		return fmt.Errorf("close %s: %w", previous.Name(), err)
	}
	return nil
}

// noSpaceOr returns err marked as ErrNoSpace when it says the filesystem is
// full, else err.
func noSpaceOr(err error) error {
	if vfs.IsNoSpace(err) {
		return fmt.Errorf("%w: %v", ErrNoSpace, err)
	}
	return err
}

// createSegmentLocked creates, preallocates and heads a segment with the
// written state of every group. It is durable after syncSegmentLocked.
func (w *WAL) createSegmentLocked(sequence uint64) error {
	name := filepath.Join(w.dir, segmentName(sequence))
	file, err := w.fs.Create(name)
	if err != nil {
		return noSpaceOr(fmt.Errorf("wal: create %s: %w", name, err))
	}
	header := appendRecord(nil, recordSegmentHeader, encodeSegmentHeader(w.checkpointLocked(sequence)))
	if err := file.Preallocate(w.opts.SegmentSize); err != nil {
		file.Close()
		if vfs.IsNoSpace(err) {
			// Nothing was written to it: remove it, so the space it may
			// hold is free and Open never meets it (a crash before the
			// removal leaves a headerless last segment, a torn tail).
			_ = w.fs.Remove(name)
		}
		return noSpaceOr(fmt.Errorf("wal: preallocate %s: %w", name, err))
	}
	if _, err := file.WriteAt(header, 0); err != nil {
		file.Close()
		return fmt.Errorf("wal: write header of %s: %w", name, err)
	}
	w.file, w.offset, w.headerEnd, w.zeroed = file, int64(len(header)), int64(len(header)), int64(len(header))
	w.fileSize = max(w.opts.SegmentSize, int64(len(header)))
	w.dirDirty = true
	w.segments = append(w.segments, segmentState{sequence: sequence, maxIndex: map[uint64]uint64{}})
	return nil
}

func (w *WAL) checkpointLocked(sequence uint64) segmentHeader {
	header := segmentHeader{sequence: sequence}
	for group, log := range w.written {
		header.checkpoints = append(header.checkpoints, log.checkpoint(group))
	}
	slices.SortFunc(header.checkpoints, func(a, b groupCheckpoint) int {
		switch {
		case a.group < b.group:
			return -1
		case a.group > b.group:
			return 1
		}
		return 0
	})
	return header
}

// Release tells the WAL that group's entries up to index are covered by a
// durable snapshot whose marker was saved (Batch.Snapshot); index is capped
// at the newest saved marker. Segments whose entries are all released, for
// every group, are deleted oldest first, each deletion made durable before
// the next so a crash leaves a contiguous log.
func (w *WAL) Release(group, index uint64) error {
	w.mu.Lock()
	failed, closed := w.err, w.closed
	w.mu.Unlock()
	if failed != nil {
		return failed
	}
	if closed {
		return ErrClosed
	}
	w.writeMu.Lock()
	defer w.writeMu.Unlock()
	if log, ok := w.written[group]; ok {
		w.released[group] = max(w.released[group], min(index, log.snapshot.Index))
	}
	for len(w.segments) > 1 && w.releasableLocked(w.segments[0]) {
		name := filepath.Join(w.dir, segmentName(w.segments[0].sequence))
		if err := w.fs.Remove(name); err != nil {
			return fmt.Errorf("wal: remove released segment: %w", err)
		}
		if err := w.fs.SyncDir(w.dir); err != nil {
			return fmt.Errorf("wal: fsync directory %s after removing %s: %w", w.dir, name, err)
		}
		w.logger.Debug("wal: released segment", "file", name)
		w.segments = w.segments[1:]
	}
	return nil
}

func (w *WAL) releasableLocked(segment segmentState) bool {
	for group, index := range segment.maxIndex {
		if index > w.released[group] {
			return false
		}
	}
	return true
}

// Close waits for writes in progress and closes the log. Later calls
// return ErrClosed.
func (w *WAL) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return ErrClosed
	}
	w.closed = true
	for w.flushing {
		w.idle.Wait()
	}
	w.mu.Unlock()
	w.writeMu.Lock()
	defer w.writeMu.Unlock()
	err := w.file.Close()
	if lockErr := w.lock.Close(); err == nil {
		err = lockErr
	}
	return err
}

// SegmentCount reports how many segment files the log has (for tests and metrics).
// PinsOldest reports whether group holds back the release of the oldest
// segment: the log has more than one segment and the oldest holds entries of
// group that no snapshot of it covers (Release) yet. Segments go only from
// the front, so one idle group that never snapshots would keep every later
// segment too; its node snapshots when it pins.
func (w *WAL) PinsOldest(group uint64) bool {
	w.writeMu.Lock()
	defer w.writeMu.Unlock()
	if len(w.segments) < 2 {
		return false
	}
	return w.segments[0].maxIndex[group] > w.released[group]
}

func (w *WAL) SegmentCount() int {
	w.writeMu.Lock()
	defer w.writeMu.Unlock()
	return len(w.segments)
}
