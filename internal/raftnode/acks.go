package raftnode

import (
	"sync"

	"go.etcd.io/raft/v3/raftpb"
)

// ackDeferral holds back a follower's acknowledgements (MsgAppResp) that
// tell the leader nothing it was not told already: an acceptance, in the
// same term, of an index no higher than the last acceptance sent to that
// leader. raft answers every MsgApp, so each commit notice (an empty
// MsgApp moving only the follower's commit index) comes back as a second
// acceptance of the index the entries' own acknowledgement carried. At
// low concurrency, where commit notices do not fold into entries
// (coalesce.go), those are a fifth of the messages of a write.
//
// Held back, not dropped. The leader steps such an acceptance as nothing
// new (the match index does not move) except in two cases, and both need
// it to arrive eventually, not at once:
//   - the leader put the follower back into probing (it was unreachable)
//     while it was caught up: it probes with an empty MsgApp and moves
//     back to replicating on its acceptance;
//   - the earlier acceptance was lost with a broken connection: the
//     leader's heartbeat draws an empty MsgApp, whose acceptance carries
//     the match again.
//
// So the latest held-back acceptance to each leader is sent at the next
// tick (release), unless an acceptance of a higher index or a rejection
// goes first, which supersedes it. That bounds the delay at one tick per
// exchange (a recovery that needs several exchanges may take as many
// ticks); ticks stop only while the Ready loop is busy (applying,
// installing a snapshot, or waiting for a full disk). Rejections and
// acceptances of new indexes are never held. Safe for concurrent use: the
// append goroutine filters, the Ready loop releases on its ticks.
type ackDeferral struct {
	mu sync.Mutex
	// sent is the last acceptance sent to each peer (term and index).
	sent map[uint64]ackMark
	// held is the held-back acceptance to each peer, if any.
	held map[uint64]raftpb.Message
}

type ackMark struct{ term, index uint64 }

func newAckDeferral() *ackDeferral {
	return &ackDeferral{sent: map[uint64]ackMark{}, held: map[uint64]raftpb.Message{}}
}

// filter returns msgs (to peers, in order) less the acceptances it holds
// back. It reuses msgs' array.
func (d *ackDeferral) filter(msgs []raftpb.Message) []raftpb.Message {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := msgs[:0]
	for _, m := range msgs {
		if m.Type != raftpb.MsgAppResp {
			out = append(out, m)
			continue
		}
		if m.Reject {
			delete(d.held, m.To)
			out = append(out, m)
			continue
		}
		if last, ok := d.sent[m.To]; ok && last.term == m.Term && m.Index <= last.index {
			if held, ok := d.held[m.To]; !ok || held.Index <= m.Index {
				d.held[m.To] = m
			}
			continue
		}
		d.sent[m.To] = ackMark{term: m.Term, index: m.Index}
		delete(d.held, m.To)
		out = append(out, m)
	}
	return out
}

// release returns the held-back acceptances and forgets them. The caller
// sends them after the lock is let go, so a released acceptance may reach
// the transport after a newer one that filter passed meanwhile: the leader
// steps such a late, lower acceptance as nothing new, as it does any
// reordered one.
func (d *ackDeferral) release() []raftpb.Message {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.held) == 0 {
		return nil
	}
	msgs := make([]raftpb.Message, 0, len(d.held))
	for to, m := range d.held {
		msgs = append(msgs, m)
		delete(d.held, to)
	}
	return msgs
}
