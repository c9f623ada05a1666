package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/latch-io/latch/internal/vfs"
)

// ErrCorrupt is matched (errors.Is) by every error that reports damage to
// the log: a record failing its checksum anywhere but a torn tail, a
// missing segment, records that contradict each other.
var ErrCorrupt = errors.New("wal: corrupt log")

// CorruptError names the damaged file and the byte offset of the damage.
type CorruptError struct {
	File   string
	Offset int64
	Reason error
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("wal: corrupt log: %s at byte offset %d: %v", e.File, e.Offset, e.Reason)
}

func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }
func (e *CorruptError) Unwrap() error        { return e.Reason }

const segmentSuffix = ".wal"

func segmentName(sequence uint64) string { return fmt.Sprintf("%016x%s", sequence, segmentSuffix) }

func parseSegmentName(name string) (uint64, bool) {
	hex, found := strings.CutSuffix(name, segmentSuffix)
	if !found || len(hex) != 16 {
		return 0, false
	}
	sequence, err := strconv.ParseUint(hex, 16, 64)
	return sequence, err == nil
}

// segmentState is what the writer remembers of a segment on disk.
type segmentState struct {
	sequence uint64
	// maxIndex is the highest entry index each group wrote in the segment.
	maxIndex map[uint64]uint64
}

// recovery is the outcome of reading the whole log.
type recovery struct {
	groups       map[uint64]*groupLog
	segments     []segmentState
	lastSequence uint64
}

// recoverLog reads every segment of dir in order, repairing a torn tail of
// the last one, and returns the groups' logs.
func recoverLog(fs vfs.FS, dir string, logger *slog.Logger) (*recovery, error) {
	sequences, err := listSegments(fs, dir)
	if err != nil {
		return nil, err
	}
	result := &recovery{groups: map[uint64]*groupLog{}}
	for i, sequence := range sequences {
		if i > 0 && sequence != sequences[i-1]+1 {
			return nil, &CorruptError{File: filepath.Join(dir, segmentName(sequence)), Offset: 0,
				Reason: fmt.Errorf("segments %s to %s are missing", segmentName(sequences[i-1]+1), segmentName(sequence-1))}
		}
		reader := &segmentReader{
			name:   filepath.Join(dir, segmentName(sequence)),
			last:   i == len(sequences)-1,
			first:  i == 0,
			groups: result.groups,
			state:  segmentState{sequence: sequence, maxIndex: map[uint64]uint64{}},
		}
		if err := reader.read(fs, logger); err != nil {
			return nil, err
		}
		if !reader.dropped {
			result.segments = append(result.segments, reader.state)
			result.lastSequence = sequence
		}
	}
	for group, log := range result.groups {
		if from, to, ok := log.hole(); ok {
			return nil, &CorruptError{File: filepath.Join(dir, segmentName(sequences[0])), Offset: 0,
				Reason: fmt.Errorf("group %d entries %d to %d are missing: an earlier segment was lost", group, from, to)}
		}
	}
	return result, nil
}

func listSegments(fs vfs.FS, dir string) ([]uint64, error) {
	names, err := fs.List(dir)
	if err != nil {
		return nil, fmt.Errorf("wal: list %s: %w", dir, err)
	}
	var sequences []uint64
	for _, name := range names {
		if sequence, ok := parseSegmentName(name); ok {
			sequences = append(sequences, sequence)
		}
	}
	slices.Sort(sequences)
	return sequences, nil
}

// segmentReader reads one segment file into the groups' logs.
type segmentReader struct {
	name    string
	last    bool // the newest segment: the only place a torn write may be
	first   bool // the oldest segment: its checkpoint starts the groups
	groups  map[uint64]*groupLog
	state   segmentState
	dropped bool // the segment's header was torn: the file was removed
}

func (r *segmentReader) corrupt(offset int, format string, args ...any) error {
	return &CorruptError{File: r.name, Offset: int64(offset), Reason: fmt.Errorf(format, args...)}
}

