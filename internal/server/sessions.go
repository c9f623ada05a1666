package server

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/command"
	"github.com/latch-io/latch/internal/fsm"
	"github.com/latch-io/latch/internal/transport"
)

// Sessions live in the replicated state; their liveness does not. Every
// server keeps a sessionTracker, but only the leader's deadlines matter:
//   - a heartbeat is answered by the server that receives it, without a log
//     write; a follower or learner adds the id to its relay set, and every
//     relay interval sends the set to the leader over the peer transport
//     (transport.SessionRelay), so a server cut off from the majority cannot keep
//     a session alive;
//   - the leader acknowledges every relay; a follower that knows no leader,
//     or whose relays went unacknowledged for longer than relayStaleness,
//     answers heartbeats 503 so the client moves to a server that can reach
//     the leader (a client told "alive" by a cut-off server would not);
//   - the leader alone proposes expiry (one entry for every session due),
//     from deadlines on the monotonic clock;
//   - a newly elected leader first grants every session a full timeout.

// sessionTracker holds the deadline of every live session.
type sessionTracker struct {
	// relayAcked is when the leader last acknowledged this server's relay
	// (unix nanoseconds on the monotonic-backed clock of time.Now).
	relayAcked atomic.Int64

	mu        sync.Mutex
	deadlines map[uint64]trackedSession // guarded by mu
	relay     map[uint64]struct{}       // guarded by mu: heartbeats heard here, not yet sent to the leader
	// leaderTerm is the term in which this server, as leader, renewed every
	// deadline; 0 when it does not lead. Guarded by mu. Only deadlines renewed
	// in the current term may expire anything.
	leaderTerm uint64
}

type trackedSession struct {
	timeout  time.Duration
	deadline time.Time // monotonic
	expiring bool      // an expiry proposal for it is in flight
}

func newSessionTracker() *sessionTracker {
	return &sessionTracker{deadlines: map[uint64]trackedSession{}, relay: map[uint64]struct{}{}}
}

func (t *sessionTracker) created(id, timeoutMs uint64, now time.Time) {
	timeout := time.Duration(timeoutMs) * time.Millisecond
	t.mu.Lock()
	t.deadlines[id] = trackedSession{timeout: timeout, deadline: now.Add(timeout)}
	t.mu.Unlock()
}

func (t *sessionTracker) ended(id uint64) {
	t.mu.Lock()
	delete(t.deadlines, id)
	delete(t.relay, id)
	t.mu.Unlock()
}

// touch extends the deadlines of ids; unknown ids are ignored. It returns
// the ids whose expiry is already being proposed: too late to keep alive.
func (t *sessionTracker) touch(ids []uint64, now time.Time) (expiring []uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, id := range ids {
		s, ok := t.deadlines[id]
		switch {
		case !ok:
		case s.expiring:
			expiring = append(expiring, id)
		default:
			s.deadline = now.Add(s.timeout)
			t.deadlines[id] = s
		}
	}
	return expiring
}

// lead grants every session a full timeout from now, for a server that has
// just become leader in term, before anything can be expired.
func (t *sessionTracker) lead(now time.Time, term uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id, s := range t.deadlines {
		s.deadline = now.Add(s.timeout)
		s.expiring = false
		t.deadlines[id] = s
	}
	t.leaderTerm = term
}

// follow records that this server no longer leads.
func (t *sessionTracker) follow() {
	t.mu.Lock()
	t.leaderTerm = 0
	t.mu.Unlock()
}

// reset replaces the tracked sessions with those of a restored state.
func (t *sessionTracker) reset(sessions []fsm.Session, now time.Time) {
	t.mu.Lock()
	t.deadlines = make(map[uint64]trackedSession, len(sessions))
	t.mu.Unlock()
	for _, s := range sessions {
		t.created(s.ID, s.TimeoutMs, now)
	}
}

