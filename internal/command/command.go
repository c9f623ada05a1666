// Package command owns the encoding of the commands that latch replicates
// through the Raft log: a Command is built by the server or a feature
// (sessions, queues), proposed through its group's runtime
// (replica.Replica.Propose), carried as the data of a log entry, and applied
// by internal/fsm on every replica.
//
// The encoding is compact, binary and versioned: the first byte is the format
// version (FormatVersion), so a future format can be introduced while old log
// entries and snapshots stay readable. The version also names the rules the
// state machine applies the command with: a command decoded from an older
// version keeps Format, and internal/fsm applies it exactly as the binary
// that wrote it did, so existing logs replay to the same state. Decoding is strict and canonical: every
// input that Unmarshal accepts re-encodes to exactly the same bytes, and any
// other input (truncated, trailing bytes, unknown op, unknown flag, a field
// marked present but zero, a non-minimal varint) is an error wrapping
// ErrMalformed or ErrUnknownVersion. Unmarshal never panics.
//
// Version 3 adds, for sharded clusters, the ops OpSessionsEnded through
// OpDirDelete and the fields Incarnation, Observed and Mark (docs/design.md,
// "Sharding", lists the server steps that propose them); a version-1 or -2
// encoding that holds any of them is malformed. OpTxn (op 15) and OpAuth
// (op 16, the auth state: see AuthOp) were appended to version 3 after the
// sharding ops; each carries its own section after every other field, so the
// encoding of every other op is unchanged. TimeMs (the proposer's wall
// clock) was appended to version 3 the same way, as the last presence bit:
// an entry without it decodes as before, with TimeMs 0. The stream tag
// (StreamID, StreamFloor, StreamSeq: the place of a write in its client
// connection's ordered stream of writes) was appended after it the same way.
package command

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// FormatVersion is the first byte of every command this binary encodes.
//
// Version 2 changed no field, only rules of the state machine: a sequential
// create skips names already taken instead of failing; a node's sequence
// counter starts at the index that created it, so a parent deleted and made
// again never hands out a name twice; OpEnqueue of a session already queued
// updates its node's value.
//
// Version 3 adds the operations and fields of sharding (OpSessionsEnded and
// after; Incarnation, Observed, Mark) and changes no rule of an earlier
// operation, so a version-2 entry applies exactly as before. A version-1 or
// version-2 encoding holding any of them is malformed.
const FormatVersion byte = 3

// FormatV1 is the first version: the rules before version 2.
const FormatV1 byte = 1

// FormatV2 is the version before sharding: the ops up to OpEnqueue and the
// fields up to LeaderTerm, applied with the rules of version 3.
const FormatV2 byte = 2

// Op is the kind of a replicated command.
type Op uint8

// The replicated operations. The numeric values are part of the encoding.
const (
	OpNoop          Op = iota // no state change; only the applied index moves
	OpPut                     // create or update the node at Path
	OpDelete                  // delete the node at Path (and its subtree if Recursive)
	OpSessionCreate           // create session SessionID (chosen by the proposer), or, without one, the entry's index
	OpSessionClose            // close SessionID and delete its ephemeral nodes
	OpSessionExpire           // expire every session in Sessions in one entry
	OpMemberSet               // insert or replace Member
	OpMemberRemove            // remove the member with Member.ID
	// OpEnqueue joins a lock or election queue: Path is "{dir}/{prefix}".
	// If SessionID already owns an ephemeral node "{dir}/{prefix}NNNNNNNNNN",
	// the result is that node, given Value if that differs (version 2; in
	// version 1 nothing changes); otherwise it is an ephemeral sequential put. So retried or concurrent joins of one
	// session never make two nodes.
	OpEnqueue
	// OpSessionsEnded (version 3), in a shard other than 0: the sessions in
	// Sessions ended in shard 0; delete their ephemeral nodes and
	// exactly-once windows in this shard and raise its session fence to the
	// entry's index.
	OpSessionsEnded
	// OpSessionsCleaned (version 3), in shard 0: every shard applied the
	// OpSessionsEnded of the sessions in Sessions; drop them from the ending
	// list.
	OpSessionsCleaned
	// OpDirMark (version 3), in Shard(Path): mark the directory Path
	// closing, if Precondition holds; the mark is the entry's index.
	OpDirMark
	// OpDirUnmark (version 3), in Shard(Path): remove Path's closing mark
	// Mark (a close refused for children undoes its mark).
	OpDirUnmark
	// OpDirClose (version 3), in ChildShard(Path): close Path's directory
	// record of incarnation Incarnation if it has no children (or if there
	// is none), raising the directory fence to the entry's index.
	OpDirClose
	// OpDirDelete (version 3), in Shard(Path): delete Path if it is still
	// closing under the mark Mark.
	OpDirDelete
	// OpTxn (version 3) applies Ops all or nothing at one index (see
	// TxnOp), on behalf of SessionID if set, exactly once with RequestSeq.
	// Versions 1 and 2 have no OpTxn: such a command does not decode.
	OpTxn
	// OpAuth (version 3) changes the auth state (users, roles, grants, the
	// enabled flag, tokens) as Auth says; see AuthOp. It is proposed to the
	// meta group (shard 0) only. Versions 1 and 2 have no OpAuth.
	OpAuth
	opCount // first invalid op
)

