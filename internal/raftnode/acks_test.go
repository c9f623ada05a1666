package raftnode

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
)

func accept(to, term, index uint64) raftpb.Message {
	return raftpb.Message{Type: raftpb.MsgAppResp, To: to, Term: term, Index: index}
}

// TestAckDeferralHoldsOnlyWhatTellsNothingNew: acceptances of new indexes,
// rejections and other messages pass in order; a repeated or lower
// acceptance in the same term is held (the highest per peer) until
// release, or dropped when a newer acceptance or a rejection to that peer
// supersedes it; a new term starts afresh.
func TestAckDeferralHoldsOnlyWhatTellsNothingNew(t *testing.T) {
	d := newAckDeferral()
	pass := func(m raftpb.Message) {
		t.Helper()
		if out := d.filter([]raftpb.Message{m}); len(out) != 1 || out[0].Index != m.Index || out[0].Type != m.Type {
			t.Fatalf("%v to %d index %d: filtered to %v, want it sent", m.Type, m.To, m.Index, out)
		}
	}
	hold := func(m raftpb.Message) {
		t.Helper()
		if out := d.filter([]raftpb.Message{m}); len(out) != 0 {
			t.Fatalf("%v to %d index %d: sent, want it held", m.Type, m.To, m.Index)
		}
	}
	released := func(want ...uint64) {
		t.Helper()
		var got []uint64
		for _, m := range d.release() {
			got = append(got, m.To*1000+m.Index)
		}
		if slices.Sort(got); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
			t.Fatalf("released (to*1000+index) %v, want %v", got, want)
		}
	}

	pass(accept(1, 2, 10))
	hold(accept(1, 2, 10)) // the commit notice's acknowledgement
	hold(accept(1, 2, 9))  // lower: the held 10 stays
	pass(accept(2, 2, 10)) // another leader-to-be: its own record
	released(1010)
	released()

	hold(accept(1, 2, 10))
	pass(accept(1, 2, 11)) // news: sent, and the held one is superseded
	released()

	hold(accept(1, 2, 11))
	pass(raftpb.Message{Type: raftpb.MsgAppResp, To: 1, Term: 2, Index: 11, Reject: true, RejectHint: 7})
	released() // a rejection supersedes it too
	pass(raftpb.Message{Type: raftpb.MsgAppResp, To: 1, Term: 2, Index: 11, Reject: true, RejectHint: 7})

	pass(raftpb.Message{Type: raftpb.MsgHeartbeatResp, To: 1, Term: 2})
	pass(accept(1, 3, 5)) // a new term: lower index, still news
	hold(accept(1, 3, 5))
	released(1005)
}

// countSent counts the messages of type typ that log recorded to peer to.
func (s *sendLog) countSent(to uint64, typ raftpb.MessageType) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	count := 0
	for _, msgs := range s.sends {
		for _, m := range msgs {
			if m.To == to && m.Type == typ {
				count++
			}
		}
	}
	return count
}

// TestFollowersAcknowledgeEachWriteOnce: writes made one at a time, the
// clock standing still (no heartbeats), reach every member, and each
// follower accepts each write once: the acknowledgement of the commit
// notice that follows it is held back.
func TestFollowersAcknowledgeEachWriteOnce(t *testing.T) {
	const writes = 20
	g, logs := startLoggedGroup(t, 3, fakeOptions{})
	leader := g.elect(t)
	g.propose(t, leader, "warm-up")
	before := map[uint64]int{}
	for _, n := range g.nodes {
		if n != leader {
			before[n.cfg.ID] = logs[n.cfg.ID].countSent(leader.cfg.ID, raftpb.MsgAppResp)
		}
	}
	for i := range writes {
		g.propose(t, leader, fmt.Sprintf("one-%d", i))
	}
	for id, was := range before {
		if sent := logs[id].countSent(leader.cfg.ID, raftpb.MsgAppResp) - was; sent > writes {
			t.Errorf("follower %d sent %d acknowledgements for %d writes made one at a time, want at most one each", id, sent, writes)
		}
	}
}