func (r *segmentReader) read(fs vfs.FS, logger *slog.Logger) error {
	data, err := readFile(fs, r.name)
	if err != nil {
		return err
	}
	header, err := decodeRecord(data, 0)
	if err != nil {
		if r.last && (errors.Is(err, errZeroHeader) || looksTorn(data, 0, claimedSize(data, 0), len(data))) && !headerWasDurable(data) {
			logger.Warn("wal: removing newest segment with a torn header", "file", r.name, "error", err)
			r.dropped = true
			return removeSegment(fs, r.name)
		}
		return r.corrupt(0, "segment header: %w", err)
	}
	if err := r.applyHeader(header); err != nil {
		return err
	}
	end, tornReason := r.readFlushes(data, header.size)
	if err, ok := tornReason.(*CorruptError); ok {
		return err
	}
	if tornReason != nil {
		logger.Warn("wal: truncating torn tail", "file", r.name, "offset", end, "reason", tornReason)
	}
	if r.last && end < len(data) {
		return truncateSegment(fs, r.name, int64(end))
	}
	return nil
}

func (r *segmentReader) applyHeader(record decodedRecord) error {
	if record.kind != recordSegmentHeader {
		return r.corrupt(0, "first record has type %d, not a segment header", record.kind)
	}
	header, err := decodeSegmentHeader(record.payload)
	if err != nil {
		return r.corrupt(0, "segment header: %w", err)
	}
	if header.sequence != r.state.sequence {
		return r.corrupt(0, "segment header says sequence %d", header.sequence)
	}
	for _, checkpoint := range header.checkpoints {
		if r.first {
			r.groups[checkpoint.group] = fromCheckpoint(checkpoint, false)
			continue
		}
		log, ok := r.groups[checkpoint.group]
		if !ok {
			// A group no earlier record named has nothing: its checkpoint
			// must be empty. Writers before the fix of the empty batch
			// checkpointed such groups; that says nothing and is accepted.
			log = newGroupLog(false)
		}
		if log.checkpoint(checkpoint.group) != checkpoint {
			return r.corrupt(0, "checkpoint of group %d disagrees with the preceding segments", checkpoint.group)
		}
	}
	return nil
}

// readFlushes reads flushes from offset to the end of the data. It returns
// where the valid log ends and, when it stopped early, why: a *CorruptError
// for damage, any other error for a torn tail (only in the last segment).
func (r *segmentReader) readFlushes(data []byte, offset int) (int, error) {
	for offset < len(data) {
		next, err := r.readFlush(data, offset)
		// Only readFlush's own unwrapped errZeroHeader (the flush header is
		// zero) ends the log; a *CorruptError may wrap errZeroHeader too.
		if err == errZeroHeader {
			if !r.last && !allZero(data[offset:]) {
				return offset, r.corrupt(offset+firstNonZero(data[offset:]), "data after the end of a closed segment")
			}
			if r.last && !allZero(data[offset:]) {
				// A torn flush whose first sector was lost reads as zeros
				// to the end of that sector, and nothing valid follows it.
				if !looksTorn(data, offset, offset+recordHeaderSize, len(data)) {
					return offset, r.corrupt(offset, "zeroed flush header in written data")
				}
				if at, _, ok := validFlushFrom(data, offset+1); ok {
					return offset, r.corrupt(offset, "zeroed flush header followed by a valid flush at offset %d", at)
				}
			}
			return offset, nil
		}
		if err != nil {
			return offset, err
		}
		offset = next
	}
	return offset, nil
}

