package transport

import (
	"flag"
	"runtime"
	"testing"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

var snapshotMB = flag.Int("snapshot-mb", 100, "size in MiB of the large snapshot streamed by TestTCPStreamsLargeSnapshot")

// snapshotMessage is a MsgSnap whose Data is a small reference, as the server sends.
func snapshotMessage(from, to, index uint64) raftpb.Message {
	return raftpb.Message{Type: raftpb.MsgSnap, From: from, To: to, Term: 2, Snapshot: &raftpb.Snapshot{
		Data:     []byte("snap-ref"),
		Metadata: raftpb.SnapshotMetadata{Index: index, Term: 2, ConfState: raftpb.ConfState{Voters: []uint64{1, 2, 3}}},
	}}
}

// TestTCPStreamsLargeSnapshot streams a generated body of -snapshot-mb MiB
// and checks it arrives whole and intact, Process gets the MsgSnap after
// Receive, the sender gets SnapshotFinish, and the body was never buffered
// whole (total allocations stay far below its size).
func TestTCPStreamsLargeSnapshot(t *testing.T) {
	size := int64(*snapshotMB) << 20
	sender := startNode(t, 1, 7, "127.0.0.1:0", nil)
	receiver := startNode(t, 2, 7, "127.0.0.1:0", nil)
	connect(sender, receiver)
	sender.snapshots.size = size
	wantCRC := generatorCRC(size)

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	started := time.Now()
	sender.transport.Send(1, []raftpb.Message{snapshotMessage(1, 2, 500)})
	waitFor(t, 60*time.Second, "the snapshot report", func() bool { return len(sender.handler.snapshotReports()) > 0 })
	elapsed := time.Since(started)
	runtime.ReadMemStats(&after)

	if got := sender.handler.snapshotReports(); got[0] != (snapshotReport{group: 1, id: 2, status: raft.SnapshotFinish}) {
		t.Fatalf("report %+v, want SnapshotFinish for group 1 peer 2", got)
	}
	stored := receiver.snapshots.receivedSnapshots()
	if len(stored) != 1 || stored[0] != (receivedSnapshot{index: 500, size: size, crc: wantCRC}) {
		t.Fatalf("stored %+v, want one body of index 500, %d bytes, crc %08x", stored, size, wantCRC)
	}
	if got := receiver.handler.from(1); len(got) != 1 || got[0].message.Type != raftpb.MsgSnap || got[0].message.Snapshot.Metadata.Index != 500 {
		t.Fatalf("Process got %+v, want the MsgSnap of index 500", got)
	}
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("%d MiB in %v (%.0f MB/s), %.1f MiB allocated", size>>20, elapsed, float64(size)/elapsed.Seconds()/1e6, float64(allocated)/(1<<20))
	if limit := uint64(16 << 20); allocated > limit {
		t.Fatalf("allocated %d bytes while streaming %d: the body was buffered (limit %d)", allocated, size, limit)
	}
}

// TestTCPSnapshotFailures checks that every way a snapshot can fail ends in
// SnapshotFailure for the sender and no MsgSnap for the receiver's raft.
func TestTCPSnapshotFailures(t *testing.T) {
	tests := []struct {
		name       string
		size       int64 // of the sender's body
		openErr    error // from the sender's Open
		receiveErr error // from the receiver's Receive
		readLimit  int64 // bytes the receiver's Receive reads before returning nil
		processErr error // from the receiver's Process
		tune       func(*Config)
	}{
		{name: "Receive fails", size: 1 << 20, receiveErr: errTest},
		{name: "Receive stops reading early", size: 1 << 20, readLimit: 1000},
		{name: "Open fails", openErr: errTest},
		{name: "Process fails", size: 1000, processErr: errTest},
		{name: "receiver without Snapshots", size: 1000, tune: func(cfg *Config) { cfg.Snapshots = nil }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sender := startNode(t, 1, 7, "127.0.0.1:0", nil)
			receiver := startNode(t, 2, 7, "127.0.0.1:0", tt.tune)
			connect(sender, receiver)
			sender.snapshots.size, sender.snapshots.openErr = tt.size, tt.openErr
			receiver.snapshots.receiveErr, receiver.snapshots.readLimit = tt.receiveErr, tt.readLimit
			receiver.handler.processErr = tt.processErr
			sender.transport.Send(3, []raftpb.Message{snapshotMessage(1, 2, 9)})
			waitFor(t, 10*time.Second, "the snapshot report", func() bool { return len(sender.handler.snapshotReports()) > 0 })
			if got := sender.handler.snapshotReports(); len(got) != 1 || got[0] != (snapshotReport{group: 3, id: 2, status: raft.SnapshotFailure}) {
				t.Fatalf("reports %+v, want one SnapshotFailure for group 3 peer 2", got)
			}
			if tt.processErr == nil && receiver.handler.count() != 0 {
				t.Fatalf("receiver processed %+v after a failed snapshot", receiver.handler.from(1))
			}
		})
	}
}

// TestTCPSnapshotCorruptBody checks that a body whose bytes change in
// flight is refused by the chunk CRC before Receive sees them.
func TestTCPSnapshotCorruptBody(t *testing.T) {
	tests := []struct {
		name    string
		corrupt func(chunk []byte)
	}{
		{name: "flipped data bit", corrupt: func(chunk []byte) { chunk[chunkHeaderSize+10] ^= 1 }},
		{name: "longer chunk length", corrupt: func(chunk []byte) { chunk[0]++ }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := &chunkReader{reader: corruptChunks(t, 3000, tt.corrupt), size: 3000, maxChunk: 1024, total: newCRC()}
			data, err := readAll(body)
			if err == nil {
				t.Fatal("corrupt body read without error")
			}
			if len(data) > 1000 {
				t.Fatalf("%d bytes released: bytes of the corrupt second chunk reached the reader", len(data))
			}
			if err := body.finish(); err == nil {
				t.Fatal("finish accepted a corrupt body")
			}
		})
	}
}
