package raftnode

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/latch-io/latch/internal/transport"
)

// countingTransport counts the heartbeats and Quiesce messages a member sends.
type countingTransport struct {
	transport.Transport
	heartbeats atomic.Int64
	quiesces   atomic.Int64
}

func (c *countingTransport) Send(group uint64, msgs []raftpb.Message) {
	for i := range msgs {
		if msgs[i].Type == raftpb.MsgHeartbeat {
			c.heartbeats.Add(1)
		}
	}
	c.Transport.Send(group, msgs)
}

func (c *countingTransport) SendPeer(to uint64, m transport.PeerMessage) {
	if _, ok := m.(transport.Quiesce); ok {
		c.quiesces.Add(1)
	}
	c.Transport.SendPeer(to, m)
}

// quietGroup is a fakeGroup of three members, each with a countingTransport.
type quietGroup struct {
	*fakeGroup
	sent []*countingTransport
}

func startQuietGroup(t *testing.T, quiesce bool) *quietGroup {
	t.Helper()
	q := &quietGroup{}
	q.fakeGroup = startFakeGroupWith(t, 3, fakeOptions{quiesce: quiesce, wrap: func(tr transport.Transport) transport.Transport {
		c := &countingTransport{Transport: tr}
		q.sent = append(q.sent, c)
		return c
	}})
	return q
}

// heartbeats is how many heartbeats the members sent so far.
func (q *quietGroup) heartbeats() int64 {
	var total int64
	for _, c := range q.sent {
		total += c.heartbeats.Load()
	}
	return total
}

// elect ticks until every member agrees on a leader, and returns it.
func (g *fakeGroup) elect(t *testing.T) *Node {
	t.Helper()
	for range 50 * g.nodes[0].cfg.ElectionTicks {
		if leader := g.leader(); leader != nil {
			return leader
		}
		g.tick(t)
	}
	t.Fatal("no leader elected")
	return nil
}

// propose proposes data through n and waits until every member applied it,
// without advancing the clock: nothing of a write waits for a tick.
func (g *fakeGroup) propose(t *testing.T, n *Node, data string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.Propose(ctx, []byte(data)); err != nil {
		t.Fatalf("propose %q: %v", data, err)
	}
	for i, m := range g.machines {
		waitFor(t, fmt.Sprintf("node %d to apply %q with the clock standing still", i+1, data), func() bool { return m.has(data) })
	}
}

// tickUntilQuiesced ticks until every member is quiesced at the leader's
// term and commit, at most budget ticks.
func (g *fakeGroup) tickUntilQuiesced(t *testing.T, leader *Node, budget int) {
	t.Helper()
	for range budget {
		if g.allQuiesced(leader) {
			return
		}
		g.tick(t)
	}
	waitFor(t, "every member to quiesce", func() bool { return g.allQuiesced(leader) })
}

func (g *fakeGroup) allQuiesced(leader *Node) bool {
	st := leader.Status()
	for _, n := range g.nodes {
		q, ok := n.Quiesced()
		if !ok || q.Leader != leader.cfg.ID || q.Term != st.Term || q.Commit != st.Commit {
			return false
		}
	}
	return true
}

// TestIdleGroupQuiesces: once a group is idle its leader quiesces it within
// a few ticks and every follower follows; then no member heartbeats however
// long time runs, and the leader and term stay. Without Config.Quiesce the
// same group heartbeats every tick and never quiesces.
func TestIdleGroupQuiesces(t *testing.T) {
	for _, quiesce := range []bool{true, false} {
		t.Run(fmt.Sprintf("quiesce=%v", quiesce), func(t *testing.T) {
			g := startQuietGroup(t, quiesce)
			leader := g.elect(t)
			g.propose(t, leader, "x")
			electionTicks := leader.cfg.ElectionTicks
			if quiesce {
				g.tickUntilQuiesced(t, leader, 2*quiesceTicks+2)
			} else {
				for range 2*quiesceTicks + 2 {
					g.tick(t)
				}
			}
			term, before := leader.Status().Term, g.heartbeats()
			for range 5 * electionTicks {
				g.tick(t)
			}
			sent := g.heartbeats() - before
			for i, n := range g.nodes {
				_, quiesced := n.Quiesced()
				if st := n.Status(); st.Term != term || st.Lead != leader.cfg.ID || quiesced != quiesce {
					t.Fatalf("node %d after %d ticks: term %d, leader %d, quiesced %v; want term %d, leader %d, quiesced %v",
						i+1, 5*electionTicks, st.Term, st.Lead, quiesced, term, leader.cfg.ID, quiesce)
				}
			}
			if quiesce && sent != 0 {
				t.Fatalf("%d heartbeats sent in a quiesced group over %d ticks, want none", sent, 5*electionTicks)
			}
			if !quiesce && sent < int64(2*5*electionTicks) {
				t.Fatalf("%d heartbeats sent in a ticking group over %d ticks, want one per follower per tick", sent, 5*electionTicks)
			}
		})
	}
}

