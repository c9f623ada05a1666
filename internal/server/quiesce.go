package server

import (
	"fmt"
	"sync"
	"time"

	"go.etcd.io/raft/v3"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/raftnode"
	"github.com/latch-io/latch/internal/transport"
)

// Idle shard groups quiesce (internal/raftnode, "Quiescing"): a leader that
// finds its group idle stops ticking it and tells the members
// (transport.Quiesce), which stop ticking it too. The meta group (shard 0)
// never quiesces: its leader's view of who is recently active decides
// membership changes and leader balancing, and a quiesced leader's view
// stands still.
//
// A quiesced group hears no heartbeats, so what raft would learn from them
// this server learns from the members' status reports (statusreports.go),
// and wakes the group (Node.Unquiesce) so that raft handles it as before:
//   - a quiesced follower whose leader has not been heard from for
//     statusReportStaleness, or whose leader's report, sent since the group
//     quiesced, no longer shows it leading the group at that term: an
//     election happens as it would have;
//   - a quiesced leader that has not heard from a quorum of the group's
//     voters for statusReportStaleness (CheckQuorum then makes it step down
//     as before), or hears, in a report sent since the group quiesced, of a
//     member that does not follow it at that term or lags its commit index
//     (a member restarted, or one that refused the Quiesce).
//
// A follower that quiesces acknowledges it with the same Quiesce sent back
// to its leader. A quiesced leader that, a quarter of an election timeout
// after quiescing, lacks the acknowledgement of a member it hears from
// (one that runs a latch without quiescing drops the Quiesce as malformed,
// and would campaign for want of heartbeats) ticks again and does not
// quiesce for quiesceHoldElections election timeouts: long before that
// member's election timeout, so a rolling upgrade costs no election.
//
// Quiescing touches liveness only: raft's safety does not depend on ticks.

// quiesceCheckInterval is how often the quiesced groups are checked: a
// quarter of the status report interval or of an election timeout,
// whichever is shorter.
func (s *Server) quiesceCheckInterval() time.Duration {
	return min(StatusReportInterval, s.electionTimeout()) / 4
}

// quiesceAckWait is how long after quiescing a leader waits for its
// members' acknowledgements.
func (s *Server) quiesceAckWait() time.Duration { return s.electionTimeout() / 4 }

// quiesceHoldElections is how many election timeouts a leader whose quiesce
// was not acknowledged waits before it quiesces again.
const quiesceHoldElections = 10

// quiesceAcks keeps, per group, the quiesce each member last acknowledged.
type quiesceAcks struct {
	mu   sync.Mutex
	acks map[uint64]map[uint64]quiesceKey // group -> member -> its last acknowledgement; guarded by mu
}

// quiesceKey names one quiesce of a group: its leader's term and commit index.
type quiesceKey struct{ term, commit uint64 }

func (a *quiesceAcks) record(group, member uint64, key quiesceKey) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.acks == nil {
		a.acks = map[uint64]map[uint64]quiesceKey{}
	}
	if a.acks[group] == nil {
		a.acks[group] = map[uint64]quiesceKey{}
	}
	a.acks[group][member] = key
}

func (a *quiesceAcks) acked(group, member uint64, key quiesceKey) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.acks[group][member] == key
}

// receiveQuiesce handles a Quiesce from member from: on the quiesced
// leader of that quiesce, its acknowledgement; otherwise a leader's word,
// which the group's node checks and, if it quiesces, acknowledges.
func (s *Server) receiveQuiesce(from uint64, m transport.Quiesce) {
	g := s.lookupGroup(m.Group)
	if g == nil {
		return
	}
	key := quiesceKey{term: m.Term, commit: m.Commit}
	if q, ok := g.Node().Quiesced(); ok && q.Leader == s.id {
		if (quiesceKey{term: q.Term, commit: q.Commit}) == key {
			s.quiesceAcks.record(m.Group, from, key)
		}
		return
	}
	if g.Node().Quiesce(from, m.Term, m.Commit) {
		s.transport.SendPeer(from, m)
	}
}

// runQuiesceChecks checks the quiesced groups every quiesceCheckInterval
// until the server stops; with one shard there is none to check.
func (s *Server) runQuiesceChecks() {
	if s.cfg.Shards == 1 {
		return
	}
	ticker := s.cfg.Clock.NewTicker(s.quiesceCheckInterval())
	defer ticker.Stop()
	for {
		select {
		case <-ticker.C():
			s.checkQuiesced()
		case <-s.stop:
			return
		}
	}
}

// checkQuiesced wakes every quiesced group whose quiescence the status
// reports no longer support (see the comment at the top of the file).
func (s *Server) checkQuiesced() {
	now := s.cfg.Clock.Now()
	for _, g := range s.allGroups() {
		if g == nil {
			continue
		}
		q, ok := g.Node().Quiesced()
		if !ok {
			continue
		}
		if q.Leader == s.id {
			if reason, hold := s.leaderQuiescenceBroken(g, q, now); reason != "" {
				if hold {
					g.Node().HoldQuiesce(quiesceHoldElections * s.cfg.ElectionTicks)
				}
				g.Node().Unquiesce(reason, false)
			}
			continue
		}
		if reason, lost := s.followerQuiescenceBroken(g, q, now); reason != "" {
			g.Node().Unquiesce(reason, lost)
		}
	}
}

