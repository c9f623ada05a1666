package fsm

import (
	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/command"
)

// Sessions across shards (docs/design.md, "Sessions stay cluster-wide").
// The session table lives in shard 0. Another shard keeps, per session that
// wrote there, a local record only: its ephemeral count and exactly-once
// window (timeout 0), made by its first write and deleted by the
// OpSessionsEnded that names it (or as soon as it holds nothing). Every
// write of a session there carries Observed and is refused (RedoSessionFenced)
// if it is below the session fence: the index of the latest OpSessionsEnded.

// endingSession is a session of the ending list of shard 0: ended (closed or
// expired) at index ended, its cleanup in the other shards not yet confirmed.
type endingSession struct {
	id    uint64
	ended uint64
}

func endingLess(a, b endingSession) bool { return a.id < b.id }

// EndingSession is a session of shard 0's ending list.
type EndingSession struct {
	ID uint64
	// Ended is the index of shard 0's log at which it ended.
	Ended uint64
}

// EndingSessions returns shard 0's ending list, sorted by id: the sessions
// ended whose OpSessionsEnded may not have applied in every other shard.
// Shard 0's leader proposes OpSessionsEnded for them in every other shard,
// then OpSessionsCleaned here. Empty with one shard and in other shards.
func (f *FSM) EndingSessions() []EndingSession {
	list := make([]EndingSession, 0, f.ending.Len())
	f.ending.Scan(func(e endingSession) bool {
		list = append(list, EndingSession{ID: e.id, Ended: e.ended})
		return true
	})
	return list
}

// SessionFence returns the index of the latest OpSessionsEnded applied in
// this shard (0 if none): a session's write carrying an Observed index below
// it is refused.
func (f *FSM) SessionFence() uint64 { return f.sessionFence }

// applySession applies OpSessionCreate, OpSessionClose and OpSessionExpire,
// which only shard 0 holds.
func (f *FSM) applySession(index uint64, cmd *command.Command) (Result, []Event) {
	if !f.shard.meta() {
		return f.wrongShard("%v belongs to shard 0, which holds the sessions", cmd.Op)
	}
	switch cmd.Op {
	case command.OpSessionCreate:
		return f.createSession(index, cmd), nil
	case command.OpSessionClose:
		return f.closeSession(index, cmd.SessionID)
	default:
		return f.expireSessions(index, cmd.Sessions)
	}
}

// applyMember applies OpMemberSet and OpMemberRemove, which only shard 0
// holds.
func (f *FSM) applyMember(cmd *command.Command) (Result, []Event) {
	if !f.shard.meta() {
		return f.wrongShard("%v belongs to shard 0, which holds the members", cmd.Op)
	}
	if cmd.Op == command.OpMemberSet {
		f.setMember(cmd.Member)
	} else {
		f.removeMember(cmd.Member.ID)
	}
	return Result{}, nil
}

// noteEnded records, in shard 0 of a sharded cluster, that session id ended
// at index: its cleanup in the other shards is pending.
func (f *FSM) noteEnded(index, id uint64) {
	if f.shard.sharded() {
		f.ending.Set(endingSession{id: id, ended: index})
	}
}

// writingSession returns the session a write carries, whether it is live,
// or a refusal. In shard 0 it is the session of the table. In another shard
// the write must carry an Observed index at or above the session fence; the
// session's local record is then made if it has none (dropIdleSession
// removes it again if the write leaves it empty).
func (f *FSM) writingSession(cmd *command.Command) (session, bool, *Result) {
	if f.shard.meta() {
		s, ok := f.sessions.Get(session{id: cmd.SessionID})
		return s, ok, nil
	}
	switch {
	case cmd.Observed == 0:
		r := Result{Err: api.Errorf(api.CodeInternal, "%s: a write of session %s carries no observed index", f.shard, api.FormatID(cmd.SessionID))}
		return session{}, false, &r
	case cmd.Observed < f.sessionFence:
		r := redo(RedoSessionFenced, "%s: session %s was checked at index %d, below the session fence %d: check it again",
			f.shard, api.FormatID(cmd.SessionID), cmd.Observed, f.sessionFence)
		return session{}, false, &r
	}
	s, ok := f.sessions.Get(session{id: cmd.SessionID})
	if !ok {
		s = session{id: cmd.SessionID}
		f.sessions.Set(s)
	}
	return s, true, nil
}

// dropIdleSession deletes, in a shard other than 0, the local record of
// session id if it owns no node, remembers no result and holds no stream
// position.
func (f *FSM) dropIdleSession(id uint64) {
	if f.shard.meta() || id == 0 {
		return
	}
	if s, ok := f.sessions.Get(session{id: id}); ok && s.ephemerals == 0 && s.dedup == nil && s.stream == (streamPos{}) {
		f.sessions.Delete(s)
	}
}

// sessionsEnded applies OpSessionsEnded in a shard other than 0: it deletes
// the ephemeral nodes and the local record of every session in ids (those
// without one are skipped) and raises the session fence to index.
func (f *FSM) sessionsEnded(index uint64, ids []uint64) (Result, []Event) {
	if f.shard.meta() {
		return f.wrongShard("sessions_ended belongs to the shards other than 0; shard 0 ends sessions in their close or expiry")
	}
	var events []Event
	for _, id := range ids {
		if _, ok := f.sessions.Get(session{id: id}); ok {
			events = f.endSession(index, id, events)
		}
	}
	f.sessionFence = index
	return Result{}, events
}

// sessionsCleaned applies OpSessionsCleaned in shard 0 of a sharded
// cluster: the sessions in ids leave the ending list (unknown ones are
// skipped: a cleanup may be confirmed twice).
func (f *FSM) sessionsCleaned(ids []uint64) (Result, []Event) {
	if !f.shard.meta() || !f.shard.sharded() {
		return f.wrongShard("sessions_cleaned belongs to shard 0 of a sharded cluster")
	}
	for _, id := range ids {
		f.ending.Delete(endingSession{id: id})
	}
	return Result{}, nil
}
