package raftnode

import (
	"slices"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"

	"github.com/latch-io/latch/internal/transport"
)

// Quiescing: see the package comment, "Quiescing".

// quiesceTicks is how many ticks in a row a leader finds its group idle
// before it quiesces it: enough for the heartbeats of the first idle ticks
// to carry the final commit index to every follower.
const quiesceTicks = 3

// Quiesced is what a node recorded when its group quiesced.
type Quiesced struct {
	Leader uint64    // the leader that quiesced the group (this node's id if it leads)
	Term   uint64    // the leader's term
	Commit uint64    // the commit index, and every member's last index, then
	Since  time.Time // when, a reading of Config.Clock
	// Voters and Learners are the group's configuration, which stays while
	// the group is quiesced (a conf change wakes it).
	Voters, Learners []uint64
}

// ConfigOf returns the voters and learners of st's configuration, each
// sorted.
func ConfigOf(st raft.Status) (voters, learners []uint64) {
	for id := range st.Config.Voters.IDs() {
		voters = append(voters, id)
	}
	slices.Sort(voters)
	for id := range st.Config.Learners {
		learners = append(learners, id)
	}
	slices.Sort(learners)
	return voters, learners
}

// quiescence is a node's quiescing state. state and activity are read and
// written from any goroutine; idleTicks and idleSeen belong to the Ready
// loop.
type quiescence struct {
	// state is the group's quiesced record, nil while it ticks.
	state atomic.Pointer[Quiesced]
	// activity counts what wakes the group (wake): a quiescer reads it
	// before deciding and gives up if it moved meanwhile, so nothing that
	// happened while it decided is left in a quiesced group.
	activity atomic.Uint64
	// wakeTicks are extra raft ticks the next tick takes at once: a
	// follower whose leader was lost while it stood still.
	wakeTicks atomic.Int32
	// holdTicks are ticks still to pass before this leader may quiesce
	// again (HoldQuiesce).
	holdTicks atomic.Int64

	idleTicks int    // ticks in a row this leader found its group idle
	idleSeen  uint64 // activity at the last of them
	// recheckIn are ticks to skip before raft's status is read again after
	// it showed the group busy with no activity since (a member down or
	// behind): reading it copies every member's progress, each tick.
	recheckIn int
}

// Quiesced returns the group's quiesced record, and whether it is quiesced.
func (n *Node) Quiesced() (Quiesced, bool) {
	if q := n.quiet.state.Load(); q != nil {
		return *q, true
	}
	return Quiesced{}, false
}

// wake counts activity and makes a quiesced group tick again from the next
// tick on. It is called for every local proposal, read, conf change and
// leadership transfer, and for the raft messages stepped in (wakesGroup).
func (n *Node) wake() {
	n.quiet.activity.Add(1)
	if n.quiet.state.Load() != nil {
		n.quiet.state.Store(nil)
	}
}

// wakesGroup reports whether stepping m counts as activity. Two messages do
// not: a heartbeat's answer with no read in it (what a leader hears while
// idle, and what arrives for the heartbeats sent just before quiescing),
// and, to a quiesced follower, a heartbeat with no read in it from the
// leader and term that quiesced it (one sent before the Quiesce, whose
// raft Ready left after it; or the heartbeat of a leader that woke for
// another member, which does not need this one ticking).
func (n *Node) wakesGroup(m *raftpb.Message) bool {
	switch {
	case len(m.Context) > 0:
		return true
	case m.Type == raftpb.MsgHeartbeatResp:
		return false
	case m.Type == raftpb.MsgHeartbeat:
		q := n.quiet.state.Load()
		return q == nil || m.From != q.Leader || m.Term != q.Term
	}
	return true
}

// Quiesce is a follower's handling of its leader's transport.Quiesce: the
// group stops ticking if quiescing is enabled, this node follows from at
// term, and its log ends at commit, which is also its commit index.
// Otherwise nothing changes. It reports whether the group quiesced.
func (n *Node) Quiesce(from, term, commit uint64) bool {
	if !n.cfg.Quiesce || from == n.cfg.ID || from == raft.None {
		return false
	}
	seen := n.quiet.activity.Load()
	st := n.Status()
	last, err := n.storage.LastIndex()
	if err != nil || st.RaftState != raft.StateFollower || st.Term != term || st.Lead != from ||
		st.Commit != commit || last != commit {
		n.log.Debug("quiesce ignored", "from", from, "term", term, "commit", commit,
			"state", st.RaftState.String(), "own_term", st.Term, "leader", st.Lead, "own_commit", st.Commit, "last", last)
		return false
	}
	voters, learners := ConfigOf(st)
	return n.setQuiesced(&Quiesced{Leader: from, Term: term, Commit: commit, Since: n.cfg.Clock.Now(), Voters: voters, Learners: learners}, seen)
}

