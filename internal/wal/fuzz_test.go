package wal

import (
	"testing"
)

// FuzzDecodeRecord feeds arbitrary bytes to the record decoder and the
// payload decoders: they must never panic, and a record they accept must
// re-encode to the same bytes.
func FuzzDecodeRecord(f *testing.F) {
	f.Add(appendRecord(nil, recordEntry, []byte{1, 8, 1, 16, 1, 26, 1, 'x'}))
	f.Add(appendRecord(nil, recordHardState, encodeHardState(1, hardStateForFuzz())))
	f.Add(appendRecord(nil, recordSnapshotMarker, encodeSnapshotMarker(3, SnapshotMarker{Index: 9, Term: 2})))
	f.Add(appendRecord(nil, recordFlush, encodeFlush(40)))
	f.Add(appendRecord(nil, recordSegmentHeader, encodeSegmentHeader(segmentHeader{sequence: 7,
		checkpoints: []groupCheckpoint{{group: 1, snapshot: SnapshotMarker{Index: 5, Term: 1}, lastIndex: 8}}})))
	f.Add(make([]byte, 16))
	f.Add([]byte{recordMagic, 3, 0, 0, 255, 255, 255, 255})
	f.Fuzz(func(t *testing.T, data []byte) {
		for offset := 0; offset < len(data) && offset < 64; offset++ {
			record, err := decodeRecord(data, offset)
			if err != nil {
				continue
			}
			again := appendRecord(nil, record.kind, record.payload)
			if string(again) != string(data[offset:offset+record.size]) {
				t.Fatalf("record at %d does not re-encode to its bytes", offset)
			}
			decodePayload(record)
		}
	})
}

func decodePayload(record decodedRecord) {
	switch record.kind {
	case recordEntry:
		decodeEntry(record.payload)
	case recordHardState:
		decodeHardState(record.payload)
	case recordSnapshotMarker:
		decodeSnapshotMarker(record.payload)
	case recordFlush:
		decodeFlush(record.payload)
	case recordSegmentHeader:
		decodeSegmentHeader(record.payload)
	}
}

// FuzzOpenSegment writes arbitrary bytes as the only segment and opens the
// log: Open must return a state or an error, never panic.
func FuzzOpenSegment(f *testing.F) {
	fs := buildLogForSeed(f)
	f.Add(fs)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		memFS := newSingleSegmentFS(t, data)
		w, _, err := Open(memFS, testDir, quietOptions(4096))
		if err == nil {
			w.Close()
		}
	})
}
