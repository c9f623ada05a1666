package wal

import (
	"encoding/binary"
	"errors"
	"fmt"

	"go.etcd.io/raft/v3/raftpb"
)

// Payload encodings. Integers are unsigned varints unless said otherwise.
//
//	segment header:  magic "latchWAL", version (u32 LE), sequence (u64 LE),
//	                 checkpoint: count, then per group: group, snapshot
//	                 index, snapshot term, last index, term, vote, commit
//	flush:           body length (u32 LE): the bytes of records that follow
//	entry:           group, then a marshalled raftpb.Entry
//	hard state:      group, term, vote, commit
//	snapshot marker: group, index, term
const (
	segmentMagic   = "latchWAL"
	segmentVersion = 1
)

var errBadPayload = errors.New("malformed record payload")

// groupCheckpoint is a group's state at a segment boundary, so that a log
// whose older segments were released can be read from its first segment.
type groupCheckpoint struct {
	group     uint64
	snapshot  SnapshotMarker
	lastIndex uint64
	hardState raftpb.HardState
}

type segmentHeader struct {
	sequence    uint64
	checkpoints []groupCheckpoint
}

func encodeSegmentHeader(header segmentHeader) []byte {
	out := append([]byte(segmentMagic), 0, 0, 0, 0)
	binary.LittleEndian.PutUint32(out[len(segmentMagic):], segmentVersion)
	out = binary.LittleEndian.AppendUint64(out, header.sequence)
	out = binary.AppendUvarint(out, uint64(len(header.checkpoints)))
	for _, checkpoint := range header.checkpoints {
		out = appendUvarints(out, checkpoint.group, checkpoint.snapshot.Index, checkpoint.snapshot.Term,
			checkpoint.lastIndex, checkpoint.hardState.Term, checkpoint.hardState.Vote, checkpoint.hardState.Commit)
	}
	return out
}

func decodeSegmentHeader(payload []byte) (segmentHeader, error) {
	fixed := len(segmentMagic) + 4 + 8
	if len(payload) < fixed || string(payload[:len(segmentMagic)]) != segmentMagic {
		return segmentHeader{}, fmt.Errorf("%w: bad segment magic", errBadPayload)
	}
	if version := binary.LittleEndian.Uint32(payload[len(segmentMagic):]); version != segmentVersion {
		return segmentHeader{}, fmt.Errorf("%w: unsupported segment version %d", errBadPayload, version)
	}
	header := segmentHeader{sequence: binary.LittleEndian.Uint64(payload[len(segmentMagic)+4:])}
	decoder := uvarintDecoder{data: payload[fixed:]}
	count := decoder.next()
	if count > uint64(len(payload)) {
		return segmentHeader{}, fmt.Errorf("%w: checkpoint count %d", errBadPayload, count)
	}
	for range count {
		var checkpoint groupCheckpoint
		decoder.read(&checkpoint.group, &checkpoint.snapshot.Index, &checkpoint.snapshot.Term, &checkpoint.lastIndex,
			&checkpoint.hardState.Term, &checkpoint.hardState.Vote, &checkpoint.hardState.Commit)
		header.checkpoints = append(header.checkpoints, checkpoint)
	}
	return header, decoder.finish()
}

func appendUvarints(out []byte, values ...uint64) []byte {
	for _, value := range values {
		out = binary.AppendUvarint(out, value)
	}
	return out
}

// uvarintDecoder reads varints, remembering the first failure.
type uvarintDecoder struct {
	data []byte
	err  error
}

func (d *uvarintDecoder) next() uint64 {
	if d.err != nil {
		return 0
	}
	value, n := binary.Uvarint(d.data)
	if n <= 0 {
		d.err = fmt.Errorf("%w: bad varint", errBadPayload)
		return 0
	}
	d.data = d.data[n:]
	return value
}

func (d *uvarintDecoder) read(targets ...*uint64) {
	for _, target := range targets {
		*target = d.next()
	}
}

// finish reports the first failure, or trailing bytes.
func (d *uvarintDecoder) finish() error {
	if d.err == nil && len(d.data) != 0 {
		d.err = fmt.Errorf("%w: %d trailing bytes", errBadPayload, len(d.data))
	}
	return d.err
}

// appendEntryRecord frames an entry record into dst without an extra copy.
func appendEntryRecord(dst []byte, group uint64, entry *raftpb.Entry) ([]byte, error) {
	start := len(dst)
	dst = append(dst, make([]byte, recordHeaderSize)...)
	dst = binary.AppendUvarint(dst, group)
	size := entry.Size()
	dst = append(dst, make([]byte, size)...)
	if _, err := entry.MarshalToSizedBuffer(dst[len(dst)-size:]); err != nil {
		return nil, fmt.Errorf("wal: marshal entry %d of group %d: %w", entry.Index, group, err)
	}
	sealRecord(dst[start:], recordEntry)
	return dst, nil
}

func decodeEntry(payload []byte) (uint64, raftpb.Entry, error) {
	group, n := binary.Uvarint(payload)
	if n <= 0 {
		return 0, raftpb.Entry{}, fmt.Errorf("%w: bad entry group", errBadPayload)
	}
	var entry raftpb.Entry
	if err := entry.Unmarshal(payload[n:]); err != nil {
		return 0, raftpb.Entry{}, fmt.Errorf("%w: entry: %v", errBadPayload, err)
	}
	return group, entry, nil
}

func encodeHardState(group uint64, state raftpb.HardState) []byte {
	return appendUvarints(nil, group, state.Term, state.Vote, state.Commit)
}

func decodeHardState(payload []byte) (uint64, raftpb.HardState, error) {
	decoder := uvarintDecoder{data: payload}
	var group uint64
	var state raftpb.HardState
	decoder.read(&group, &state.Term, &state.Vote, &state.Commit)
	return group, state, decoder.finish()
}

// markerInstalled is the flag bit of SnapshotMarker.Installed.
const markerInstalled = 1

func encodeSnapshotMarker(group uint64, marker SnapshotMarker) []byte {
	var flags uint64
	if marker.Installed {
		flags |= markerInstalled
	}
	return appendUvarints(nil, group, marker.Index, marker.Term, flags)
}

func decodeSnapshotMarker(payload []byte) (uint64, SnapshotMarker, error) {
	decoder := uvarintDecoder{data: payload}
	var group, flags uint64
	var marker SnapshotMarker
	decoder.read(&group, &marker.Index, &marker.Term, &flags)
	if decoder.err == nil && flags&^markerInstalled != 0 {
		decoder.err = fmt.Errorf("%w: unknown snapshot marker flags %#x", errBadPayload, flags)
	}
	marker.Installed = flags&markerInstalled != 0
	return group, marker, decoder.finish()
}

func encodeFlush(bodyLength int) []byte {
	return binary.LittleEndian.AppendUint32(nil, uint32(bodyLength))
}

func decodeFlush(payload []byte) (int, error) {
	if len(payload) != 4 {
		return 0, fmt.Errorf("%w: flush record of %d bytes", errBadPayload, len(payload))
	}
	return int(binary.LittleEndian.Uint32(payload)), nil
}
