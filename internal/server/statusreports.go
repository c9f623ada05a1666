package server

import (
	"slices"
	"sync"
	"time"

	"go.etcd.io/raft/v3"

	"github.com/latch-io/latch/internal/fsm"
	"github.com/latch-io/latch/internal/transport"
)

// Every member sends its own status (transport.StatusReport: its role and
// indexes in the meta group and in every shard) to every other member in its
// member table once every StatusReportInterval, and keeps the latest report
// it heard from each, with the time it arrived by its own clock. That is
// what ClusterHealth answers from (health.go).

// StatusReportInterval is how often a member sends its status report to
// every other member.
const StatusReportInterval = time.Second

// statusReportStaleness is how old the latest report of a member may be for
// ClusterHealth to count it reachable: three reports lost in a row, or a
// member stopped, paused or cut off for that long, makes it unreachable.
const statusReportStaleness = 3 * StatusReportInterval

// peerReports keeps the latest status report heard from each member.
type peerReports struct {
	mu    sync.Mutex
	heard map[uint64]heardReport // guarded by mu; only members of the member table at the last send are kept
}

// heardReport is a status report and when it arrived.
type heardReport struct {
	report transport.StatusReport
	at     time.Time // a reading of Config.Clock on the receiver
}

// record keeps r as the latest report of member from, heard at at. It is
// called from the transport's reader of from's connection, so one member's
// reports are recorded in the order it sent them.
func (p *peerReports) record(from uint64, r transport.StatusReport, at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.heard == nil {
		p.heard = map[uint64]heardReport{}
	}
	p.heard[from] = heardReport{report: r, at: at}
}

// latest returns the latest report heard from member id, if any.
func (p *peerReports) latest(id uint64) (heardReport, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	heard, ok := p.heard[id]
	return heard, ok
}

// keepOnly forgets the reports of everyone not in members, so that the map
// stays as small as the member table.
func (p *peerReports) keepOnly(members []uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id := range p.heard {
		if !slices.Contains(members, id) {
			delete(p.heard, id)
		}
	}
}

// runStatusReports sends this member's status report to every other member
// at once and then every StatusReportInterval, until the server stops. It
// runs on a goroutine of its own, started once every group runs.
func (s *Server) runStatusReports() {
	ticker := s.cfg.Clock.NewTicker(StatusReportInterval)
	defer ticker.Stop()
	var members []uint64
	for {
		members = s.sendStatusReports(members[:0])
		select {
		case <-ticker.C():
		case <-s.stop:
			return
		}
	}
}

// sendStatusReports sends one status report to every other member of the
// member table, which it appends to ids and returns (the caller reuses the
// slice): one report value is built and shared by every send.
func (s *Server) sendStatusReports(ids []uint64) []uint64 {
	s.metaGroup().View(func(f *fsm.FSM) {
		for _, m := range f.Members() {
			ids = append(ids, m.ID)
		}
	})
	s.peerReports.keepOnly(ids)
	report := s.statusReport()
	for _, id := range ids {
		if id != s.id {
			s.transport.SendPeer(id, report)
		}
	}
	return ids
}

// statusReport is this member's role and indexes in the meta group and in
// every running shard, as GET /v1/status reports them.
func (s *Server) statusReport() transport.StatusReport {
	groups := s.allGroups()
	report := transport.StatusReport{Shards: make([]transport.ShardStatus, 0, len(groups))}
	for shard, g := range groups {
		if g == nil {
			continue
		}
		status := s.groupStatus(g)
		if shard == 0 {
			report.Main = status
		}
		report.Shards = append(report.Shards, transport.ShardStatus{Shard: uint32(shard), GroupStatus: status})
	}
	return report
}

// groupStatus is this member's role and indexes in group g. A quiesced
// group's are those its quiesce recorded (nothing changes without waking
// it), so an idle shard costs no call into raft.
func (s *Server) groupStatus(g *group) transport.GroupStatus {
	if q, ok := g.Node().Quiesced(); ok {
		role := transport.RoleFollower
		switch {
		case q.Leader == s.id:
			role = transport.RoleLeader
		case slices.Contains(q.Learners, s.id):
			role = transport.RoleLearner
		}
		return transport.GroupStatus{Role: role, Term: q.Term, Leader: q.Leader, CommitIndex: q.Commit, AppliedIndex: g.Applied()}
	}
	st := g.Node().Status()
	return transport.GroupStatus{
		Role: reportRole(st, s.id), Term: st.Term, Leader: st.Lead, CommitIndex: st.Commit, AppliedIndex: g.Applied(),
	}
}

// reportRole is roleOf as a status report carries it.
func reportRole(st raft.Status, self uint64) transport.MemberRole {
	switch roleOf(st, self) {
	case "leader":
		return transport.RoleLeader
	case "candidate":
		return transport.RoleCandidate
	case "learner":
		return transport.RoleLearner
	}
	return transport.RoleFollower
}

// roleName is the role a status report carries, as GET /v1/status names it.
func roleName(role transport.MemberRole) string {
	switch role {
	case transport.RoleLeader:
		return "leader"
	case transport.RoleCandidate:
		return "candidate"
	case transport.RoleLearner:
		return "learner"
	}
	return "follower"
}