// opCountV2 is the first op a version-2 (or version-1) encoding cannot hold.
const opCountV2 = OpSessionsEnded

var opNames = [...]string{"noop", "put", "delete", "session_create", "session_close", "session_expire", "member_set", "member_remove", "enqueue",
	"sessions_ended", "sessions_cleaned", "dir_mark", "dir_unmark", "dir_close", "dir_delete", "txn", "auth"}

func (o Op) String() string {
	if o < opCount {
		return opNames[o]
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// Precondition is the compare part of a compare-and-set write.
type Precondition uint8

// The preconditions of a write (docs/api.md prev_version).
const (
	PrecondAny     Precondition = iota // no condition (prev_version=any)
	PrecondNone                        // the node must not exist (prev_version=none)
	PrecondVersion                     // the node's version must equal Command.Version (a missing node has version 0)
	precondCount
)

// Member is one server of the cluster as recorded in the replicated state.
type Member struct {
	ID        uint64
	Name      string
	PeerURL   string
	ClientURL string
	Learner   bool
}

// Command is one replicated operation. Which fields matter depends on Op;
// the others are zero.
type Command struct {
	Op Op
	// Format is the version the command was decoded from when it is older
	// than FormatVersion (FormatV1); 0 means FormatVersion. Marshal writes
	// it back, so a decoded command re-encodes to the same bytes.
	Format byte
	// ID is chosen by the proposer to match the applied entry to its waiter.
	// The state machine ignores it.
	ID           uint64
	Path         string
	Value        []byte
	Precondition Precondition
	Version      uint64 // the expected version, with PrecondVersion
	Ephemeral    bool
	Sequential   bool
	Recursive    bool
	// SessionID and RequestSeq, both non-zero, make a write exactly-once:
	// a retry with the same pair returns the first result. On
	// OpSessionCreate, SessionID is the new session's id, drawn at random by
	// the proposer (0, in old entries: the id is the entry's index).
	SessionID  uint64
	RequestSeq uint64
	TimeoutMs  uint64   // OpSessionCreate: the session timeout, already clamped by the server
	Sessions   []uint64 // OpSessionExpire: the sessions to expire, all in one entry
	Member     Member   // OpMemberSet and OpMemberRemove
	// LeaderTerm, on OpSessionExpire, is the raft term of the leader that
	// decided the expiry from its own deadlines. The server applies the
	// expiry only if the entry was appended in that same term, so an expiry
	// a deposed leader proposed (and raft forwarded to its successor) is void.
	LeaderTerm uint64
	// Incarnation (version 3) is a directory's created_index in its own
	// shard: on OpPut and OpEnqueue under a parent whose record lives in
	// another shard, the parent the server checked there (open its
	// directory record if none is open); on OpDirClose, the directory
	// closed.
	Incarnation uint64
	// Observed (version 3) is an applied index of the command's shard that
	// the server read through a barrier before the linearizable reads it
	// made in other shards (the parent's state, the session's liveness).
	// The shard refuses the command if a directory close or a session end
	// applied since (the fences); the server then reads again.
	Observed uint64
	// Mark (version 3) is the closing mark of OpDirUnmark and OpDirDelete:
	// the index of the OpDirMark that made it.
	Mark uint64
	// Ops are the operations of an OpTxn, in order; encoded only with OpTxn.
	Ops []TxnOp
	// Auth is the change of an OpAuth; encoded only with OpAuth.
	Auth AuthOp
	// TimeMs (version 3, appended) is the wall-clock time of the proposal
	// in milliseconds since the Unix epoch, stamped by the member that
	// proposed the entry (replica.Replica.Propose) or chosen by its caller.
	// The state machine records it as the ctime and mtime of the nodes the
	// command creates and writes: every replica and every replay reads the
	// same value from the log, never its own clock. 0 in entries written
	// before the field existed: such writes record no time.
	TimeMs uint64
	// StreamID, StreamFloor and StreamSeq (version 3, appended) are the
	// ordering tag of a write of SessionID sent on one client connection
	// with other writes in flight (the ZooKeeper listener's pipelined
	// writes): StreamID names the connection's stream (random, non-zero),
	// StreamFloor is an index of shard 0 read through a linearizable
	// barrier when the connection was opened (a later connection of the
	// session reads a higher one), and StreamSeq numbers the stream's
	// writes proposed to this command's shard, from 1. The state machine
	// applies the write only if it is the next of its stream (internal/fsm,
	// stream.go); the three are all set or all zero.
	StreamID, StreamFloor, StreamSeq uint64
}

// Errors returned (wrapped) by Unmarshal.
var (
	ErrMalformed      = errors.New("command: malformed encoding")
	ErrUnknownVersion = errors.New("command: unknown format version")
)

// Bits of the flags byte.
const (
	flagEphemeral = 1 << iota
	flagSequential
	flagRecursive
	flagLearner
	flagMask = 1<<iota - 1
)

// Bits of the presence mask: a field is encoded only when it is non-zero.
const (
	hasID = 1 << iota
	hasPath
	hasValue
	hasVersion
	hasSessionID
	hasRequestSeq
	hasTimeoutMs
	hasSessions
	hasMemberID
	hasMemberName
	hasMemberPeerURL
	hasMemberClientURL
	hasLeaderTerm
	hasIncarnation // version 3
	hasObserved
	hasMark
	hasTime      // version 3, appended after sharding
	hasStream    // version 3, appended after hasTime: StreamID, StreamFloor, StreamSeq
	presenceMask = 1<<iota - 1
	// presenceMaskV2 holds the fields of versions 1 and 2.
	presenceMaskV2 = hasIncarnation - 1
)

// headerLen is the version, op, flags and precondition bytes.
const headerLen = 4

// Marshal returns the encoding of c in a newly allocated slice of exactly the
// right size.
func (c *Command) Marshal() []byte {
	return c.AppendMarshal(make([]byte, 0, c.Size()))
}

// Size returns the length of c's encoding.
func (c *Command) Size() int {
	mask := c.presence()
	n := headerLen + uvarintLen(mask)
	n += optionalUvarintLen(c.ID)
	n += optionalBytesLen(len(c.Path))
	n += optionalBytesLen(len(c.Value))
	n += optionalUvarintLen(c.Version)
	n += optionalUvarintLen(c.SessionID)
	n += optionalUvarintLen(c.RequestSeq)
	n += optionalUvarintLen(c.TimeoutMs)
	if mask&hasSessions != 0 {
		n += uvarintLen(uint64(len(c.Sessions)))
		for _, id := range c.Sessions {
			n += uvarintLen(id)
		}
	}
	n += optionalUvarintLen(c.Member.ID)
	n += optionalBytesLen(len(c.Member.Name))
	n += optionalBytesLen(len(c.Member.PeerURL))
	n += optionalBytesLen(len(c.Member.ClientURL))
	n += optionalUvarintLen(c.LeaderTerm)
	n += optionalUvarintLen(c.Incarnation)
	n += optionalUvarintLen(c.Observed)
	n += optionalUvarintLen(c.Mark)
	n += optionalUvarintLen(c.TimeMs)
	if mask&hasStream != 0 {
		n += uvarintLen(c.StreamID) + uvarintLen(c.StreamFloor) + uvarintLen(c.StreamSeq)
	}
	return n + c.txnSectionLen() + c.authSectionLen()
}

// AppendMarshal appends the encoding of c to dst and returns the extended
// slice. It allocates only if dst lacks capacity.
func (c *Command) AppendMarshal(dst []byte) []byte {
	mask := c.presence()
	dst = append(dst, c.formatVersion(), byte(c.Op), c.flags(), byte(c.Precondition))
	dst = binary.AppendUvarint(dst, mask)
	dst = appendOptionalUvarint(dst, c.ID)
	dst = appendOptionalString(dst, c.Path)
	if len(c.Value) > 0 {
		dst = binary.AppendUvarint(dst, uint64(len(c.Value)))
		dst = append(dst, c.Value...)
	}
	dst = appendOptionalUvarint(dst, c.Version)
	dst = appendOptionalUvarint(dst, c.SessionID)
	dst = appendOptionalUvarint(dst, c.RequestSeq)
	dst = appendOptionalUvarint(dst, c.TimeoutMs)
	if mask&hasSessions != 0 {
		dst = binary.AppendUvarint(dst, uint64(len(c.Sessions)))
		for _, id := range c.Sessions {
			dst = binary.AppendUvarint(dst, id)
		}
	}
	dst = appendOptionalUvarint(dst, c.Member.ID)
	dst = appendOptionalString(dst, c.Member.Name)
	dst = appendOptionalString(dst, c.Member.PeerURL)
	dst = appendOptionalString(dst, c.Member.ClientURL)
	dst = appendOptionalUvarint(dst, c.LeaderTerm)
	dst = appendOptionalUvarint(dst, c.Incarnation)
	dst = appendOptionalUvarint(dst, c.Observed)
	dst = appendOptionalUvarint(dst, c.Mark)
	dst = appendOptionalUvarint(dst, c.TimeMs)
	if mask&hasStream != 0 {
		dst = binary.AppendUvarint(dst, c.StreamID)
		dst = binary.AppendUvarint(dst, c.StreamFloor)
		dst = binary.AppendUvarint(dst, c.StreamSeq)
	}
	return c.appendAuthSection(c.appendTxnSection(dst))
}

// formatVersion returns the version byte c is encoded with.
func (c *Command) formatVersion() byte {
	if c.Format == 0 {
		return FormatVersion
	}
	return c.Format
}

// Legacy reports whether c was decoded from format version 1 and so is
// applied with the rules of version 1.
func (c *Command) Legacy() bool { return c.Format == FormatV1 }

func (c *Command) flags() byte {
	var f byte
	if c.Ephemeral {
		f |= flagEphemeral
	}
	if c.Sequential {
		f |= flagSequential
	}
	if c.Recursive {
		f |= flagRecursive
	}
	if c.Member.Learner {
		f |= flagLearner
	}
	return f
}

func (c *Command) presence() uint64 {
	var m uint64
	set := func(bit uint64, present bool) {
		if present {
			m |= bit
		}
	}
	set(hasID, c.ID != 0)
	set(hasPath, c.Path != "")
	set(hasValue, len(c.Value) > 0)
	set(hasVersion, c.Version != 0)
	set(hasSessionID, c.SessionID != 0)
	set(hasRequestSeq, c.RequestSeq != 0)
	set(hasTimeoutMs, c.TimeoutMs != 0)
	set(hasSessions, len(c.Sessions) > 0)
	set(hasMemberID, c.Member.ID != 0)
	set(hasMemberName, c.Member.Name != "")
	set(hasMemberPeerURL, c.Member.PeerURL != "")
	set(hasMemberClientURL, c.Member.ClientURL != "")
	set(hasLeaderTerm, c.LeaderTerm != 0)
	set(hasIncarnation, c.Incarnation != 0)
	set(hasObserved, c.Observed != 0)
	set(hasMark, c.Mark != 0)
	set(hasTime, c.TimeMs != 0)
	set(hasStream, c.StreamID != 0 || c.StreamFloor != 0 || c.StreamSeq != 0)
	return m
}

// Unmarshal decodes a command encoded by Marshal. The returned Value aliases
// data (callers that keep it beyond data's lifetime must copy it); Path and
// the member strings are copies. Any input that is not exactly a canonical
// encoding is an error; Unmarshal never panics.
func Unmarshal(data []byte) (Command, error) {
	return UnmarshalReusing(data, nil)
}

// UnmarshalReusing is Unmarshal, decoding a transaction's operations into
// ops's backing array when it holds them all (else into a new one): a
// caller that decodes entry after entry and keeps nothing of one past the
// next passes the last command's Ops.
func UnmarshalReusing(data []byte, ops []TxnOp) (Command, error) {
	var c Command
	if len(data) == 0 {
		return c, fmt.Errorf("%w: empty", ErrMalformed)
	}
	switch data[0] {
	case FormatVersion:
	case FormatV1, FormatV2:
		c.Format = data[0]
	default:
		return c, fmt.Errorf("%w %d", ErrUnknownVersion, data[0])
	}
	if len(data) < headerLen {
		return c, fmt.Errorf("%w: %d-byte header truncated", ErrMalformed, len(data))
	}
	d := decoder{data: data, offset: headerLen, ops: ops}
	if err := c.decodeHeader(data); err != nil {
		return Command{}, err
	}
	mask := d.uvarint("presence mask")
	if known := c.knownPresence(); d.err == nil && mask&^known != 0 {
		d.fail("unknown presence bits %#x in format version %d", mask&^known, data[0])
	}
	c.ID = d.optionalUvarint(mask, hasID, "id")
	c.Path = d.optionalString(mask, hasPath, "path")
	c.Value = d.optionalBytes(mask, hasValue, "value")
	c.Version = d.optionalUvarint(mask, hasVersion, "version")
	c.SessionID = d.optionalUvarint(mask, hasSessionID, "session id")
	c.RequestSeq = d.optionalUvarint(mask, hasRequestSeq, "request seq")
	c.TimeoutMs = d.optionalUvarint(mask, hasTimeoutMs, "timeout")
	if mask&hasSessions != 0 {
		c.Sessions = d.uvarintList("sessions")
	}
	c.Member.ID = d.optionalUvarint(mask, hasMemberID, "member id")
	c.Member.Name = d.optionalString(mask, hasMemberName, "member name")
	c.Member.PeerURL = d.optionalString(mask, hasMemberPeerURL, "member peer url")
	c.Member.ClientURL = d.optionalString(mask, hasMemberClientURL, "member client url")
	c.LeaderTerm = d.optionalUvarint(mask, hasLeaderTerm, "leader term")
	c.Incarnation = d.optionalUvarint(mask, hasIncarnation, "incarnation")
	c.Observed = d.optionalUvarint(mask, hasObserved, "observed index")
	c.Mark = d.optionalUvarint(mask, hasMark, "mark")
	c.TimeMs = d.optionalUvarint(mask, hasTime, "time")
	if mask&hasStream != 0 {
		c.StreamID = d.uvarint("stream id")
		c.StreamFloor = d.uvarint("stream floor")
		c.StreamSeq = d.uvarint("stream seq")
		if d.err == nil && (c.StreamID == 0 || c.StreamFloor == 0 || c.StreamSeq == 0) {
			d.fail("stream tag with a zero part (id %d, floor %d, seq %d)", c.StreamID, c.StreamFloor, c.StreamSeq)
		}
	}
	if c.Op == OpTxn {
		c.Ops = d.txnOps()
	}
	if c.Op == OpAuth {
		c.Auth = d.authOp()
	}
	if d.err == nil && d.offset != len(data) {
		d.fail("%d trailing bytes", len(data)-d.offset)
	}
	if d.err != nil {
		return Command{}, d.err
	}
	return c, nil
}

// knownPresence returns the presence bits c's format version defines.
func (c *Command) knownPresence() uint64 {
	if c.Format != 0 {
		return presenceMaskV2
	}
	return presenceMask
}

func (c *Command) decodeHeader(data []byte) error {
	c.Op = Op(data[1])
	if c.Op >= opCount || (c.Format != 0 && c.Op >= opCountV2) {
		return fmt.Errorf("%w: unknown op %d in format version %d", ErrMalformed, data[1], data[0])
	}
	if (c.Op == OpTxn || c.Op == OpAuth) && c.Legacy() {
		return fmt.Errorf("%w: op %v does not exist in format version %d", ErrMalformed, c.Op, FormatV1)
	}
	flags := data[2]
	if flags&^flagMask != 0 {
		return fmt.Errorf("%w: unknown flags %#x", ErrMalformed, flags)
	}
	c.Ephemeral = flags&flagEphemeral != 0
	c.Sequential = flags&flagSequential != 0
	c.Recursive = flags&flagRecursive != 0
	c.Member.Learner = flags&flagLearner != 0
	c.Precondition = Precondition(data[3])
	if c.Precondition >= precondCount {
		return fmt.Errorf("%w: unknown precondition %d", ErrMalformed, data[3])
	}
	return nil
}