// TestQuiescedGroupWakesForWrites: a proposal made on a quiesced follower
// is applied everywhere without a tick, the group ticks again, and it
// quiesces again at the new commit index once idle.
func TestQuiescedGroupWakesForWrites(t *testing.T) {
	g := startQuietGroup(t, true)
	leader := g.elect(t)
	g.tickUntilQuiesced(t, leader, 2*quiesceTicks+2)
	var follower *Node
	for _, n := range g.nodes {
		if n != leader {
			follower = n
		}
	}
	commit := leader.Status().Commit
	g.propose(t, follower, "y")
	for i, n := range g.nodes {
		if _, quiesced := n.Quiesced(); quiesced {
			t.Fatalf("node %d still quiesced after a write went through it", i+1)
		}
	}
	g.tickUntilQuiesced(t, leader, 2*quiesceTicks+2)
	if q, _ := leader.Quiesced(); q.Commit <= commit {
		t.Fatalf("quiesced again at commit %d, want past %d", q.Commit, commit)
	}
}

// TestQuiesceIgnoredUnlessItMatches: a follower quiesces only for its
// leader, at its term, with its log ending at the message's commit; a node
// without Config.Quiesce never does.
func TestQuiesceIgnoredUnlessItMatches(t *testing.T) {
	g := startQuietGroup(t, true)
	leader := g.elect(t)
	g.tickUntilQuiesced(t, leader, 2*quiesceTicks+2)
	var followers []*Node
	for _, n := range g.nodes {
		if n != leader {
			followers = append(followers, n)
		}
	}
	f, other := followers[0], followers[1]
	f.Unquiesce("test", false)
	st := leader.Status()
	lead := leader.cfg.ID
	tests := []struct {
		name               string
		from, term, commit uint64
	}{
		{name: "another term", from: lead, term: st.Term + 1, commit: st.Commit},
		{name: "an older term", from: lead, term: st.Term - 1, commit: st.Commit},
		{name: "not its leader", from: other.cfg.ID, term: st.Term, commit: st.Commit},
		{name: "from itself", from: f.cfg.ID, term: st.Term, commit: st.Commit},
		{name: "from nobody", from: raft.None, term: st.Term, commit: st.Commit},
		{name: "a commit behind its log", from: lead, term: st.Term, commit: st.Commit - 1},
		{name: "a commit past its log", from: lead, term: st.Term, commit: st.Commit + 1},
	}
	for _, tt := range tests {
		if f.Quiesce(tt.from, tt.term, tt.commit) {
			t.Fatalf("%s: quiesced", tt.name)
		}
		if _, quiesced := f.Quiesced(); quiesced {
			t.Fatalf("%s: Quiesced reports the group quiesced", tt.name)
		}
	}
	if !f.Quiesce(lead, st.Term, st.Commit) {
		t.Fatal("the matching quiesce was refused")
	}
	disabled := &Node{cfg: Config{ID: 9, Quiesce: false}}
	if disabled.Quiesce(lead, st.Term, st.Commit) {
		t.Fatal("a node without Config.Quiesce quiesced")
	}
}

