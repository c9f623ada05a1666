package transport

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// Peer messages are the server's own protocols between members, carried on
// the message connections beside raft's frames but never handed to raft:
// the heartbeat relay (SessionRelay, answered by SessionRelayAck), the
// removal notice, the status report and the quiesce notice. Each is a typed value; the transport encodes it in a peer
// frame of its own (see frame.go), so neither side reads it as a raft message.
//
// Wire form of a peer frame, after its length word (see frame.go):
//
//	crc32c(body) u32 | body
//	body: version u8 | type u8 | fields
//
// with fields by type:
//
//	SessionRelay:    count uvarint | count session ids, each uvarint
//	SessionRelayAck: (none)
//	RemovalNotice:   (none)
//	StatusReport:    group | count uvarint | count times (shard uvarint | group)
//	group:           role u8 | term uvarint | leader uvarint | commit uvarint | applied uvarint
//	Quiesce:         group id uvarint | term uvarint | commit uvarint
//
// A frame whose checksum, version, type or fields do not decode is dropped
// and counted in Stats.PeerFramesDropped; the stream carrying it, which also
// carries replication, stays up.

// PeerMessage is one typed message between members: SessionRelay,
// SessionRelayAck, RemovalNotice, StatusReport or Quiesce. The set is closed.
type PeerMessage interface {
	peerType() peerType
}

// SessionRelay carries the session heartbeats a member heard to the leader,
// which extends those sessions' deadlines and answers with a SessionRelayAck.
// A relay with no ids is sent all the same, to learn that the leader can be
// reached.
type SessionRelay struct {
	SessionIDs []uint64 // at most MaxRelayIDs
}

// SessionRelayAck is the leader's answer to a SessionRelay: the relaying
// member can reach the leader, so it may keep answering heartbeats.
type SessionRelayAck struct{}

// RemovalNotice tells its receiver that the sender applied the receiver's
// removal from the cluster: the receiver is no longer a member.
type RemovalNotice struct{}

// StatusReport is a member's own view of its consensus groups, sent to
// every other member about once a second so that each can answer GET
// /v1/cluster/health without asking anyone: the peer connections are
// already authenticated, whatever the client port asks of its callers.
type StatusReport struct {
	Main   GroupStatus   // the meta group (shard 0), as GET /v1/status's top level
	Shards []ShardStatus // every running shard's, shard 0 included; at most MaxReportShards
}

// GroupStatus is a member's role and indexes in one consensus group.
type GroupStatus struct {
	Role         MemberRole
	Term         uint64
	Leader       uint64 // raft id of the leader the member follows; 0 if none known
	CommitIndex  uint64
	AppliedIndex uint64
}

// ShardStatus is a member's GroupStatus in the consensus group of one shard.
type ShardStatus struct {
	Shard uint32 // below MaxReportShards
	GroupStatus
}

// Quiesce is a leader's word to a follower that consensus group Group is
// idle: every member has its whole log, Commit, at Term, nothing is in
// flight, and the leader stopped ticking the group. The follower stops
// ticking it too if it follows the sender at Term and its own log ends at
// Commit, which is also its commit index; otherwise it ignores the message
// (internal/raftnode, "Quiescing").
type Quiesce struct {
	Group  uint64 // the consensus-group id: 1 to MaxGroup
	Term   uint64
	Commit uint64
}

// MemberRole is a member's role in a consensus group, as a StatusReport
// carries it. The zero value is no role and does not decode.
type MemberRole uint8

// The roles a StatusReport carries.
const (
	RoleFollower  MemberRole = 1
	RoleCandidate MemberRole = 2 // pre-candidates included
	RoleLeader    MemberRole = 3
	RoleLearner   MemberRole = 4
)

func (SessionRelay) peerType() peerType    { return peerSessionRelay }
func (SessionRelayAck) peerType() peerType { return peerSessionRelayAck }
func (RemovalNotice) peerType() peerType   { return peerRemovalNotice }
func (StatusReport) peerType() peerType    { return peerStatusReport }
func (Quiesce) peerType() peerType         { return peerQuiesce }

// peerType is the type byte of a peer frame's body.
type peerType uint8

const (
	peerSessionRelay    peerType = 1
	peerSessionRelayAck peerType = 2
	peerRemovalNotice   peerType = 3
	peerStatusReport    peerType = 4
	peerQuiesce         peerType = 5
)

const (
	// peerVersion is the version byte of every peer frame body.
	peerVersion = 1
	// MaxRelayIDs bounds the session ids in one SessionRelay; a sender with
	// more sends several relays.
	MaxRelayIDs = 8192
	// MaxReportShards bounds the shards of one StatusReport, and each shard
	// number in it: the largest shard count a cluster may have
	// (placement.MaxShards).
	MaxReportShards = 1024
	// MaxGroup bounds the consensus-group id of a Quiesce: shard k is group
	// k+1, so the largest is MaxReportShards.
	MaxGroup = MaxReportShards
	// maxPeerFrame bounds a peer frame's length word: the largest relay
	// (MaxRelayIDs ids of at most 10 bytes each) with room to spare, which
	// also holds the largest status report (MaxReportShards+1 groups of at
	// most 46 bytes each).
	maxPeerFrame = 1 << 20
	// peerHeaderSize is the checksum, version and type before a body's fields.
	peerHeaderSize = 4 + 2
)

