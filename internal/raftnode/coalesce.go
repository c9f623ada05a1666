package raftnode

import "go.etcd.io/raft/v3/raftpb"

// maxCoalescedSize bounds the size of the entries of one coalesced MsgApp:
// raft's own bound on a message (raft.Config.MaxSizePerMsg).
const maxCoalescedSize = 1 << 20

// coalesceAppends merges, in place, each MsgApp to a follower into the
// previous message to that follower when that one is a MsgApp of the same
// term whose entries the second continues (it starts right after the
// first's last entry, at that entry's term). raft, leading a replicating
// follower, sends one MsgApp per proposal it takes, so a Ready that carries
// many proposals carries as many MsgApps to each follower; one message
// with all their entries (and the last one's commit index) is what the
// follower would have reached by stepping them in order, with one append,
// one step and one acknowledgement in place of many. The leader's record
// of messages in flight to it is freed by that one acknowledgement, which
// covers the last entry. Messages to other peers keep their order; nothing
// moves past another message to the same follower.
func coalesceAppends(msgs []raftpb.Message) []raftpb.Message {
	if len(msgs) < 2 {
		return msgs
	}
	var sizes []int // per kept message, once a merge happened: its entries' size, or -1 if its Entries are still raft's
	out := msgs[:0]
	for _, m := range msgs {
		prev := lastTo(out, m.To)
		if prev < 0 || !continues(&out[prev], &m) {
			out = append(out, m)
			continue
		}
		if sizes == nil {
			sizes = make([]int, len(msgs))
			for i := range sizes {
				sizes[i] = -1
			}
		}
		if sizes[prev] < 0 {
			// The entries are raft's (its log's array): copy them before appending.
			sizes[prev] = entriesSize(out[prev].Entries)
			out[prev].Entries = append(make([]raftpb.Entry, 0, 2*len(out[prev].Entries)+len(m.Entries)), out[prev].Entries...)
		}
		add := entriesSize(m.Entries)
		if sizes[prev]+add > maxCoalescedSize {
			out = append(out, m)
			continue
		}
		sizes[prev] += add
		out[prev].Entries = append(out[prev].Entries, m.Entries...)
		out[prev].Commit = max(out[prev].Commit, m.Commit)
	}
	return out
}

// lastTo returns the index in msgs of the last message to to, or -1.
func lastTo(msgs []raftpb.Message, to uint64) int {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].To == to {
			return i
		}
	}
	return -1
}

// continues reports whether next is a MsgApp that prev, a MsgApp with
// entries of the same sender and term, runs straight into.
func continues(prev, next *raftpb.Message) bool {
	if prev.Type != raftpb.MsgApp || next.Type != raftpb.MsgApp || len(prev.Entries) == 0 || len(next.Entries) == 0 ||
		prev.Term != next.Term || prev.From != next.From || prev.Snapshot != nil || next.Snapshot != nil {
		return false
	}
	last := &prev.Entries[len(prev.Entries)-1]
	return next.Index == last.Index && next.LogTerm == last.Term
}

func entriesSize(entries []raftpb.Entry) int {
	size := 0
	for i := range entries {
		size += entries[i].Size()
	}
	return size
}
