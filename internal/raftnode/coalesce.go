package raftnode

import "go.etcd.io/raft/v3/raftpb"

// maxCoalescedSize bounds the size of the entries of one coalesced message:
// raft's own bound on a message (raft.Config.MaxSizePerMsg).
const maxCoalescedSize = 1 << 20

// coalesceMessages merges, in place, each message of a Ready into the
// previous one to the same peer where stepping the merged one gives the
// peer what stepping both in order would: a MsgApp that runs straight into
// a MsgApp before it (the rules below), and a proposal a
// follower forwards into the forwarded proposal before it
// (joinsProposal). Messages to other peers keep their order; nothing moves
// past another message to the same peer.
//
// MsgApp. raft, leading a replicating follower, sends one MsgApp per
// proposal it takes, and an empty one, carrying only the commit index,
// each time the commit index moves; under load most Readys carry several
// of both to each follower. What one merged message carries is what the
// follower would have reached by stepping them in order:
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
// last entry (an empty MsgApp takes no place in it).
//
// MsgProp. A follower forwards each proposal stepped into it as a MsgProp
// of its own, and a follower steps its proposals in batches that are often
// small (with one processor a member, proposers seldom meet at the lock,
// and a client connection's next write can join only once the one before
// was placed). All a Ready forwards to the leader then leaves as
// one MsgProp, its entries in the order they were stepped: the leader
// appends and broadcasts once for them instead of once each. The leader
// takes or drops a MsgProp whole, so the merged entries share one fate
// where each could have had its own; a forwarded proposal the leader
// drops is lost either way (its proposer's waiter reaches its deadline,
// the outcome unknown), and later entries of one client connection are
// never taken while an earlier one of the same message is dropped.
func coalesceMessages(msgs []raftpb.Message) []raftpb.Message {
	if len(msgs) < 2 {
		return msgs
	}
	sizes := entrySizes{n: len(msgs)}
	out := msgs[:0]
	for _, m := range msgs {
		prev := lastTo(out, m.To)
		switch {
		case prev >= 0 && continues(&out[prev], &m):
			if !mergeAppend(out, prev, &m, &sizes) {
				out = append(out, m)
			}
		case prev >= 0 && joinsProposal(&out[prev], &m):
			if !mergeEntries(&out[prev], sizes.slot(prev), &m) {
				out = append(out, m)
			}
		default:
			out = append(out, m)
		}
	}
	return out
}

// mergeAppend merges m, a MsgApp that out[prev] runs straight into, into
// out[prev]; false if their entries together would pass maxCoalescedSize
// (m is then kept as it is).
func mergeAppend(out []raftpb.Message, prev int, m *raftpb.Message, sizes *entrySizes) bool {
	p := &out[prev]
	switch {
	case len(m.Entries) == 0: // commit only: the commit moves to p
		p.Commit = max(p.Commit, m.Commit)
	case len(p.Entries) == 0: // p was commit only: m takes its place
		m.Commit = max(m.Commit, p.Commit)
		*p = *m
		sizes.forget(prev)
	default:
		return mergeEntries(p, sizes.slot(prev), m)
	}
	return true
}

// entrySizes holds, for each message kept of a Ready, the size of its
// entries once others were merged into them, or -1 while its Entries are
// still raft's (mergeEntries copies them before the first append). The
// slots are made at the first merge of entries in the Ready.
type entrySizes struct {
	slots []int
	n     int // the Ready's messages
}

// slot returns message i's slot.
func (s *entrySizes) slot(i int) *int {
	if s.slots == nil {
		s.slots = make([]int, s.n)
		for j := range s.slots {
			s.slots[j] = -1
		}
	}
	return &s.slots[i]
}

// forget marks message i's entries as raft's again: another message took
// its place.
func (s *entrySizes) forget(i int) {
	if s.slots != nil {
		s.slots[i] = -1
	}
}

// joinsProposal reports whether next is a forwarded proposal that can join
// prev: both MsgProps from the same sender, neither carrying a Context (a
// deferred proposal's delay rides in it: deferralContext) and both of
// normal entries only (a conf change is proposed alone).
func joinsProposal(prev, next *raftpb.Message) bool {
	return prev.Type == raftpb.MsgProp && next.Type == raftpb.MsgProp && prev.From == next.From &&
		prev.Term == next.Term && len(prev.Context) == 0 && len(next.Context) == 0 &&
		normalEntries(prev.Entries) && normalEntries(next.Entries)
}

func normalEntries(entries []raftpb.Entry) bool {
	for i := range entries {
		if entries[i].Type != raftpb.EntryNormal {
			return false
		}
	}
	return true
}

// mergeEntries appends next's entries to p's, and moves its commit, unless
// that would pass maxCoalescedSize; size is p's entries' size, or -1 while
// they are still raft's (they are copied before the first append).
func mergeEntries(p *raftpb.Message, size *int, next *raftpb.Message) bool {
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
