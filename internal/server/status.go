package server

import (
	"context"
	"time"

	"go.etcd.io/raft/v3"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/command"
	"github.com/latch-io/latch/internal/fsm"
	"github.com/latch-io/latch/internal/raftnode"
)

// Status reports this server's view of the cluster.
func (s *Server) Status() api.Status {
	g := s.metaGroup()
	st := g.Node().Status()
	var members []command.Member
	g.View(func(f *fsm.FSM) { members = f.Members() })
	out := api.Status{
		ID: api.FormatID(s.id), Name: s.cfg.Name, Role: roleOf(st, s.id), Term: st.Term,
		CommitIndex: st.Commit, AppliedIndex: g.Applied(), Members: toAPIMembers(members),
		Storage: s.storage.status(), StorageError: s.storage.describe(),
	}
	if st.Lead != raft.None {
		out.LeaderID = api.FormatID(st.Lead)
		out.LeaderClient = g.LeaderHint()
	}
	out.Shards = s.ShardStatuses()
	return out
}

// ShardStatuses reports every running shard's leader, term and indexes as
// this server sees them.
func (s *Server) ShardStatuses() []api.ShardStatus {
	out := make([]api.ShardStatus, 0, len(s.groups))
	for shard, g := range s.allGroups() {
		if g == nil {
			continue
		}
		st := g.Node().Status()
		row := api.ShardStatus{Shard: shard, Role: roleOf(st, s.id), Term: st.Term, CommitIndex: st.Commit, AppliedIndex: g.Applied()}
		_, row.Quiesced = g.Node().Quiesced()
		if st.Lead != raft.None {
			row.LeaderID = api.FormatID(st.Lead)
		}
		out = append(out, row)
	}
	return out
}

func roleOf(st raft.Status, self uint64) string {
	switch st.RaftState {
	case raft.StateLeader:
		return "leader"
	case raft.StateCandidate, raft.StatePreCandidate:
		return "candidate"
	}
	if _, ok := st.Config.Learners[self]; ok {
		return "learner"
	}
	return "follower"
}

// ReadMembers lists the members at the requested consistency: by default
// after a linearizable barrier, so a removal or an addition acknowledged
// anywhere is seen; a stale read answers from this server's state (what an
// operator still gets from a member cut off from the leader).
func (s *Server) ReadMembers(ctx context.Context, opts ReadOptions) (api.Members, error) {
	if err := s.authorizeAs(ctx, permNone, "/", 0); err != nil {
		return api.Members{}, err
	}
	if err := s.metaGroup().Barrier(ctx, opts.Consistency, opts.minIndexIn(s.metaGroup())); err != nil {
		return api.Members{}, err
	}
	return s.Members(), nil
}

// Members lists the members recorded in this server's replicated state.
func (s *Server) Members() api.Members {
	g := s.metaGroup()
	var members []command.Member
	index := g.View(func(f *fsm.FSM) { members = f.Members() })
	return api.Members{Members: toAPIMembers(members), Index: index}
}

func toAPIMembers(ms []command.Member) []api.Member {
	out := make([]api.Member, 0, len(ms))
	for _, m := range ms {
		out = append(out, api.Member{
			ID: api.FormatID(m.ID), Name: m.Name, PeerURL: m.PeerURL, ClientURL: m.ClientURL,
			Voter: !m.Learner, Learner: m.Learner,
		})
	}
	return out
}

// Ready reports whether the server knows a leader and has applied everything
// it knows to be committed, in every shard (the /readyz check); never once its raft node
// stopped (a fatal error, such as a committed entry it cannot decode).
func (s *Server) Ready() bool {
	for _, g := range s.allGroups() {
		if g == nil || g.Halted() != nil {
			return false
		}
		if st := g.Node().Status(); st.Lead == raft.None || g.Applied() < st.Commit {
			return false
		}
	}
	return true
}

// AppliedIndex is the main group's applied index on this server.
func (s *Server) AppliedIndex() uint64 { return s.metaGroup().Applied() }

// ShardApplied is shard's applied index on this server (0 <= shard <
// Shards()).
func (s *Server) ShardApplied(shard int) uint64 { return s.groups[shard].Load().Applied() }

// StateHash is the main group's state-machine hash and the index it covers.
func (s *Server) StateHash() (hash, index uint64) {
	g := s.metaGroup()
	index = g.View(func(f *fsm.FSM) { hash = f.Hash() })
	return hash, index
}

// LastTick is when the main group's raft node last ticked, a reading of
// Config.Clock: tests that drive a fake clock wait for it after advancing.
func (s *Server) LastTick() time.Time { return s.metaGroup().LastTick() }

// LeaderID is the raft id of the leader this server follows (0: none known).
func (s *Server) LeaderID() uint64 { return s.metaGroup().Leader() }

// ShardConfig returns the voters and learners of shard's consensus group
// as this server's raft node sees them (nil, nil for no such shard).
func (s *Server) ShardConfig(shard int) (voters, learners []uint64) {
	if shard < 0 || shard >= len(s.groups) {
		return nil, nil
	}
	g := s.groups[shard].Load()
	if g == nil {
		return nil, nil
	}
	return raftnode.ConfigOf(g.Node().Status())
}
