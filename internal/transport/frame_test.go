package transport

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
)

// frameMessages are raft messages of every shape a frame carries: none,
// one or many entries, a snapshot, a context, responses.
func frameMessages() []raftpb.Message {
	many := make([]raftpb.Entry, 40)
	for i := range many {
		many[i] = raftpb.Entry{Term: 3, Index: uint64(10 + i), Data: []byte{byte(i), 1, 2}}
	}
	return []raftpb.Message{
		{Type: raftpb.MsgHeartbeat, From: 1, To: 2, Term: 3, Commit: 9},
		{Type: raftpb.MsgApp, From: 1, To: 2, Term: 3, Index: 9, LogTerm: 3, Entries: many[:1], Commit: 9},
		{Type: raftpb.MsgApp, From: 1, To: 2, Term: 3, Index: 9, LogTerm: 3, Entries: many, Commit: 12},
		{Type: raftpb.MsgProp, From: 2, To: 1, Entries: many[:7], Context: []byte{0xde, 1}},
		{Type: raftpb.MsgSnap, From: 1, To: 2, Term: 3, Snapshot: &raftpb.Snapshot{Data: []byte("state"),
			Metadata: raftpb.SnapshotMetadata{Index: 9, Term: 3}}},
		{Type: raftpb.MsgStorageAppend, Entries: many[:3], Responses: []raftpb.Message{
			{Type: raftpb.MsgStorageAppendResp, Entries: many[:2]}}},
	}
}

// TestEntryCountMatchesUnmarshal: the count of a message's entries read off
// its encoding is the number Unmarshal decodes (the Entries of nested
// responses not counted), so a frame's Entries are allocated once.
func TestEntryCountMatchesUnmarshal(t *testing.T) {
	for i, m := range frameMessages() {
		data, err := m.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if got := entryCount(data); got != len(m.Entries) {
			t.Errorf("message %d (%v): entryCount %d, want %d", i, m.Type, got, len(m.Entries))
		}
	}
	if got := entryCount([]byte{0x3a, 0x05, 0x01}); got != 0 { // entries field cut short
		t.Errorf("a truncated message counts %d entries, want 0", got)
	}
}

// FuzzEntryCount: on any bytes Unmarshal accepts, entryCount is the
// number of entries it decoded, or 0 where protowire refuses a field gogo
// takes (a field number past 32 bits, which gogo truncates); on any bytes,
// at most half their length.
func FuzzEntryCount(f *testing.F) {
	for _, m := range frameMessages() {
		data, err := m.Marshal()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		n := entryCount(data)
		if n > len(data)/2 {
			t.Fatalf("entryCount %d of %d bytes", n, len(data))
		}
		var m raftpb.Message
		if err := m.Unmarshal(data); err == nil && n != len(m.Entries) && n != 0 {
			t.Fatalf("entryCount %d, Unmarshal decoded %d entries", n, len(m.Entries))
		}
	})
}

// BenchmarkReadMsgAppFrame reads frames of a MsgApp of 32 entries of 256
// bytes, a loaded leader's append: allocations a frame are the Entries
// slice and each entry's data.
func BenchmarkReadMsgAppFrame(b *testing.B) {
	entries := make([]raftpb.Entry, 32)
	for i := range entries {
		entries[i] = raftpb.Entry{Term: 3, Index: uint64(10 + i), Data: make([]byte, 256)}
	}
	m := raftpb.Message{Type: raftpb.MsgApp, From: 1, To: 2, Term: 3, Index: 9, LogTerm: 3, Entries: entries, Commit: 9}
	frame, err := appendFrame(nil, 1, &m)
	if err != nil {
		b.Fatal(err)
	}
	var r bytes.Reader
	f := frameReader{reader: &r, maxFrame: 1 << 20}
	b.ReportAllocs()
	b.SetBytes(int64(len(frame)))
	for b.Loop() {
		r.Reset(frame)
		got, err := f.next()
		if err != nil || len(got.message.Entries) != len(entries) {
			b.Fatalf("read %d entries, %v", len(got.message.Entries), err)
		}
	}
}

// TestMalformedEntriesGetNoRoom: a frame of fields that look like entries
// but do not decode is refused, and the room made for its entries before
// decoding is bounded (maxPresized), not one entry per three bytes of it;
// a valid frame gets room for exactly its entries.
func TestMalformedEntriesGetNoRoom(t *testing.T) {
	body := bytes.Repeat([]byte{0x3a, 0x01, 0x00}, 100_000) // entries of one byte: an illegal tag 0
	if got := cap(roomFor(body).Entries); got != maxPresized {
		t.Fatalf("room for %d entries before decoding 100,000 malformed ones, want %d", got, maxPresized)
	}
	var frame []byte
	frame = binary.BigEndian.AppendUint32(frame, uint32(8+len(body)))
	frame = binary.BigEndian.AppendUint64(frame, 1)
	frame = append(frame, body...)
	f := frameReader{reader: bytes.NewReader(frame), maxFrame: 1 << 20}
	if _, err := f.next(); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a frame of malformed entries: %v, want ErrCorrupt", err)
	}
	for i, m := range frameMessages() {
		data, err := m.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if want, got := len(m.Entries), cap(roomFor(data).Entries); got != want && want > 1 {
			t.Errorf("message %d (%v): room for %d entries, want %d", i, m.Type, got, want)
		}
	}
}