// due returns the sessions past their deadline and marks them expiring, if
// this server renewed the deadlines as leader of term.
func (t *sessionTracker) due(now time.Time, limit int, term uint64) []uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if term == 0 || term != t.leaderTerm {
		return nil
	}
	var ids []uint64
	for id, s := range t.deadlines {
		if !s.expiring && now.After(s.deadline) {
			s.expiring = true
			t.deadlines[id] = s
			ids = append(ids, id)
			if len(ids) == limit {
				break
			}
		}
	}
	return ids
}

// unmark lets sessions whose expiry proposal failed be proposed again.
func (t *sessionTracker) unmark(ids []uint64) {
	t.mu.Lock()
	for _, id := range ids {
		if s, ok := t.deadlines[id]; ok {
			s.expiring = false
			t.deadlines[id] = s
		}
	}
	t.mu.Unlock()
}

func (t *sessionTracker) addRelay(id uint64) {
	t.mu.Lock()
	t.relay[id] = struct{}{}
	t.mu.Unlock()
}

func (t *sessionTracker) takeRelay() []uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	ids := make([]uint64, 0, len(t.relay))
	for id := range t.relay {
		ids = append(ids, id)
	}
	clear(t.relay)
	return ids
}

// trackApplied updates the tracker after a command was applied.
func (g *group) trackApplied(cmd *command.Command, res fsm.Result) {
	g.server.metrics.sessionsApplied(g, cmd, res)
	switch cmd.Op {
	case command.OpSessionCreate:
		if res.Err == nil {
			g.sessions.created(res.SessionID, res.TimeoutMs, time.Now())
		}
	case command.OpSessionClose:
		g.sessions.ended(cmd.SessionID)
		g.watches.SessionEnded(cmd.SessionID)
	case command.OpSessionExpire:
		for _, id := range cmd.Sessions {
			g.sessions.ended(id)
			g.watches.SessionEnded(id)
		}
	}
}

// CreateSession creates a session with the timeout clamped to the server's
// range. Its id is 64 random bits drawn here and carried in the command (the
// state machine draws nothing): an id is a bearer secret, since whoever
// knows it can act for the session. The state machine refuses an id that a
// live session has, and then another is drawn.
func (s *Server) CreateSession(ctx context.Context, timeoutMs uint64) (api.Session, error) {
	timeout := time.Duration(timeoutMs) * time.Millisecond
	timeout = min(max(timeout, s.cfg.MinSessionTTL), s.cfg.MaxSessionTTL)
	for attempt := 1; ; attempt++ {
		id, err := newSessionID()
		if err != nil {
			return api.Session{}, err
		}
		cmd := &command.Command{Op: command.OpSessionCreate, SessionID: id, TimeoutMs: uint64(timeout.Milliseconds())}
		res, index, err := s.main.Load().propose(ctx, cmd)
		if err != nil {
			return api.Session{}, err
		}
		if api.CodeOf(res.Err) == api.CodePreconditionFailed && attempt < maxSessionIDDraws {
			continue // the id is taken: draw again
		}
		if res.Err != nil {
			return api.Session{}, res.Err
		}
		return api.Session{SessionID: api.FormatID(res.SessionID), SessionHandle: api.FormatSessionHandle(res.SessionID),
			TimeoutMs: res.TimeoutMs, Index: index}, nil
	}
}

// maxSessionIDDraws bounds the ids one CreateSession tries; with 64 random
// bits a second draw is already astronomically rare.
const maxSessionIDDraws = 4

// newSessionID returns 64 random bits from crypto/rand, never 0 (which
// means "no session" in commands).
func newSessionID() (uint64, error) {
	var b [8]byte
	for {
		if _, err := rand.Read(b[:]); err != nil {
			return 0, fmt.Errorf("server: draw a session id: %w", err)
		}
		if id := binary.LittleEndian.Uint64(b[:]); id != 0 {
			return id, nil
		}
	}
}