// followerQuiescenceBroken says why a quiesced follower must tick again ("":
// it need not); lost is set when its leader is not heard from at all.
func (s *Server) followerQuiescenceBroken(g *group, q raftnode.Quiesced, now time.Time) (reason string, lost bool) {
	if !s.heardWithin(q.Leader, now) {
		return fmt.Sprintf("leader %s not heard from for over %v", api.FormatID(q.Leader), statusReportStaleness), true
	}
	heard, ok := s.peerReports.latest(q.Leader)
	if !ok || !heard.at.After(q.Since) {
		return "", false
	}
	if gs, found := reportedShard(heard.report, g.shard); !found || gs.Role != transport.RoleLeader || gs.Term != q.Term {
		return fmt.Sprintf("leader %s reports it no longer leads at term %d", api.FormatID(q.Leader), q.Term), false
	}
	return "", false
}

// leaderQuiescenceBroken says why a quiesced leader must tick again ("": it
// need not), and whether it must also hold off quiescing (a member did not
// acknowledge). It reads the configuration the quiesce recorded, which
// stays while the group is quiesced, rather than ask raft.
func (s *Server) leaderQuiescenceBroken(g *group, q raftnode.Quiesced, now time.Time) (reason string, hold bool) {
	ackDue := now.Sub(q.Since) >= s.quiesceAckWait()
	key := quiesceKey{term: q.Term, commit: q.Commit}
	heardVoters := 0
	for i := range len(q.Voters) + len(q.Learners) {
		voter := i < len(q.Voters)
		var id uint64
		if voter {
			id = q.Voters[i]
		} else {
			id = q.Learners[i-len(q.Voters)]
		}
		if id == s.id {
			if voter {
				heardVoters++
			}
			continue
		}
		alive := s.heardWithin(id, now)
		if voter && alive {
			heardVoters++
		}
		if alive && ackDue && !s.quiesceAcks.acked(g.Group(), id, key) {
			return fmt.Sprintf("member %s did not acknowledge the quiesce within %v (does it run a latch without quiescing?)",
				api.FormatID(id), s.quiesceAckWait()), true
		}
		heard, ok := s.peerReports.latest(id)
		if !ok || !heard.at.After(q.Since) {
			continue
		}
		if gs, found := reportedShard(heard.report, g.shard); !found || gs.Leader != s.id || gs.Term != q.Term || gs.CommitIndex < q.Commit {
			return fmt.Sprintf("member %s does not follow at term %d with commit index %d", api.FormatID(id), q.Term, q.Commit), false
		}
	}
	if quorum := len(q.Voters)/2 + 1; heardVoters < quorum {
		return fmt.Sprintf("%d of %d voters heard from within %v, below a quorum", heardVoters, len(q.Voters), statusReportStaleness), false
	}
	return "", false
}

// heardWithin reports whether member id has been heard from (a status
// report) within statusReportStaleness of now, counting this server's start
// as heard: reports begin to flow only once the member table is applied,
// and a member not heard from since is lost only after as long.
func (s *Server) heardWithin(id uint64, now time.Time) bool {
	last := s.started
	if heard, ok := s.peerReports.latest(id); ok && heard.at.After(last) {
		last = heard.at
	}
	return now.Sub(last) <= statusReportStaleness
}

// reportedShard returns a status report's entry for shard, if it has one.
// A report lists the shards in order, so the entry is usually at its index.
func reportedShard(r transport.StatusReport, shard int) (transport.GroupStatus, bool) {
	if shard < len(r.Shards) && int(r.Shards[shard].Shard) == shard {
		return r.Shards[shard].GroupStatus, true
	}
	for _, entry := range r.Shards {
		if int(entry.Shard) == shard {
			return entry.GroupStatus, true
		}
	}
	return transport.GroupStatus{}, false
}

// quiescedGroups counts the groups quiesced on this member.
func (s *Server) quiescedGroups() int {
	count := 0
	for _, g := range s.allGroups() {
		if g == nil {
			continue
		}
		if _, ok := g.Node().Quiesced(); ok {
			count++
		}
	}
	return count
}

// leaderStatus is the raft status of group g as the leader-side checks of
// shard reconciliation read it (a learner caught up and recently active, a
// quorum left after a removal): while the group is quiesced raft's
// RecentActive stands still, so a member counts as recently active only if
// its status report is fresh too.
func (s *Server) leaderStatus(g *group) raft.Status {
	st := g.Node().Status()
	if _, quiesced := g.Node().Quiesced(); !quiesced {
		return st
	}
	now := s.cfg.Clock.Now()
	for id, pr := range st.Progress {
		if id == s.id || !pr.RecentActive {
			continue
		}
		if !s.heardWithin(id, now) {
			pr.RecentActive = false
			st.Progress[id] = pr
		}
	}
	return st
}
