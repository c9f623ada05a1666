package server

import (
	"fmt"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/command"
	"github.com/latch-io/latch/internal/fsm"
	"github.com/latch-io/latch/internal/transport"
)

// ClusterHealth answers from the status reports the members send each other
// over the peer transport (statusreports.go), never from a request of its
// own: the peer connections are authenticated between members (mutual TLS
// when peer TLS is on) whatever the client port asks of its callers (TLS
// with a private CA, client certificates, auth), so the answer is the same
// for a caller known by a bearer token, by a client certificate or by
// nothing.

// ClusterHealth reports every member in this server's member table: this
// server itself as it is now, every other member as its latest status
// report says if that report arrived within statusReportStaleness
// (reachable), else unreachable with an error saying for how long it has
// not been heard from. It also reports each reachable member's lag behind
// the highest commit index reported, and the leader the reachable members
// agree on. It reads and changes nothing of the replicated state, and waits
// for nobody: a member cut off from the others answers at once, with them
// unreachable.
func (s *Server) ClusterHealth() api.ClusterHealth {
	var members []command.Member
	index := s.metaGroup().View(func(f *fsm.FSM) { members = f.Members() })
	out := api.ClusterHealth{Answered: s.cfg.Name, Members: make([]api.MemberHealth, len(members)), Index: index}
	now := s.cfg.Clock.Now()
	for i, m := range toAPIMembers(members) {
		out.Members[i].Member = m
		if id := members[i].ID; id == s.id {
			fillHealth(&out.Members[i], s.statusReport())
		} else {
			s.fillHeard(&out.Members[i], id, now)
		}
	}
	out.LeaderID = agreedLeader(out.Members)
	setLag(out.Members)
	return out
}

// fillHeard fills h from the latest status report member id sent, if it
// arrived within statusReportStaleness of now, or says why not.
func (s *Server) fillHeard(h *api.MemberHealth, id uint64, now time.Time) {
	heard, ok := s.peerReports.latest(id)
	if !ok {
		h.Error = "never heard from: no status report since this member started"
		return
	}
	if age := now.Sub(heard.at); age > statusReportStaleness {
		h.Error = fmt.Sprintf("no status report for %s", age.Truncate(100*time.Millisecond))
		return
	}
	fillHealth(h, heard.report)
}

// fillHealth records what a member reported of itself.
func fillHealth(h *api.MemberHealth, r transport.StatusReport) {
	h.Reachable = true
	h.Role, h.Term, h.LeaderID = roleName(r.Main.Role), r.Main.Term, formatLeader(r.Main.Leader)
	h.CommitIndex, h.AppliedIndex = r.Main.CommitIndex, r.Main.AppliedIndex
	if len(r.Shards) > 1 {
		h.Shards = make([]api.ShardStatus, len(r.Shards))
		for i, shard := range r.Shards {
			h.Shards[i] = api.ShardStatus{
				Shard: int(shard.Shard), Role: roleName(shard.Role), LeaderID: formatLeader(shard.Leader),
				Term: shard.Term, CommitIndex: shard.CommitIndex, AppliedIndex: shard.AppliedIndex,
			}
		}
	}
}

// formatLeader formats a reported leader's id, "" for none.
func formatLeader(id uint64) string {
	if id == 0 {
		return ""
	}
	return api.FormatID(id)
}

// agreedLeader is the id of the member that reports itself leader in the
// highest term any reachable member reports itself leader in ("" if none).
func agreedLeader(members []api.MemberHealth) string {
	var leader string
	var term uint64
	for _, m := range members {
		if m.Reachable && m.Role == "leader" && m.Term >= term {
			leader, term = m.ID, m.Term
		}
	}
	return leader
}

// setLag sets each reachable member's lag behind the highest commit index
// reported.
func setLag(members []api.MemberHealth) {
	var commit uint64
	for _, m := range members {
		commit = max(commit, m.CommitIndex)
	}
	for i := range members {
		if members[i].Reachable && members[i].AppliedIndex < commit {
			members[i].Lag = commit - members[i].AppliedIndex
		}
	}
}