// TestQuiescedGroupWakesOnMessages: every raft message stepped into a
// quiesced member wakes it, but an idle heartbeat: a heartbeat answer with
// no read in it, and a plain heartbeat of the leader and term that quiesced
// the follower.
func TestQuiescedGroupWakesOnMessages(t *testing.T) {
	tests := []struct {
		name    string
		to      func(r roles) *Node
		message func(r roles) raftpb.Message
		wakes   bool
	}{
		{name: "the leader's plain heartbeat", to: toFollower, message: func(r roles) raftpb.Message {
			return raftpb.Message{Type: raftpb.MsgHeartbeat, From: r.leader.cfg.ID, To: r.follower.cfg.ID, Term: r.st.Term, Commit: r.st.Commit}
		}},
		{name: "a heartbeat answer", to: toLeader, message: func(r roles) raftpb.Message {
			return raftpb.Message{Type: raftpb.MsgHeartbeatResp, From: r.follower.cfg.ID, To: r.leader.cfg.ID, Term: r.st.Term}
		}},
		{name: "a heartbeat carrying a read", to: toFollower, wakes: true, message: func(r roles) raftpb.Message {
			return raftpb.Message{Type: raftpb.MsgHeartbeat, From: r.leader.cfg.ID, To: r.follower.cfg.ID, Term: r.st.Term, Commit: r.st.Commit, Context: []byte("r")}
		}},
		{name: "a heartbeat answer carrying a read", to: toLeader, wakes: true, message: func(r roles) raftpb.Message {
			return raftpb.Message{Type: raftpb.MsgHeartbeatResp, From: r.follower.cfg.ID, To: r.leader.cfg.ID, Term: r.st.Term, Context: []byte("r")}
		}},
		{name: "a heartbeat of a newer term", to: toFollower, wakes: true, message: func(r roles) raftpb.Message {
			return raftpb.Message{Type: raftpb.MsgHeartbeat, From: r.other.cfg.ID, To: r.follower.cfg.ID, Term: r.st.Term + 1}
		}},
		{name: "a pre-vote", to: toFollower, wakes: true, message: func(r roles) raftpb.Message {
			return raftpb.Message{Type: raftpb.MsgPreVote, From: r.other.cfg.ID, To: r.follower.cfg.ID, Term: r.st.Term + 1, LogTerm: r.st.Term, Index: r.st.Commit}
		}},
		{name: "an append answer", to: toLeader, wakes: true, message: func(r roles) raftpb.Message {
			return raftpb.Message{Type: raftpb.MsgAppResp, From: r.follower.cfg.ID, To: r.leader.cfg.ID, Term: r.st.Term, Index: r.st.Commit}
		}},
		{name: "an append", to: toFollower, wakes: true, message: func(r roles) raftpb.Message {
			return raftpb.Message{Type: raftpb.MsgApp, From: r.leader.cfg.ID, To: r.follower.cfg.ID, Term: r.st.Term, Index: r.st.Commit, LogTerm: r.st.Term, Commit: r.st.Commit}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := startQuietGroup(t, true)
			r := roles{leader: g.elect(t)}
			for _, n := range g.nodes {
				switch {
				case n == r.leader:
				case r.follower == nil:
					r.follower = n
				default:
					r.other = n
				}
			}
			g.tickUntilQuiesced(t, r.leader, 2*quiesceTicks+2)
			r.st = r.leader.Status()
			to := tt.to(r)
			if err := to.Step(context.Background(), tt.message(r)); err != nil {
				t.Fatalf("step: %v", err)
			}
			if _, quiesced := to.Quiesced(); quiesced == tt.wakes {
				t.Fatalf("quiesced %v after the step, want %v", quiesced, !tt.wakes)
			}
		})
	}
}

// roles are the members of a quiesced test group, and its leader's status.
type roles struct {
	leader, follower, other *Node
	st                      raft.Status
}

func toLeader(r roles) *Node   { return r.leader }
func toFollower(r roles) *Node { return r.follower }

// TestLeaderLostElectsAfterUnquiesce: with the leader of a quiesced group
// cut off, its followers stand still (no election however long time runs)
// until told the leader is lost; they then campaign within an election
// timeout's randomized part and elect one of them.
func TestLeaderLostElectsAfterUnquiesce(t *testing.T) {
	g := startQuietGroup(t, true)
	leader := g.elect(t)
	g.tickUntilQuiesced(t, leader, 2*quiesceTicks+2)
	electionTicks := leader.cfg.ElectionTicks
	term := leader.Status().Term
	g.network.Isolate(leader.cfg.ID)
	var followers []*Node
	for _, n := range g.nodes {
		if n != leader {
			followers = append(followers, n)
		}
	}
	for range 3 * electionTicks {
		g.tick(t)
	}
	for _, f := range followers {
		if st := f.Status(); st.Term != term || st.RaftState != raft.StateFollower {
			t.Fatalf("quiesced follower %d left its leader on its own: term %d, state %v", f.cfg.ID, st.Term, st.RaftState)
		}
	}
	for _, f := range followers {
		f.Unquiesce("leader lost (test)", true)
	}
	campaigned := func() bool {
		for _, f := range followers {
			if st := f.Status(); st.Term > term || st.RaftState != raft.StateFollower {
				return true
			}
		}
		return false
	}
	ticks := 0
	for ; !campaigned(); ticks++ {
		if ticks > electionTicks {
			t.Fatalf("no follower campaigned within %d ticks of learning its leader was lost", electionTicks)
		}
		g.tick(t)
		time.Sleep(time.Millisecond) // a pre-vote round lands
	}
	for range 50 * electionTicks {
		if st := followers[0].Status(); st.Term > term && st.Lead != raft.None && st.Lead != leader.cfg.ID && followers[1].Status().Lead == st.Lead {
			if _, quiesced := leader.Quiesced(); !quiesced {
				t.Fatal("the cut-off leader woke without any message")
			}
			return
		}
		g.tick(t)
	}
	t.Fatal("the followers elected no new leader")
}
