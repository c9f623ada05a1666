package server

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/command"
	"github.com/latch-io/latch/internal/fsm"
)

// Sessions live in the replicated state; their liveness (deadlines, the
// heartbeat relay, expiry) is package sessions' Liveness, one per group. The
// server keeps the client calls that change or read the replicated sessions.

// CreateSession creates a session with the timeout clamped to the server's
// range. Its id is 64 random bits drawn here and carried in the command (the
// state machine draws nothing): an id is a bearer secret, since whoever
// knows it can act for the session. The state machine refuses an id that a
// live session has, and then another is drawn.
func (s *Server) CreateSession(ctx context.Context, timeoutMs uint64) (api.Session, error) {
	return s.createSession(ctx, timeoutMs, 0)
}

// CreateSessionWithID is CreateSession with an id the caller drew with
// NewSessionID: the ZooKeeper listener tells a client its session id at the
// handshake, before the client's digest credentials arrive, and creates the
// session once they do. If the id is taken the answer is
// precondition_failed.
func (s *Server) CreateSessionWithID(ctx context.Context, id, timeoutMs uint64) (api.Session, error) {
	if id == 0 {
		return api.Session{}, api.Errorf(api.CodeInvalidArgument, "session id 0 is no session")
	}
	return s.createSession(ctx, timeoutMs, id)
}

// ClampSessionTimeout returns timeoutMs clamped to the server's range, the
// timeout CreateSession would give.
func (s *Server) ClampSessionTimeout(timeoutMs uint64) uint64 {
	timeout := time.Duration(timeoutMs) * time.Millisecond
	return uint64(min(max(timeout, s.cfg.MinSessionTTL), s.cfg.MaxSessionTTL).Milliseconds())
}