// CloseSession ends a session and deletes its ephemeral nodes in one entry.
func (s *Server) CloseSession(ctx context.Context, id uint64) (api.Closed, error) {
	res, index, err := s.main.Load().propose(ctx, &command.Command{Op: command.OpSessionClose, SessionID: id})
	if err != nil {
		return api.Closed{}, err
	}
	if res.Err != nil {
		return api.Closed{}, res.Err
	}
	return api.Closed{Closed: true, Index: index}, nil
}

// GetSession describes a live session.
func (s *Server) GetSession(ctx context.Context, id uint64, opts ReadOptions) (api.Session, error) {
	g := s.main.Load()
	if err := g.barrier(ctx, opts.Consistency, opts.MinIndex); err != nil {
		return api.Session{}, err
	}
	var sess fsm.Session
	var err error
	index := g.view(func(f *fsm.FSM) { sess, err = f.Session(id) })
	if err != nil {
		return api.Session{}, err
	}
	return api.Session{SessionID: api.FormatID(sess.ID), SessionHandle: api.FormatSessionHandle(sess.ID), TimeoutMs: sess.TimeoutMs,
		EphemeralCount: sess.Ephemerals, Index: index}, nil
}

// Heartbeat keeps sessions alive. It is answered here, without a log write;
// sessions unknown here are looked up again after a linearizable barrier
// (they may have been created through a server this one has not caught up
// with). It returns the ids that are not alive (expired or closed).
func (s *Server) Heartbeat(ctx context.Context, ids []uint64) (uint64, []uint64, error) {
	g := s.main.Load()
	if err := s.canRelay(g); err != nil {
		return 0, nil, err
	}
	index, dead := g.liveSessions(ids)
	if len(dead) > 0 {
		if err := g.barrier(ctx, api.Linearizable, 0); err != nil {
			return 0, nil, err
		}
		index, dead = g.liveSessions(ids)
	}
	alive := ids
	if len(dead) > 0 {
		alive = without(ids, dead)
	}
	if g.leader.Load() == s.id {
		dead = append(dead, g.sessions.touch(alive, time.Now())...)
	} else {
		for _, id := range alive {
			g.sessions.addRelay(id)
		}
	}
	return index, dead, nil
}

// canRelay reports whether heartbeats received here reach the leader: this
// server leads, or a leader acknowledged its relays recently.
func (s *Server) canRelay(g *group) error {
	lead := g.leader.Load()
	switch {
	case lead == raft.None:
		return g.unavailable("no leader known here; send heartbeats to another server")
	case lead == s.id:
		// A leader whose Ready loop is stuck (a slow fsync) stops ticking and
		// so cannot notice that the others elected a new leader meanwhile.
		if stalled := time.Since(g.node.LastTick()); stalled > s.electionTimeout() {
			return g.unavailable("this leader has been stalled for %v; send heartbeats to another server", stalled.Round(time.Millisecond))
		}
		return nil
	}
	since := time.Since(time.Unix(0, g.sessions.relayAcked.Load()))
	if since > s.relayStaleness() {
		return g.unavailable("the leader has not acknowledged this server's heartbeat relays for %v; send heartbeats to another server", since.Round(time.Millisecond))
	}
	return nil
}

// relayInterval is how often a follower sends its heard heartbeats (and, with
// none, an empty relay that the leader still acknowledges).
func (s *Server) relayInterval() time.Duration {
	return max(s.cfg.MinSessionTTL/8, 50*time.Millisecond)
}

// relayStaleness is how long a follower answers heartbeats without an
// acknowledged relay: a few relay rounds, at least an election timeout.
func (s *Server) relayStaleness() time.Duration {
	return max(4*s.relayInterval(), s.electionTimeout())
}

// liveSessions returns the applied index and the ids not alive here.
func (g *group) liveSessions(ids []uint64) (uint64, []uint64) {
	var dead []uint64
	index := g.view(func(f *fsm.FSM) {
		for _, id := range ids {
			if _, err := f.Session(id); err != nil {
				dead = append(dead, id)
			}
		}
	})
	return index, dead
}

