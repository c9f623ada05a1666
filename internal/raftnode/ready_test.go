package raftnode

import (
	"slices"
	"testing"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// entries returns entries of term 1 with indexes from..to.
func entries(from, to uint64) []raftpb.Entry {
	var out []raftpb.Entry
	for i := from; i <= to; i++ {
		out = append(out, raftpb.Entry{Index: i, Term: 1})
	}
	return out
}

func indexes(es []raftpb.Entry) []uint64 {
	out := []uint64{}
	for _, e := range es {
		out = append(out, e.Index)
	}
	return out
}

// TestSplitDurable: only committed entries the raft log held before the
// Ready (so persisted by an earlier one), and below the Ready's own new
// entries, are applied before the Ready's fsync.
func TestSplitDurable(t *testing.T) {
	tests := []struct {
		name             string
		ready            raft.Ready
		durable, pending []uint64
	}{
		{name: "all durable, no new entries",
			ready: raft.Ready{CommittedEntries: entries(3, 5)}, durable: []uint64{3, 4, 5}, pending: []uint64{}},
		{name: "durable ones before new entries",
			ready:   raft.Ready{Entries: entries(6, 8), CommittedEntries: entries(4, 7)},
			durable: []uint64{4, 5}, pending: []uint64{6, 7}},
		{name: "new entries overwrite the log's tail",
			ready:   raft.Ready{Entries: entries(5, 6), CommittedEntries: entries(3, 5)},
			durable: []uint64{3, 4}, pending: []uint64{5}},
		{name: "committed beyond the log, no new entries",
			ready: raft.Ready{CommittedEntries: entries(5, 6)}, durable: []uint64{5}, pending: []uint64{6}},
		{name: "snapshot: nothing early",
			ready: raft.Ready{Snapshot: raftpb.Snapshot{Metadata: raftpb.SnapshotMetadata{Index: 9, Term: 1}},
				CommittedEntries: entries(3, 4)}, durable: []uint64{}, pending: []uint64{3, 4}},
		{name: "nothing committed", ready: raft.Ready{Entries: entries(6, 6)}, durable: []uint64{}, pending: []uint64{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := &Node{storage: raft.NewMemoryStorage()}
			if err := n.storage.Append(entries(1, 5)); err != nil {
				t.Fatal(err)
			}
			durable, pending := n.splitDurable(tc.ready)
			if got := indexes(durable); !slices.Equal(got, tc.durable) {
				t.Errorf("durable = %v, want %v", got, tc.durable)
			}
			if got := indexes(pending); !slices.Equal(got, tc.pending) {
				t.Errorf("pending = %v, want %v", got, tc.pending)
			}
		})
	}
}

// TestSplitMessages: a leader's appends and heartbeats and any node's
// forwarded proposals and read-index requests leave before the fsync;
// responses and votes, which promise durability, after it.
func TestSplitMessages(t *testing.T) {
	msgs := []raftpb.Message{
		{Type: raftpb.MsgApp}, {Type: raftpb.MsgHeartbeat}, {Type: raftpb.MsgProp},
		{Type: raftpb.MsgReadIndex}, {Type: raftpb.MsgAppResp}, {Type: raftpb.MsgVoteResp},
	}
	types := func(ms []raftpb.Message) []raftpb.MessageType {
		out := []raftpb.MessageType{}
		for _, m := range ms {
			out = append(out, m.Type)
		}
		return out
	}
	tests := []struct {
		name        string
		leading     bool
		early, late []raftpb.MessageType
	}{
		{name: "leader", leading: true,
			early: []raftpb.MessageType{raftpb.MsgApp, raftpb.MsgHeartbeat, raftpb.MsgProp, raftpb.MsgReadIndex},
			late:  []raftpb.MessageType{raftpb.MsgAppResp, raftpb.MsgVoteResp}},
		{name: "follower", leading: false,
			early: []raftpb.MessageType{raftpb.MsgProp, raftpb.MsgReadIndex},
			late:  []raftpb.MessageType{raftpb.MsgApp, raftpb.MsgHeartbeat, raftpb.MsgAppResp, raftpb.MsgVoteResp}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			early, late := splitMessages(msgs, tc.leading)
			if got := types(early); !slices.Equal(got, tc.early) {
				t.Errorf("early = %v, want %v", got, tc.early)
			}
			if got := types(late); !slices.Equal(got, tc.late) {
				t.Errorf("late = %v, want %v", got, tc.late)
			}
		})
	}
}