// readFlush verifies the flush at offset and applies it; it returns the
// offset after it.
func (r *segmentReader) readFlush(data []byte, offset int) (int, error) {
	flush, err := decodeRecord(data, offset)
	if errors.Is(err, errZeroHeader) {
		return 0, err
	}
	if err != nil {
		// The flush record is header and payload: a crash may have written
		// the header's sector and not the payload's.
		if r.last && looksTorn(data, offset, offset+claimedSize(data, offset), len(data)) {
			return 0, fmt.Errorf("flush header: %w", err)
		}
		return 0, r.corrupt(offset, "flush header: %w", err)
	}
	if flush.kind != recordFlush {
		return 0, r.corrupt(offset, "record of type %d where a flush header belongs", flush.kind)
	}
	bodyLength, err := decodeFlush(flush.payload)
	if err != nil {
		return 0, r.corrupt(offset, "flush header: %w", err)
	}
	bodyStart := offset + flush.size
	bodyEnd := bodyStart + bodyLength
	if bodyEnd > len(data) {
		if r.last {
			return 0, fmt.Errorf("flush of %d bytes runs past the end of the file", bodyLength)
		}
		return 0, r.corrupt(offset, "flush of %d bytes runs past the end of the file", bodyLength)
	}
	records, failedAt, err := decodeFlushBody(data[:bodyEnd], bodyStart)
	if err != nil {
		if r.last && looksTorn(data, failedAt, failedAt+claimedSize(data[:bodyEnd], failedAt), bodyEnd) && !validRecordAt(data, bodyEnd) {
			return 0, fmt.Errorf("record at offset %d: %w", failedAt, err)
		}
		return 0, r.corrupt(failedAt, "%w", err)
	}
	for _, record := range records {
		if err := r.apply(record); err != nil {
			return 0, err
		}
	}
	return bodyEnd, nil
}

type positionedRecord struct {
	decodedRecord
	offset int
}

func decodeFlushBody(data []byte, offset int) ([]positionedRecord, int, error) {
	var records []positionedRecord
	for offset < len(data) {
		record, err := decodeRecord(data, offset)
		if err != nil {
			return nil, offset, err
		}
		records = append(records, positionedRecord{decodedRecord: record, offset: offset})
		offset += record.size
	}
	return records, 0, nil
}

func (r *segmentReader) group(id uint64) *groupLog {
	log, ok := r.groups[id]
	if !ok {
		log = newGroupLog(false)
		r.groups[id] = log
	}
	return log
}

func (r *segmentReader) apply(record positionedRecord) error {
	switch record.kind {
	case recordEntry:
		group, entry, err := decodeEntry(record.payload)
		if err != nil {
			return r.corrupt(record.offset, "%w", err)
		}
		if err := r.group(group).appendEntry(entry); err != nil {
			return r.corrupt(record.offset, "group %d: %w", group, err)
		}
		r.state.maxIndex[group] = max(r.state.maxIndex[group], entry.Index)
	case recordHardState:
		group, state, err := decodeHardState(record.payload)
		if err != nil {
			return r.corrupt(record.offset, "%w", err)
		}
		r.group(group).applyHardState(state)
	case recordSnapshotMarker:
		group, marker, err := decodeSnapshotMarker(record.payload)
		if err != nil {
			return r.corrupt(record.offset, "%w", err)
		}
		r.group(group).applySnapshot(marker)
	default:
		return r.corrupt(record.offset, "record of type %d inside a flush", record.kind)
	}
	return nil
}

// looksTorn reports whether a record failing at data[start:end), in a
// flush ending at limit, can be a write that did not fully reach the disk
// before a crash: the range runs past the end of the file, or a 512-byte
// sector it overlaps is zero from start (or the sector's beginning) to the
// sector's end or limit. An unwritten sector of a preallocated file reads as
// zeros wherever the new flush should have put bytes, so a torn record
// shows that; a bit flip in written data does not (a record's first byte is
// never zero, and a flip cannot make one zero).
func looksTorn(data []byte, start, end, limit int) bool {
	if end > len(data) || limit > len(data) {
		return true
	}
	for sector := start / vfs.SectorSize * vfs.SectorSize; sector < end; sector += vfs.SectorSize {
		from, to := max(sector, start), min(sector+vfs.SectorSize, limit)
		if from < to && allZero(data[from:to]) {
			return true
		}
	}
	return false
}

