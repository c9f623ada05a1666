package raftnode

import "go.etcd.io/raft/v3/raftpb"

// maxCoalescedSize bounds the size of the entries of one coalesced MsgApp:
// raft's own bound on a message (raft.Config.MaxSizePerMsg).
const maxCoalescedSize = 1 << 20

// coalesceAppends merges, in place, each MsgApp to a follower into the
// previous message to that follower when that one is a MsgApp of the same
// term that the second runs straight into: the second's entries start
// right after the first's last entry (or at the first's own position, the
// first carrying none), at that entry's term.
//
// raft, leading a replicating follower, sends one MsgApp per proposal it
// takes, and an empty one, carrying only the commit index, each time the
// commit index moves; under load most Readys carry several of both to each
// follower. What one merged message carries is what the follower would
// have reached by stepping them in order:
//   - entries: the first's, then the second's (both non-empty);
//   - commit: the larger of the two. The follower commits up to the lesser
//     of a message's commit and its last entry's index (its position if it
//     has none); the merged message's last entry is the later message's,
//     so it commits as far as the later one would have, and no less than
//     the earlier one would.
//
// So a batch costs each follower one step and one acknowledgement instead
// of one per proposal and per commit move. The leader's record of messages
// in flight to it is freed by that one acknowledgement, which covers the
// last entry (an empty MsgApp takes no place in it). Messages to other
// peers keep their order; nothing moves past another message to the same
// follower.
func coalesceAppends(msgs []raftpb.Message) []raftpb.Message {
	if len(msgs) < 2 {
		return msgs
	}
	var sizes []int // per kept message, once entries were merged: its entries' size, or -1 if its Entries are still raft's
	out := msgs[:0]
	for _, m := range msgs {
		prev := lastTo(out, m.To)
		if prev < 0 || !continues(&out[prev], &m) {
			out = append(out, m)
			continue
		}
		p := &out[prev]
		switch {
		case len(m.Entries) == 0: // commit only: the commit moves to p
			p.Commit = max(p.Commit, m.Commit)
		case len(p.Entries) == 0: // p was commit only: m takes its place
			m.Commit = max(m.Commit, p.Commit)
			*p = m
			if sizes != nil {
				sizes[prev] = -1
			}
		default:
			if sizes == nil { // the first merge of entries in this Ready
				sizes = make([]int, len(msgs))
				for i := range sizes {
					sizes[i] = -1
				}
			}
			if !appendEntries(p, &sizes[prev], &m) {
				out = append(out, m)
			}
		}
	}
	return out
}

// appendEntries appends next's entries to p's, and moves its commit, unless
// that would pass maxCoalescedSize; size is p's entries' size, or -1 while
// they are still raft's (they are copied before the first append).
func appendEntries(p *raftpb.Message, size *int, next *raftpb.Message) bool {
	if *size < 0 {
		*size = entriesSize(p.Entries)
		p.Entries = append(make([]raftpb.Entry, 0, 2*len(p.Entries)+len(next.Entries)), p.Entries...)
	}
	add := entriesSize(next.Entries)
	if *size+add > maxCoalescedSize {
		return false
	}
	*size += add
	p.Entries = append(p.Entries, next.Entries...)
	p.Commit = max(p.Commit, next.Commit)
	return true
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

// continues reports whether next is a MsgApp that prev, a MsgApp of the
// same sender and term, runs straight into: next's position (the entry
// before its first) is prev's last entry, or prev's own position when
// prev carries no entries.
func continues(prev, next *raftpb.Message) bool {
	if prev.Type != raftpb.MsgApp || next.Type != raftpb.MsgApp ||
		prev.Term != next.Term || prev.From != next.From || prev.Snapshot != nil || next.Snapshot != nil {
		return false
	}
	index, term := prev.Index, prev.LogTerm
	if n := len(prev.Entries); n > 0 {
		index, term = prev.Entries[n-1].Index, prev.Entries[n-1].Term
	}
	return next.Index == index && next.LogTerm == term
}

func entriesSize(entries []raftpb.Entry) int {
	size := 0
	for i := range entries {
		size += entries[i].Size()
	}
	return size
}