// errBadPeerMessage means a peer frame's body does not decode. Unlike
// ErrCorrupt, it does not end the stream: only the frame is dropped.
var errBadPeerMessage = errors.New("transport: malformed peer message")

// appendPeerMessage appends the checksum and body of m to buf (the length
// word is the caller's).
func appendPeerMessage(buf []byte, m PeerMessage) ([]byte, error) {
	start := len(buf)
	buf = append(buf, 0, 0, 0, 0, peerVersion, byte(m.peerType()))
	switch m := m.(type) {
	case SessionRelay:
		if len(m.SessionIDs) > MaxRelayIDs {
			return buf[:start], fmt.Errorf("session relay of %d ids, over %d: %w", len(m.SessionIDs), MaxRelayIDs, errBadPeerMessage)
		}
		buf = binary.AppendUvarint(buf, uint64(len(m.SessionIDs)))
		for _, id := range m.SessionIDs {
			buf = binary.AppendUvarint(buf, id)
		}
	case SessionRelayAck, RemovalNotice:
	case StatusReport:
		var err error
		if buf, err = appendStatusReport(buf, m); err != nil {
			return buf[:start], err
		}
	case Quiesce:
		if m.Group < 1 || m.Group > MaxGroup {
			return buf[:start], fmt.Errorf("quiesce of group %d, not from 1 to %d: %w", m.Group, MaxGroup, errBadPeerMessage)
		}
		buf = binary.AppendUvarint(buf, m.Group)
		buf = binary.AppendUvarint(buf, m.Term)
		buf = binary.AppendUvarint(buf, m.Commit)
	default:
		return buf[:start], fmt.Errorf("peer message %T: %w", m, errBadPeerMessage)
	}
	binary.BigEndian.PutUint32(buf[start:], crc32.Checksum(buf[start+4:], castagnoli))
	return buf, nil
}

// decodePeerMessage decodes the checksum and body of a peer frame. Every
// error wraps errBadPeerMessage. The result shares no memory with data.
func decodePeerMessage(data []byte) (PeerMessage, error) {
	if len(data) < peerHeaderSize {
		return nil, fmt.Errorf("peer frame of %d bytes: %w", len(data), errBadPeerMessage)
	}
	if sum, want := crc32.Checksum(data[4:], castagnoli), binary.BigEndian.Uint32(data); sum != want {
		return nil, fmt.Errorf("peer frame checksum %08x, want %08x: %w", sum, want, errBadPeerMessage)
	}
	if data[4] != peerVersion {
		return nil, fmt.Errorf("peer frame version %d: %w", data[4], errBadPeerMessage)
	}
	fields := data[peerHeaderSize:]
	var m PeerMessage
	switch peerType(data[5]) {
	case peerSessionRelay:
		ids, err := decodeRelayIDs(fields)
		if err != nil {
			return nil, err
		}
		return SessionRelay{SessionIDs: ids}, nil
	case peerSessionRelayAck:
		m = SessionRelayAck{}
	case peerRemovalNotice:
		m = RemovalNotice{}
	case peerStatusReport:
		return decodeStatusReport(fields)
	case peerQuiesce:
		return decodeQuiesce(fields)
	default:
		return nil, fmt.Errorf("peer frame type %d: %w", data[5], errBadPeerMessage)
	}
	if len(fields) != 0 {
		return nil, fmt.Errorf("%T with %d trailing bytes: %w", m, len(fields), errBadPeerMessage)
	}
	return m, nil
}

// decodeRelayIDs decodes a SessionRelay's fields: a count, then that many ids, and nothing after.
func decodeRelayIDs(fields []byte) ([]uint64, error) {
	count, n := binary.Uvarint(fields)
	if n <= 0 || count > MaxRelayIDs {
		return nil, fmt.Errorf("session relay count: %w", errBadPeerMessage)
	}
	fields = fields[n:]
	var ids []uint64
	if count > 0 {
		ids = make([]uint64, 0, count)
	}
	for range count {
		id, n := binary.Uvarint(fields)
		if n <= 0 {
			return nil, fmt.Errorf("session relay id %d of %d: %w", len(ids), count, errBadPeerMessage)
		}
		ids = append(ids, id)
		fields = fields[n:]
	}
	if len(fields) != 0 {
		return nil, fmt.Errorf("session relay with %d trailing bytes: %w", len(fields), errBadPeerMessage)
	}
	return ids, nil
}

// decodeQuiesce decodes a Quiesce's fields: group id, term and commit, and
// nothing after. A group id outside 1 to MaxGroup does not decode.
func decodeQuiesce(fields []byte) (PeerMessage, error) {
	var q Quiesce
	for _, value := range []*uint64{&q.Group, &q.Term, &q.Commit} {
		v, n := binary.Uvarint(fields)
		if n <= 0 {
			return nil, fmt.Errorf("quiesce truncated: %w", errBadPeerMessage)
		}
		*value, fields = v, fields[n:]
	}
	if q.Group < 1 || q.Group > MaxGroup {
		return nil, fmt.Errorf("quiesce of group %d, not from 1 to %d: %w", q.Group, MaxGroup, errBadPeerMessage)
	}
	if len(fields) != 0 {
		return nil, fmt.Errorf("quiesce with %d trailing bytes: %w", len(fields), errBadPeerMessage)
	}
	return q, nil
}