// claimedSize is the size of the record at offset as far as its header can
// be trusted: the whole record if the header verifies, else the header.
func claimedSize(data []byte, offset int) int {
	if offset+recordHeaderSize > len(data) {
		return recordHeaderSize
	}
	header := data[offset : offset+recordHeaderSize]
	if binary.LittleEndian.Uint32(header[12:16]) != crc32.Checksum(header[:12], castagnoli) {
		return recordHeaderSize
	}
	return recordHeaderSize + int(min(binary.LittleEndian.Uint32(header[4:8]), maxPayload))
}

// headerWasDurable reports whether two valid flushes follow a segment's
// damaged header. A segment header is fsynced with the first flush after it
// at the latest, so a second valid flush means the header was durable and its
// damage is not a torn write.
func headerWasDurable(data []byte) bool {
	_, firstEnd, ok := validFlushFrom(data, 1)
	if !ok {
		return false
	}
	_, _, ok = validFlushFrom(data, firstEnd)
	return ok
}

// validFlushFrom looks for a whole, valid flush starting at or after offset
// and returns where it starts and ends. A torn write leaves at most the
// last flush damaged, so zeros followed by a valid flush are not a torn tail.
func validFlushFrom(data []byte, offset int) (int, int, bool) {
	for at := offset; at+recordHeaderSize <= len(data); at++ {
		if data[at] != recordMagic || recordType(data[at+1]) != recordFlush {
			continue
		}
		flush, err := decodeRecord(data, at)
		if err != nil {
			continue
		}
		length, err := decodeFlush(flush.payload)
		if err != nil || at+flush.size+length > len(data) {
			continue
		}
		if _, _, err := decodeFlushBody(data[:at+flush.size+length], at+flush.size); err == nil {
			return at, at + flush.size + length, true
		}
	}
	return 0, 0, false
}

func validRecordAt(data []byte, offset int) bool {
	_, err := decodeRecord(data, offset)
	return err == nil
}

func firstNonZero(data []byte) int {
	for i, b := range data {
		if b != 0 {
			return i
		}
	}
	return len(data)
}

func readFile(fs vfs.FS, name string) ([]byte, error) {
	file, err := fs.Open(name)
	if err != nil {
		return nil, fmt.Errorf("wal: open %s: %w", name, err)
	}
	defer file.Close()
	info, err := file.Stat()
	if err != nil {
		return nil, fmt.Errorf("wal: stat %s: %w", name, err)
	}
	data := make([]byte, info.Size())
	if _, err := io.ReadFull(file, data); err != nil {
		return nil, fmt.Errorf("wal: read %s: %w", name, err)
	}
	return data, nil
}

func removeSegment(fs vfs.FS, name string) error {
	if err := fs.Remove(name); err != nil {
		return fmt.Errorf("wal: remove torn segment: %w", err)
	}
	if err := fs.SyncDir(filepath.Dir(name)); err != nil {
		return fmt.Errorf("wal: sync directory after removing %s: %w", name, err)
	}
	return nil
}

// truncateSegment cuts the last segment at the end of its valid log and
// makes that durable, so no stale bytes of a torn write can ever be read
// after records written later.
func truncateSegment(fs vfs.FS, name string, size int64) error {
	file, err := fs.OpenReadWrite(name)
	if err != nil {
		return fmt.Errorf("wal: open %s to repair: %w", name, err)
	}
	if err := file.Truncate(size); err != nil {
		file.Close()
		return fmt.Errorf("wal: truncate %s to %d: %w", name, size, err)
	}
	if err := file.Sync(); err != nil {
		file.Close()
		return fmt.Errorf("wal: sync %s after truncation: %w", name, err)
	}
	return file.Close()
}
