package fsm

import (
	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/command"
)

// The ordered streams of writes: a client connection that has several
// writes of its session in flight at once (the ZooKeeper listener's
// pipelined writes) tags each with its place in the connection's stream
// (command.Command's StreamID, StreamFloor, StreamSeq), and the state
// machine applies a tagged write only if it is the next one of its stream,
// so that the writes of a connection take effect in the order it sent them
// even when a proposal is lost (a leader change, a dropped forward) or
// reordered on its way to the log:
//   - StreamSeq 1 opens a stream: applied only if its StreamFloor is above
//     the floor of the session's stream in this shard (a connection opened
//     later reads a higher floor), so a write of an older connection that
//     reaches the log after a newer connection's stream opened is refused;
//   - StreamSeq n > 1 is applied only if the session's stream in this
//     shard is the same (id and floor) and its last applied write is n-1.
//
// A refused write changes nothing and is answered unavailable; so is every
// later write of its stream, whose predecessor is then missing, and the
// server ends the connection. A write refused with a Redo does not take its
// place (it is proposed again with the same tag); any other outcome,
// applied or refused by the state (a version mismatch, a missing node),
// does. The position is part of the session's record in this shard, so it
// goes when the session ends (and, outside shard 0, when its local record
// goes: a record holding a position is not idle).

// streamPos is the position of a session's stream of ordered writes in
// one shard: the stream's id and floor and the StreamSeq of its last write
// applied; all zero for none.
type streamPos struct {
	id, floor, seq uint64
}

// admits returns nil if the tagged write cmd comes next in pos, else the
// refusal.
func (pos streamPos) admits(cmd *command.Command) *api.Error {
	if cmd.StreamSeq == 1 {
		if cmd.StreamFloor <= pos.floor {
			return api.Errorf(api.CodeUnavailable,
				"session %s: a write of a connection opened at index %d, not after the connection whose writes this shard applied (opened at index %d): the connection must end",
				api.FormatID(cmd.SessionID), cmd.StreamFloor, pos.floor)
		}
		return nil
	}
	if cmd.StreamID != pos.id || cmd.StreamFloor != pos.floor || cmd.StreamSeq != pos.seq+1 {
		return api.Errorf(api.CodeUnavailable,
			"session %s: write %d of its connection's stream is out of order (the write before it was not applied): the connection must end",
			api.FormatID(cmd.SessionID), cmd.StreamSeq)
	}
	return nil
}

// next returns the position after the tagged write cmd.
func next(cmd *command.Command) streamPos {
	return streamPos{id: cmd.StreamID, floor: cmd.StreamFloor, seq: cmd.StreamSeq}
}

// ordered reports whether cmd carries a stream tag.
func ordered(cmd *command.Command) bool { return cmd.StreamID != 0 }

// advanceStream records that the tagged write cmd of session id took its
// place. The session exists: applyWrite checked it and writes never end
// sessions.
func (f *FSM) advanceStream(cmd *command.Command) {
	s, _ := f.sessions.Get(session{id: cmd.SessionID})
	s.stream = next(cmd)
	f.sessions.Set(s)
}

// StreamPosition returns the position of session id's stream of ordered
// writes in this shard: its id, floor and the StreamSeq of its last write
// applied (all 0 for none, or an unknown session).
func (f *FSM) StreamPosition(id uint64) (streamID, floor, seq uint64) {
	s, _ := f.sessions.Get(session{id: id})
	return s.stream.id, s.stream.floor, s.stream.seq
}
