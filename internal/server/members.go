package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/command"
	"github.com/latch-io/latch/internal/fsm"
)

// Membership changes go through raft one at a time, decided on the leader
// (it alone knows each member's progress):
//   - a new member always joins as a learner; it becomes a voter only by a
//     promotion, refused until it has caught up with the log;
//   - a removal that would leave the remaining voters without a healthy
//     quorum is refused; removing the leader hands leadership over first.

// promotionSlack is how far behind the leader's commit index a learner's
// log may be when it is promoted.
const promotionSlack = 100

// errNotLeader is the 503 of membership calls made to a follower.
func (g *group) errNotLeader() error {
	return g.Unavailable("membership changes are decided by the leader; retry there")
}

// leaderStatus returns raft's status if this server leads.
func (g *group) leaderStatus() (raft.Status, error) {
	st := g.Node().Status()
	if st.RaftState != raft.StateLeader {
		return st, g.errNotLeader()
	}
	return st, nil
}

// AddMember adds a member as a learner. With promote, the leader promotes it
// to voter in the background once it has caught up. Adding a member that
// exists with the same name, peer URL and client URL (if given) is a repeat
// that already took effect: it answers the member as it is now. A member of
// that name with other addresses is 409 precondition_failed.
func (s *Server) AddMember(ctx context.Context, m api.Member, promote bool) (api.Member, error) {
	if err := s.authorizeAs(ctx, permAdmin, "/", 0); err != nil {
		return api.Member{}, err
	}
	if err := validateNewMember(m); err != nil {
		return api.Member{}, err
	}
	g := s.metaGroup()
	if _, err := g.leaderStatus(); err != nil {
		return api.Member{}, err
	}
	id := MemberID(m.Name)
	if existing := s.memberByID(id); existing.ID != 0 {
		return s.repeatedAdd(g, existing, m, promote)
	}
	if removed, ok := s.removedMember(id, m.Name); ok {
		// Member ids are derived from names, and raft must never see an id again.
		return api.Member{}, api.Errorf(api.CodePreconditionFailed,
			"member %q (%s) was removed from this cluster; a removed member's name can never be added again: choose another name", m.Name, api.FormatID(removed.ID))
	}
	member := command.Member{ID: id, Name: m.Name, PeerURL: m.PeerURL, ClientURL: m.ClientURL, Learner: true}
	change := raftpb.ConfChangeSingle{Type: raftpb.ConfChangeAddLearnerNode, NodeID: id}
	if _, err := g.ProposeConfChange(ctx, change, member); err != nil {
		return api.Member{}, err
	}
	if promote {
		s.goBackground(func() { s.promoteWhenCaughtUp(g, id) })
	}
	return toAPIMembers([]command.Member{member})[0], nil
}

// repeatedAdd answers an add of a name that is already a member: the member
// if the addresses are the same (and, with promote, it is promoted once
// caught up if still a learner), else 409.
func (s *Server) repeatedAdd(g *group, existing command.Member, m api.Member, promote bool) (api.Member, error) {
	if existing.PeerURL != m.PeerURL || m.ClientURL != "" && existing.ClientURL != m.ClientURL {
		return api.Member{}, api.Errorf(api.CodePreconditionFailed,
			"member %q (%s) already exists with peer_url %q and client_url %q", existing.Name, api.FormatID(existing.ID), existing.PeerURL, existing.ClientURL)
	}
	if promote && existing.Learner {
		s.goBackground(func() { s.promoteWhenCaughtUp(g, existing.ID) })
	}
	return toAPIMembers([]command.Member{existing})[0], nil
}

// validateNewMember checks what a member needs to be usable: a name that
// fits in --initial-cluster and in a URL path, a peer address the transport
// can dial, and a client URL clients can be pointed at.
func validateNewMember(m api.Member) error {
	if err := api.CheckMemberName(m.Name); err != nil {
		return api.Errorf(api.CodeInvalidArgument, "name %q: %v", m.Name, err)
	}
	if err := checkHostPort(strings.TrimPrefix(strings.TrimPrefix(m.PeerURL, "http://"), "tcp://")); err != nil {
		return api.Errorf(api.CodeInvalidArgument, "peer_url %q is not host:port: %v", m.PeerURL, err)
	}
	if m.ClientURL == "" {
		return nil
	}
	u, err := url.Parse(m.ClientURL)
	if err == nil && u.Scheme != "http" && u.Scheme != "https" {
		err = errors.New("the scheme must be http or https")
	}
	if err == nil && (u.Path != "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil || u.Opaque != "") {
		err = errors.New("nothing may follow host:port")
	}
	if err == nil {
		err = checkHostPort(u.Host)
	}
	if err != nil {
		return api.Errorf(api.CodeInvalidArgument, "client_url %q is not http://host:port or https://host:port: %v", m.ClientURL, err)
	}
	return nil
}

