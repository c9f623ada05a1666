package server

import (
	"context"
	"slices"
	"sort"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/latch-io/latch/internal/command"
	"github.com/latch-io/latch/internal/fsm"
	"github.com/latch-io/latch/internal/raftnode"
)

// With more than one shard, every member runs one coordination loop (an
// election timeout per round) that makes the shard groups one cluster:
//
//   - Membership reconciliation. The meta group (shard 0) decides every
//     membership change (members.go). Each member then brings the shard
//     groups it leads to the meta group's configuration, one conf change
//     per group per round, idempotently: a member the meta group has and
//     the shard lacks is added as a learner; a meta voter that is a learner
//     in the shard is promoted once caught up in that shard (its leader alone
//     knows); a member the meta group recorded as removed is removed. The
//     member's view of the meta group may lag, so it acts only on facts that
//     never revert: an add only of a member the meta group lists and neither
//     group recorded as removed (ids are never reused), a removal only of a
//     member the meta group recorded as removed. A leader change or a crash
//     midway leaves the work to the shard's next leader, which finds what is
//     still missing. Safety does not depend on it: each group's raft decides
//     its own configuration; reconciliation only keeps them equal.
//   - Leader balance. The meta leader counts the shards each healthy meta
//     voter leads (as it sees them) and, while the most and the fewest
//     differ by more than one, asks a shard of the busiest to transfer its
//     leadership to the idlest (raft forwards the request to that shard's
//     leader). Transfers touch liveness only.

// startShardCoordination starts the coordination loop when there is more
// than one shard.
func (s *Server) startShardCoordination() {
	if s.cfg.Shards > 1 {
		s.goBackground(s.coordinate)
	}
}

func (s *Server) coordinate() {
	for s.pause(s.electionTimeout()) {
		meta := s.metaGroup()
		if meta.Halted() != nil {
			return
		}
		s.reconcileShards(meta)
		if meta.Leader() == s.id {
			s.balanceLeaders(meta)
		}
	}
}

// metaView is this member's applied view of the meta group's members.
type metaView struct {
	members []command.Member
	removed func(id uint64) bool
}

func (s *Server) readMetaView(meta *group) metaView {
	var v metaView
	removed := map[uint64]bool{}
	meta.View(func(f *fsm.FSM) {
		v.members = f.Members()
		for _, id := range s.shardMemberIDs() {
			if _, ok := f.RemovedMember(id); ok {
				removed[id] = true
			}
		}
	})
	v.removed = func(id uint64) bool { return removed[id] }
	return v
}

// shardMemberIDs lists every member id in any shard group's configuration
// as this member sees it.
func (s *Server) shardMemberIDs() []uint64 {
	seen := map[uint64]bool{}
	for _, g := range s.allGroups()[1:] {
		if g == nil {
			continue
		}
		if q, ok := g.Node().Quiesced(); ok {
			for _, id := range slices.Concat(q.Voters, q.Learners) {
				seen[id] = true
			}
			continue
		}
		for id := range configIDs(g.Node().Status()) {
			seen[id] = true
		}
	}
	out := make([]uint64, 0, len(seen))
	for id := range seen {
		out = append(out, id)
	}
	return out
}

// configIDs returns the voters and learners of a group's configuration.
func configIDs(st raft.Status) map[uint64]bool {
	ids := map[uint64]bool{}
	for id := range st.Config.Voters.IDs() {
		ids[id] = true
	}
	for id := range st.Config.Learners {
		ids[id] = true
	}
	return ids
}

// reconcileShards proposes, in each shard group this member leads, the
// first conf change it lacks to match the meta group.
func (s *Server) reconcileShards(meta *group) {
	view := s.readMetaView(meta)
	for _, g := range s.allGroups()[1:] {
		if g == nil || g.Leader() != s.id {
			continue
		}
		change, member, ok := s.missingChange(g, view)
		if !ok {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.RequestTimeout)
		if _, err := g.ProposeConfChange(ctx, change, member); err != nil {
			s.log.Debug("shard membership change not applied yet; retrying next round",
				"group", g.Group(), "change", change.Type.String(), "member", change.NodeID, "err", err)
		}
		cancel()
	}
}