// without returns ids minus the (few) ids in drop.
func without(ids, drop []uint64) []uint64 {
	out := make([]uint64, 0, len(ids))
	for _, id := range ids {
		if !slices.Contains(drop, id) {
			out = append(out, id)
		}
	}
	return out
}

// relayHeartbeats sends the heartbeats heard here to the leader, until stop.
func (s *Server) relayHeartbeats(g *group) {
	ticker := time.NewTicker(s.relayInterval())
	defer ticker.Stop()
	for {
		select {
		case <-ticker.C:
		case <-s.stop:
			return
		}
		ids := g.sessions.takeRelay()
		lead := g.leader.Load()
		switch lead {
		case raft.None:
		case s.id:
			_ = g.sessions.touch(ids, time.Now())
		default:
			for _, relay := range relayMessages(ids) {
				s.transport.SendPeer(lead, relay)
			}
		}
	}
}

// relayMessages packs ids into relays of at most transport.MaxRelayIDs each;
// with no ids, one empty relay, which the leader acknowledges all the same.
func relayMessages(ids []uint64) []transport.SessionRelay {
	var relays []transport.SessionRelay
	for {
		n := min(len(ids), transport.MaxRelayIDs)
		relays = append(relays, transport.SessionRelay{SessionIDs: ids[:n]})
		ids = ids[n:]
		if len(ids) == 0 {
			return relays
		}
	}
}

// receiveRelay extends the deadlines of heartbeats relayed by member from
// and acknowledges them, if this server leads.
func (s *Server) receiveRelay(from uint64, ids []uint64) {
	g := s.main.Load()
	if g == nil || g.leader.Load() != s.id {
		return
	}
	_ = g.sessions.touch(ids, time.Now()) // the follower learns of expiries from the log
	s.transport.SendPeer(from, transport.SessionRelayAck{})
}

// receiveRelayAck records the leader's acknowledgement of this server's relays.
func (s *Server) receiveRelayAck(from uint64) {
	if g := s.main.Load(); g != nil && from == g.leader.Load() {
		g.sessions.relayAcked.Store(time.Now().UnixNano())
	}
}

// expireSessions proposes the expiry of sessions past their deadline while
// this server leads, until stop.
func (s *Server) expireSessions(g *group) {
	ticker := time.NewTicker(max(s.cfg.MinSessionTTL/20, 20*time.Millisecond))
	defer ticker.Stop()
	for {
		select {
		case <-ticker.C:
		case <-s.stop:
			return
		}
		if g.leader.Load() != s.id {
			continue
		}
		for s.expireDue(g) {
		}
	}
}

// expireDue proposes the expiry of up to 1,024 sessions past their deadline
// and reports whether there were any. The proposal carries the term whose
// deadlines decided it, and goes out only after a ReadIndex round confirmed
// this server still leads (a leader that stalled may have been replaced).
func (s *Server) expireDue(g *group) bool {
	term := g.term.Load()
	ids := g.sessions.due(time.Now(), 1024, term)
	if len(ids) == 0 {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.RequestTimeout)
	defer cancel()
	_, err := g.reads.wait(ctx)
	if err == nil && g.term.Load() != term {
		err = errVoidExpiry
	}
	if err == nil {
		var res fsm.Result
		res, _, err = g.propose(ctx, &command.Command{Op: command.OpSessionExpire, Sessions: ids, LeaderTerm: term})
		err = cmp.Or(err, res.Err)
	}
	if err != nil {
		g.sessions.unmark(ids)
		return false
	}
	s.log.Info("expired sessions", "count", len(ids), "term", term)
	return true
}

// errVoidExpiry answers an expiry decided in a term other than the one its
// entry was appended in: it changes nothing.
var errVoidExpiry = api.Errorf(api.CodeUnavailable, "session expiry decided in another term; void")