// checkHostPort checks that addr is host:port with a non-empty host and a
// port in 1..65535.
func checkHostPort(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if host == "" {
		return errors.New("the host is empty")
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return fmt.Errorf("port %q is not in 1..65535", port)
	}
	return nil
}

// PromoteMember makes a caught-up learner a voter, refusing one that has
// not caught up (awaitLeaderView: for one election timeout).
func (s *Server) PromoteMember(ctx context.Context, id uint64) (api.Member, error) {
	if err := s.authorizeAs(ctx, permAdmin, "/", 0); err != nil {
		return api.Member{}, err
	}
	g := s.metaGroup()
	st, err := g.leaderStatus()
	if err != nil {
		return api.Member{}, err
	}
	if _, ok := st.Config.Learners[id]; !ok {
		return api.Member{}, api.Errorf(api.CodePreconditionFailed, "%s is not a learner", s.describeMember(id))
	}
	caughtUp := func(st raft.Status) error { return s.checkCaughtUp(st, id) }
	if _, err := s.awaitLeaderView(ctx, g, caughtUp); err != nil {
		return api.Member{}, err
	}
	change := raftpb.ConfChangeSingle{Type: raftpb.ConfChangeAddNode, NodeID: id}
	if _, err := g.ProposeConfChange(ctx, change, command.Member{}); err != nil {
		return api.Member{}, err
	}
	m := s.memberByID(id)
	m.Learner = false
	return toAPIMembers([]command.Member{m})[0], nil
}

// awaitLeaderView returns the status of g, which this server leads, once
// check passes on it, looking every tick for at most one election timeout
// before check's refusal stands. What a leader knows of its members lags
// behind them: an acknowledgement may be on its way, and raft forgets whom
// it heard from at every election timeout's quorum check, to learn it again
// from the answers to the next heartbeat. A check of members' liveness on
// one moment's view would now and then refuse live members; this one
// refuses a member that is down one election timeout after the call. If
// the request's context ends, or this member stops, before the election
// timeout is up, the refusal has not stood yet: the caller gets
// unavailable (try again), with the last look's reason.
func (s *Server) awaitLeaderView(ctx context.Context, g *group, check func(raft.Status) error) (raft.Status, error) {
	clk := s.cfg.Clock
	deadline := clk.Now().Add(s.electionTimeout())
	for {
		st, err := g.leaderStatus()
		if err != nil {
			return st, err
		}
		err = check(st)
		if err == nil || !clk.Now().Before(deadline) {
			return st, err
		}
		if !s.pauseCtx(ctx, s.cfg.TickInterval) {
			if ctx.Err() == nil {
				return st, g.Unavailable("this member is stopping; retry on another (the last look: %v)", err)
			}
			return st, g.Unavailable("the request ended before the leader's view settled (it waits up to an election timeout); the last look: %v", err)
		}
	}
}

// checkCaughtUp refuses the promotion of learner id, with the reason, unless
// the leader whose status st is has heard from it within the last election
// timeout and its log is at most promotionSlack entries behind the commit
// index. raft counts a member it just added as recently active before it
// ever answered, so a learner that acknowledged nothing is never caught up.
func (s *Server) checkCaughtUp(st raft.Status, id uint64) error {
	pr := st.Progress[id]
	switch {
	case pr.Match == 0:
		return api.Errorf(api.CodePreconditionFailed,
			"learner %s has not caught up: it has acknowledged no entry to this leader yet (commit index %d); is its latchd running, started with --initial-cluster-state existing?",
			s.describeMember(id), st.Commit)
	case pr.Match+promotionSlack < st.Commit:
		return api.Errorf(api.CodePreconditionFailed,
			"learner %s has not caught up: its log is at %d, more than %d entries behind the commit index %d",
			s.describeMember(id), pr.Match, promotionSlack, st.Commit)
	case !pr.RecentActive:
		return api.Errorf(api.CodePreconditionFailed,
			"learner %s has not caught up: the leader has not heard from it within the last election timeout (its log is at %d, commit index %d)",
			s.describeMember(id), pr.Match, st.Commit)
	}
	return nil
}

// describeMember names member id for messages: "n4 (0x...)", or the id alone.
func (s *Server) describeMember(id uint64) string {
	if m := s.memberByID(id); m.Name != "" {
		return fmt.Sprintf("%s (%s)", m.Name, api.FormatID(id))
	}
	return api.FormatID(id)
}