// setQuiesced records q unless activity moved past seen meanwhile: wake,
// on any goroutine, counts activity before it clears the record, so
// whichever order the two run in, the group ends up ticking.
func (n *Node) setQuiesced(q *Quiesced, seen uint64) bool {
	n.quiet.state.Store(q)
	if n.quiet.activity.Load() != seen {
		n.quiet.state.CompareAndSwap(q, nil)
		return false
	}
	return true
}

// Unquiesce makes a quiesced group tick again from the next tick on; the
// server calls it when the group's leader is no longer heard from, no
// longer leads, or a member does not follow this leader. leaderLost says
// the leader has not been heard from for longer than an election timeout:
// the next tick then also takes ElectionTicks-1 ticks at once, as the
// follower would have taken them had it ticked, so an election starts
// after the randomized part of its timeout rather than a whole one.
func (n *Node) Unquiesce(reason string, leaderLost bool) {
	q := n.quiet.state.Load()
	if q == nil {
		return
	}
	if leaderLost {
		n.quiet.wakeTicks.Store(int32(min(n.cfg.ElectionTicks-1, maxWakeTicks)))
	}
	n.wake()
	n.log.Info("group unquiesced", "reason", reason, "quiesced_term", q.Term, "quiesced_leader", q.Leader)
}

// HoldQuiesce keeps this node from quiescing the group for the next ticks
// ticks: the server holds a leader back whose members did not acknowledge
// its last quiesce (members of an older latch, which drop the Quiesce and
// would campaign for want of heartbeats).
func (n *Node) HoldQuiesce(ticks int) { n.quiet.holdTicks.Store(int64(ticks)) }

// maxWakeTicks bounds the extra ticks one wake takes at once (under the
// lock: each is a short step of raft).
const maxWakeTicks = 64

// tickRaft advances raft's clock by a tick, and by the extra ticks an
// Unquiesce asked for.
func (n *Node) tickRaft() {
	extra := n.quiet.wakeTicks.Swap(0)
	n.mu.Lock()
	defer n.mu.Unlock()
	for range 1 + extra {
		n.raft.Tick()
	}
}

// maybeQuiesce quiesces the group, in place of a tick, when this node leads
// it and has found it idle for quiesceTicks ticks in a row with no activity
// in between; it reports whether it did.
func (n *Node) maybeQuiesce() bool {
	if !n.cfg.Quiesce || n.leader.Load() != n.cfg.ID {
		n.quiet.idleTicks = 0
		return false
	}
	if n.quiet.holdTicks.Load() > 0 {
		n.quiet.holdTicks.Add(-1)
		n.quiet.idleTicks = 0
		return false
	}
	seen := n.quiet.activity.Load()
	if seen != n.quiet.idleSeen {
		n.quiet.idleSeen, n.quiet.idleTicks, n.quiet.recheckIn = seen, 0, 0
		return false
	}
	if n.quiet.recheckIn > 0 {
		n.quiet.recheckIn--
		return false
	}
	st, idle := n.idleStatus()
	if !idle {
		n.quiet.idleTicks, n.quiet.recheckIn = 0, n.cfg.ElectionTicks
		return false
	}
	if n.quiet.idleTicks++; n.quiet.idleTicks < quiesceTicks {
		return false
	}
	n.quiet.idleTicks = 0
	voters, learners := ConfigOf(st)
	if !n.setQuiesced(&Quiesced{Leader: n.cfg.ID, Term: st.Term, Commit: st.Commit, Since: n.cfg.Clock.Now(), Voters: voters, Learners: learners}, seen) {
		return false
	}
	msg := transport.Quiesce{Group: n.cfg.Group, Term: st.Term, Commit: st.Commit}
	for id := range st.Progress {
		if id != n.cfg.ID {
			n.cfg.Transport.SendPeer(id, msg)
		}
	}
	n.log.Debug("group quiesced", "term", st.Term, "commit", st.Commit)
	return true
}

// idleStatus returns raft's status and whether the group is idle: this node
// leads with no leadership transfer under way, nothing is waiting to be
// made durable, every entry is committed, applied here and held by every
// member (voters and learners), and no member is being sent a snapshot.
// Called from the Ready loop.
func (n *Node) idleStatus() (raft.Status, bool) {
	if n.appender.busyFor() > 0 || n.appender.backlogged() {
		return raft.Status{}, false
	}
	st := n.Status()
	if st.RaftState != raft.StateLeader || st.LeadTransferee != raft.None || n.appliedIndex != st.Commit {
		return st, false
	}
	if last, err := n.storage.LastIndex(); err != nil || last != st.Commit {
		return st, false
	}
	for _, pr := range st.Progress {
		if pr.Match != st.Commit || pr.State == tracker.StateSnapshot {
			return st, false
		}
	}
	return st, true
}