// createSession creates a session with id, or with ids it draws if id is 0.
func (s *Server) createSession(ctx context.Context, timeoutMs, id uint64) (api.Session, error) {
	owner, err := s.authorize(ctx, permNone, "/") // the session belongs to the user
	if err == nil {
		err = s.limitUserSessions(owner)
	}
	if err != nil {
		return api.Session{}, err
	}
	given := id != 0
	for attempt := 1; ; attempt++ {
		if !given {
			if id, err = NewSessionID(); err != nil {
				return api.Session{}, err
			}
		}
		cmd := &command.Command{Op: command.OpSessionCreate, SessionID: id, TimeoutMs: s.ClampSessionTimeout(timeoutMs), Path: owner}
		res, index, err := s.metaGroup().Propose(ctx, cmd)
		if err != nil {
			return api.Session{}, err
		}
		if api.CodeOf(res.Err) == api.CodePreconditionFailed && attempt < maxSessionIDDraws && !given {
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

// NewSessionID returns 64 random bits from crypto/rand, never 0 (which
// means "no session" in commands).
func NewSessionID() (uint64, error) {
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

// CloseSession ends a session and deletes its ephemeral nodes: in one entry
// with one shard; with several, it answers once every shard applied the
// session's cleanup (sessionend.go), with each shard's index at which it
// did (cleanedIndexes).
func (s *Server) CloseSession(ctx context.Context, id uint64) (api.Closed, error) {
	if err := s.authorizeSessions(ctx, id); err != nil {
		return api.Closed{}, err
	}
	res, index, err := s.metaGroup().Propose(ctx, &command.Command{Op: command.OpSessionClose, SessionID: id})
	if err != nil {
		return api.Closed{}, err
	}
	if res.Err != nil {
		if api.CodeOf(res.Err) == api.CodeSessionExpired {
			return s.closedBefore(ctx, id, index, res.Err)
		}
		return api.Closed{}, res.Err
	}
	if err := s.waitCleaned(ctx, id); err != nil {
		return api.Closed{}, err
	}
	indexes, err := s.cleanedIndexes(ctx, id, index)
	if err != nil {
		return api.Closed{}, err
	}
	return api.Closed{Closed: true, Index: index, Indexes: indexes}, nil
}

// closedBefore answers a close of session id that shard 0 refused at index
// as not live (gone, the error): it expired, or an earlier close ended it,
// maybe one whose reply was lost or a 503, so that this close is a
// client's retry. With several shards the 410 carries the positions a
// successful close would have given (Closed.Indexes, Closed false): once
// the session's cleanup, if it had one, is applied in every shard. A
// client that sends them back as min_index reads the session's nodes gone
// on any member, whichever of its attempts the server acted on.
func (s *Server) closedBefore(ctx context.Context, id, index uint64, gone error) (api.Closed, error) {
	if s.cfg.Shards == 1 {
		return api.Closed{}, gone
	}
	if err := s.waitCleaned(ctx, id); err != nil {
		return api.Closed{}, err
	}
	indexes, err := s.cleanedIndexes(ctx, id, index)
	if err != nil {
		return api.Closed{}, err
	}
	return api.Closed{Index: index, Indexes: indexes}, gone
}

// GetSession describes a live session, read after the barrier opts ask
// for; the index is the meta group's. With several shards each shard
// counts the session's ephemeral nodes it holds (shard 0 in the session,
// the others in their local records of it), so every shard is read after
// its own barrier (barrierEvery, all at once; the integer min_index is
// the meta group's) and EphemeralCount is the sum: no one snapshot of the
// cluster, as getEphemerals (docs/api.md). A caller that needs only the
// liveness and timeout takes LiveSessionTimeout, which reads shard 0 only.
func (s *Server) GetSession(ctx context.Context, id uint64, opts ReadOptions) (api.Session, error) {
	if err := s.authorizeSessions(ctx, id); err != nil {
		return api.Session{}, err
	}
	groups, err := s.barrierEvery(ctx, opts, MetaShard)
	if err != nil {
		return api.Session{}, err
	}
	var sess fsm.Session
	index := groups[MetaShard].View(func(f *fsm.FSM) { sess, err = f.Session(id) })
	if err != nil {
		return api.Session{}, err
	}
	ephemerals := sess.Ephemerals
	inOtherShards(groups, func(f *fsm.FSM) { ephemerals += ephemeralsIn(f, id) })
	return api.Session{SessionID: api.FormatID(sess.ID), SessionHandle: api.FormatSessionHandle(sess.ID), TimeoutMs: sess.TimeoutMs,
		EphemeralCount: ephemerals, Index: index}, nil
}

// ephemeralsIn is the number of session's ephemeral nodes f's shard
// holds, as its record of the session counts them (0 without one): with
// several shards each shard counts its own.
func ephemeralsIn(f *fsm.FSM, session uint64) int {
	if sess, err := f.Session(session); err == nil {
		return sess.Ephemerals
	}
	return 0
}

// inOtherShards calls read with the state of every shard of groups (in
// shard order, as barrierEvery returns them) but the meta group's, each
// under its own View.
func inOtherShards(groups []*group, read func(*fsm.FSM)) {
	for shard, g := range groups {
		if shard != MetaShard {
			g.View(read)
		}
	}
}

// LiveSessionTimeout returns the timeout of the live session id, read in
// the meta group after a linearizable barrier, the caller authorized for
// the session as GetSession's is: the ZooKeeper listener's check of a
// resumed or attached session. Unlike GetSession it counts no ephemeral
// nodes, so with several shards it waits on no shard but the meta group.
func (s *Server) LiveSessionTimeout(ctx context.Context, id uint64) (uint64, error) {
	if err := s.authorizeSessions(ctx, id); err != nil {
		return 0, err
	}
	return s.ResumableSession(ctx, id)
}

// ResumableSession returns the timeout of the live session id, read after a
// linearizable barrier, without asking for credentials: the ZooKeeper
// handshake resumes a session on the proof of its id and derived password
// before the client's digest credentials arrive. It tells only whether the
// session lives and its timeout; every operation with the session is then
// authorized as usual, the session's owner checked.
func (s *Server) ResumableSession(ctx context.Context, id uint64) (uint64, error) {
	g := s.metaGroup()
	if err := g.Barrier(ctx, api.Linearizable, 0); err != nil {
		return 0, err
	}
	var sess fsm.Session
	var err error
	g.View(func(f *fsm.FSM) { sess, err = f.Session(id) })
	if err != nil {
		return 0, err
	}
	return sess.TimeoutMs, nil
}

// Heartbeat keeps sessions alive (sessions.Liveness.Heartbeat). It returns
// the applied index and the ids that are not alive (expired or closed).
func (s *Server) Heartbeat(ctx context.Context, ids []uint64) (uint64, []uint64, error) {
	if err := s.authorizeSessions(ctx, ids...); err != nil {
		return 0, nil, err
	}
	return s.metaGroup().sessions.Heartbeat(ctx, ids)
}