// promoteWhenCaughtUp promotes learner id once it has caught up, giving up
// after a few minutes or when this server stops leading.
func (s *Server) promoteWhenCaughtUp(g *group, id uint64) {
	clk := s.cfg.Clock
	deadline := clk.Now().Add(5 * time.Minute)
	for clk.Now().Before(deadline) {
		_, err := s.PromoteMember(context.Background(), id)
		if err == nil || api.CodeOf(err) == api.CodeUnavailable && g.Leader() != s.id || !s.memberByID(id).Learner {
			return // promoted (here or by another call), removed, or no longer leading
		}
		if !s.pause(100 * time.Millisecond) {
			return
		}
	}
	s.log.Warn("learner did not catch up in time; not promoted", "member", api.FormatID(id))
}

// RemoveMemberNamed removes the member nameOrID (see RemoveMember). It
// looks the member up after a linearizable barrier, so a removal already
// committed is one this server has applied: the repeat succeeds, on any
// member, however far behind it was.
func (s *Server) RemoveMemberNamed(ctx context.Context, nameOrID string) error {
	if err := s.authorizeAs(ctx, permAdmin, "/", 0); err != nil {
		return err
	}
	// Read the membership as of now: a member lagging behind a removal
	// already committed must answer its repeat as done, not send it to
	// the leader as a new one.
	if err := s.metaGroup().Barrier(ctx, api.Linearizable, 0); err != nil {
		return err
	}
	id, err := s.MemberIDByName(ctx, nameOrID)
	if api.CodeOf(err) == api.CodeNotFound && s.wasRemoved(nameOrID) {
		return nil
	}
	if err != nil {
		return err
	}
	return s.RemoveMember(ctx, id)
}

// wasRemoved reports whether nameOrID names a member this server saw removed.
func (s *Server) wasRemoved(nameOrID string) bool {
	if id, err := api.ParseID(nameOrID); err == nil {
		if _, ok := s.removedMember(id, ""); ok {
			return true
		}
	}
	_, ok := s.removedMember(MemberID(nameOrID), nameOrID)
	return ok
}

// removedMember finds a member removed from the cluster by id or by name
// ("" matches no name), in the replicated record of removals, which
// outlives restarts and snapshots.
func (s *Server) removedMember(id uint64, name string) (command.Member, bool) {
	var m command.Member
	var ok bool
	s.metaGroup().View(func(f *fsm.FSM) {
		if m, ok = f.RemovedMember(id); !ok && name != "" {
			m, ok = f.RemovedMemberNamed(name)
		}
	})
	return m, ok
}

// RemoveMember removes a member, refusing if the voters left could not form
// a healthy quorum (awaitLeaderView: for one election timeout). Removing
// the leader hands leadership to the most caught-up voter first.
func (s *Server) RemoveMember(ctx context.Context, id uint64) error {
	if err := s.authorizeAs(ctx, permAdmin, "/", 0); err != nil {
		return err
	}
	g := s.metaGroup()
	st, err := g.leaderStatus()
	if err != nil {
		return err
	}
	if s.memberByID(id).ID == 0 && !inConfig(st, id) {
		return api.Errorf(api.CodeNotFound, "no member %s", api.FormatID(id))
	}
	if err := refuseLastVoter(st, id); err != nil {
		return err // no wait changes this one
	}
	quorumLeft := func(st raft.Status) error { return checkQuorumAfterRemoval(st, id) }
	if st, err = s.awaitLeaderView(ctx, g, quorumLeft); err != nil {
		return err
	}
	if id == s.id {
		if err := s.handOver(ctx, g, st); err != nil {
			return err
		}
	}
	change := raftpb.ConfChangeSingle{Type: raftpb.ConfChangeRemoveNode, NodeID: id}
	_, err = g.ProposeConfChange(ctx, change, command.Member{ID: id})
	return err
}

func inConfig(st raft.Status, id uint64) bool {
	_, voter := st.Config.Voters.IDs()[id]
	_, learner := st.Config.Learners[id]
	return voter || learner
}

// refuseLastVoter refuses the removal of id if it is the only voter.
func refuseLastVoter(st raft.Status, id uint64) error {
	voters := st.Config.Voters.IDs()
	if _, ok := voters[id]; ok && len(voters) == 1 {
		return api.Errorf(api.CodePreconditionFailed, "refusing to remove the last voter")
	}
	return nil
}