// missingChange returns the first change shard group g (which this member
// leads) needs to match view, with the member record its conf change
// carries.
func (s *Server) missingChange(g *group, view metaView) (raftpb.ConfChangeSingle, command.Member, bool) {
	if q, ok := g.Node().Quiesced(); ok && q.Leader == s.id && !quiescedConfigLacks(q, view) {
		return raftpb.ConfChangeSingle{}, command.Member{}, false // an idle shard costs no call into raft
	}
	st := s.leaderStatus(g)
	if st.RaftState != raft.StateLeader {
		return raftpb.ConfChangeSingle{}, command.Member{}, false
	}
	inShard := configIDs(st)
	shardRemoved := map[uint64]bool{}
	g.View(func(f *fsm.FSM) {
		for _, m := range view.members {
			if _, ok := f.RemovedMember(m.ID); ok {
				shardRemoved[m.ID] = true
			}
		}
	})
	for _, m := range view.members {
		switch {
		case shardRemoved[m.ID] || view.removed(m.ID):
		case !inShard[m.ID]:
			add := m
			add.Learner = true
			return raftpb.ConfChangeSingle{Type: raftpb.ConfChangeAddLearnerNode, NodeID: m.ID}, add, true
		case !m.Learner && isLearnerIn(st, m.ID) && s.checkCaughtUp(st, m.ID) == nil:
			return raftpb.ConfChangeSingle{Type: raftpb.ConfChangeAddNode, NodeID: m.ID}, command.Member{}, true
		}
	}
	for _, id := range sortedIDs(inShard) {
		if id != s.id && view.removed(id) && checkQuorumAfterRemoval(st, id) == nil {
			return raftpb.ConfChangeSingle{Type: raftpb.ConfChangeRemoveNode, NodeID: id}, command.Member{ID: id}, true
		}
	}
	return raftpb.ConfChangeSingle{}, command.Member{}, false
}

// quiescedConfigLacks reports whether the configuration a quiesced group
// recorded may lack a change to match view: a member to add or promote, or
// one the meta group removed. It is missingChange's test without the
// checks that need raft (caught up, quorum left), which missingChange then
// makes.
func quiescedConfigLacks(q raftnode.Quiesced, view metaView) bool {
	for _, m := range view.members {
		voter, learner := slices.Contains(q.Voters, m.ID), slices.Contains(q.Learners, m.ID)
		switch {
		case view.removed(m.ID):
		case !voter && !learner:
			return true
		case !m.Learner && learner:
			return true
		}
	}
	for _, id := range slices.Concat(q.Voters, q.Learners) {
		if view.removed(id) {
			return true
		}
	}
	return false
}

func isLearnerIn(st raft.Status, id uint64) bool {
	_, ok := st.Config.Learners[id]
	return ok
}

func sortedIDs(set map[uint64]bool) []uint64 {
	out := make([]uint64, 0, len(set))
	for id := range set {
		out = append(out, id)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// balanceLeaders moves shard leaderships from the members that lead the
// most shards to those that lead the fewest, until the counts differ by at
// most one. Only healthy meta voters that are voters of the shard take a
// leadership.
func (s *Server) balanceLeaders(meta *group) {
	metaStatus := meta.Node().Status()
	if metaStatus.RaftState != raft.StateLeader {
		return
	}
	leads := map[uint64][]*group{}
	for v := range metaStatus.Config.Voters.IDs() {
		if healthy(metaStatus, v) {
			leads[v] = nil
		}
	}
	for _, g := range s.allGroups() {
		if g == nil {
			continue
		}
		if lead := g.Leader(); lead != raft.None {
			if _, ok := leads[lead]; ok {
				leads[lead] = append(leads[lead], g)
			}
		}
	}
	for range len(s.groups) {
		busiest, idlest := extremes(leads)
		if busiest == raft.None || len(leads[busiest])-len(leads[idlest]) <= 1 {
			return
		}
		moved := s.transferOneShard(leads[busiest], idlest)
		if moved == nil {
			return
		}
		leads[busiest] = without(leads[busiest], moved)
		leads[idlest] = append(leads[idlest], moved)
	}
}

// extremes returns the member leading the most groups and the one leading
// the fewest (ties broken by id, so every round picks the same).
func extremes(leads map[uint64][]*group) (busiest, idlest uint64) {
	ids := make([]uint64, 0, len(leads))
	for id := range leads {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		if busiest == raft.None || len(leads[id]) > len(leads[busiest]) {
			busiest = id
		}
		if idlest == raft.None || len(leads[id]) < len(leads[idlest]) {
			idlest = id
		}
	}
	return busiest, idlest
}

// transferOneShard asks one of groups (never the meta group if another will
// do, so the balancer keeps its seat) to hand its leadership to target, a
// voter of that group; it returns the group asked, or nil.
func (s *Server) transferOneShard(groups []*group, target uint64) *group {
	for pass := range 2 {
		for i := len(groups) - 1; i >= 0; i-- {
			g := groups[i]
			if (g.Group() == groupOfShard(0)) != (pass == 1) {
				continue
			}
			if _, voter := g.Node().Status().Config.Voters.IDs()[target]; !voter {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), s.cfg.RequestTimeout)
			g.Node().TransferLeadership(ctx, target)
			cancel()
			return g
		}
	}
	return nil
}

func without(groups []*group, g *group) []*group {
	out := groups[:0:0]
	for _, x := range groups {
		if x != g {
			out = append(out, x)
		}
	}
	return out
}