// TestProbedFollowerReplicatesAgainAfterATick: a caught-up follower the
// leader was told is unreachable goes back to probing. The leader's probe
// (drawn by a heartbeat) is an empty MsgApp, whose acceptance repeats the
// follower's last one and is held; released at the follower's next tick,
// it moves the follower back to replicating within a few ticks, with no
// write to help.
func TestProbedFollowerReplicatesAgainAfterATick(t *testing.T) {
	g := startFakeGroup(t, 3)
	leader := g.elect(t)
	g.propose(t, leader, "caught-up")
	follower := g.follower(leader)
	id := follower.cfg.ID
	leader.ReportUnreachable(id)
	if st := leader.Status().Progress[id].State; st != tracker.StateProbe {
		t.Fatalf("follower %d after ReportUnreachable: %v, want probing", id, st)
	}
	for range 10 {
		if leader.Status().Progress[id].State == tracker.StateReplicate {
			return
		}
		g.tick(t)
	}
	waitFor(t, fmt.Sprintf("follower %d to replicate again", id), func() bool {
		return leader.Status().Progress[id].State == tracker.StateReplicate
	})
}

// TestLostAcceptanceIsSentAgainAtATick: a follower's acceptance of a write
// is lost while the third member is out, so the write cannot commit. The
// leader's heartbeat then draws an empty MsgApp whose acceptance repeats
// the lost one: held back as nothing new, it must still leave at the
// follower's next tick, and the write commits.
func TestLostAcceptanceIsSentAgainAtATick(t *testing.T) {
	g := startFakeGroup(t, 3)
	leader := g.elect(t)
	g.propose(t, leader, "warm-up")
	follower := g.follower(leader)
	var third *Node
	for _, n := range g.nodes {
		if n != leader && n != follower {
			third = n
		}
	}
	lead, id := leader.cfg.ID, follower.cfg.ID
	g.network.Isolate(third.cfg.ID)
	g.network.SetDrop(id, lead, 1) // the follower's acceptances are lost

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	before := leader.Status().Commit
	proposed := make(chan error, 1)
	go func() { proposed <- leader.Propose(ctx, []byte("lost-ack")) }()
	last := func(n *Node) uint64 {
		index, err := n.storage.LastIndex()
		if err != nil {
			t.Fatalf("last index: %v", err)
		}
		return index
	}
	waitFor(t, "the leader to append the write", func() bool { return last(leader) > before })
	target := last(leader)
	waitFor(t, "the follower to append the write", func() bool { return last(follower) >= target })
	g.network.SetDrop(id, lead, 0)
	if leader.Status().Commit >= target {
		t.Fatalf("the write committed at %d with its only acceptance lost", leader.Status().Commit)
	}

	for range 10 {
		if g.machines[lead-1].has("lost-ack") {
			break
		}
		g.tick(t)
	}
	waitFor(t, "the leader to apply the write", func() bool { return g.machines[lead-1].has("lost-ack") })
	if err := <-proposed; err != nil {
		t.Fatalf("propose: %v", err)
	}
}

// TestHeldAcceptanceLeavesWhileQuiesced: a quiesced group's raft does not
// tick, but its nodes' ticks still send what they hold back.
func TestHeldAcceptanceLeavesWhileQuiesced(t *testing.T) {
	g, logs := startLoggedGroup(t, 3, fakeOptions{quiesce: true})
	leader := g.elect(t)
	g.propose(t, leader, "x")
	g.tickUntilQuiesced(t, leader, 2*quiesceTicks+2)
	follower := g.follower(leader)
	lead, st := leader.cfg.ID, leader.Status()
	before := logs[follower.cfg.ID].countSent(lead, raftpb.MsgAppResp)
	// As if the follower had just held back a repeated acceptance.
	follower.acks.filter([]raftpb.Message{accept(lead, st.Term, st.Commit)})
	if held := follower.acks.filter([]raftpb.Message{accept(lead, st.Term, st.Commit)}); len(held) != 0 {
		t.Fatal("a repeated acceptance was sent, want it held")
	}
	g.tick(t)
	if _, quiet := follower.Quiesced(); !quiet {
		t.Fatal("the follower woke up: the test needs it quiesced")
	}
	waitFor(t, "the held acceptance to leave at the tick", func() bool {
		return logs[follower.cfg.ID].countSent(lead, raftpb.MsgAppResp) == before+1
	})
}