// checkQuorumAfterRemoval refuses a removal after which the active voters
// would be too few for a quorum of the new configuration (with no voter
// left, 0 of the quorum of 1: the last voter, which RemoveMember refuses
// first with its own message).
func checkQuorumAfterRemoval(st raft.Status, id uint64) error {
	voters := st.Config.Voters.IDs()
	if _, ok := voters[id]; !ok {
		return nil // a learner: votes on nothing
	}
	remaining, active := 0, 0
	for v := range voters {
		if v == id {
			continue
		}
		remaining++
		if healthy(st, v) {
			active++
		}
	}
	if need := remaining/2 + 1; active < need {
		return api.Errorf(api.CodePreconditionFailed,
			"removing %s would leave %d healthy voters of %d, below a quorum of %d", api.FormatID(id), active, remaining, need)
	}
	return nil
}

// handOver transfers leadership to the most caught-up other active voter and
// waits until this server no longer leads.
func (s *Server) handOver(ctx context.Context, g *group, st raft.Status) error {
	var candidates []uint64
	for v := range st.Config.Voters.IDs() {
		if pr := st.Progress[v]; v != s.id && pr.RecentActive {
			candidates = append(candidates, v)
		}
	}
	if len(candidates) == 0 {
		return api.Errorf(api.CodePreconditionFailed, "no other active voter to hand leadership to")
	}
	sort.Slice(candidates, func(i, j int) bool { return st.Progress[candidates[i]].Match > st.Progress[candidates[j]].Match })
	return s.transferTo(ctx, g, candidates[0])
}

// TransferLeadership moves leadership to the voter to and waits for it. On a
// follower, raft forwards the request to the leader (with the transferee in
// the message's From, which the transport lets through for this one type).
func (s *Server) TransferLeadership(ctx context.Context, to uint64) error {
	if err := s.authorizeAs(ctx, permAdmin, "/", 0); err != nil {
		return err
	}
	g := s.metaGroup()
	st := g.Node().Status()
	if _, ok := st.Config.Voters.IDs()[to]; !ok {
		return api.Errorf(api.CodeInvalidArgument, "%s is not a voter", s.describeMember(to))
	}
	if st.Lead == to {
		return nil
	}
	return s.transferTo(ctx, g, to)
}

func (s *Server) transferTo(ctx context.Context, g *group, to uint64) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	for g.Leader() != to {
		g.Node().TransferLeadership(ctx, to)
		timer := s.cfg.Clock.NewTimer(s.electionTimeout() / 4)
		select {
		case <-timer.C():
		case <-ctx.Done():
			timer.Stop()
			return g.Unavailable("leadership did not move to %s in time", s.describeMember(to))
		}
	}
	return nil
}

// memberByID returns the recorded member (zero if unknown).
func (s *Server) memberByID(id uint64) command.Member {
	var out command.Member
	s.metaGroup().View(func(f *fsm.FSM) { out, _ = f.Member(id) })
	return out
}

// MemberIDByName resolves a member name or a formatted id. A member this
// server does not know yet (it may lag the leader that just added it) is
// looked up again after a linearizable barrier before it is not_found.
func (s *Server) MemberIDByName(ctx context.Context, nameOrID string) (uint64, error) {
	id, ok := s.lookupMember(nameOrID)
	if !ok {
		if err := s.metaGroup().Barrier(ctx, api.Linearizable, 0); err != nil {
			return 0, err
		}
		id, ok = s.lookupMember(nameOrID)
	}
	if !ok {
		return 0, api.Errorf(api.CodeNotFound, "no member named %q", nameOrID)
	}
	return id, nil
}

func (s *Server) lookupMember(nameOrID string) (uint64, bool) {
	if id, err := api.ParseID(nameOrID); err == nil && s.memberByID(id).ID != 0 {
		return id, true
	}
	id := MemberID(nameOrID)
	return id, s.memberByID(id).ID != 0
}

// ErrRemoved is the reason a server stops after the cluster removed it.
var ErrRemoved = errors.New("server: removed from the cluster")

// removed stops a server that applied its own removal.
func (s *Server) removed() {
	s.errMu.Lock()
	if s.err == nil {
		s.err = ErrRemoved
	}
	s.errMu.Unlock()
	s.log.Warn("this member was removed from the cluster; stopping")
	_ = s.Close()
}

// PeerHealthy reports whether this server, leading, sees member id as
// recently active and replicating (what a removal's quorum check counts).
func (s *Server) PeerHealthy(id uint64) bool {
	return healthy(s.metaGroup().Node().Status(), id)
}

// healthy reports whether the leader whose status st is counts member id
// toward a quorum: itself, or recently active and replicating.
func healthy(st raft.Status, id uint64) bool {
	pr, ok := st.Progress[id]
	return ok && (id == st.ID || pr.RecentActive && pr.State == tracker.StateReplicate)
}
