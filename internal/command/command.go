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
const FormatVersion byte = 2

// FormatV1 is the first version: the rules before version 2.
const FormatV1 byte = 1

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
	// OpTxn applies Ops all or nothing at one index (see TxnOp), on behalf
	// of SessionID if set, exactly once with RequestSeq. Version 1 has no
	// OpTxn: a version-1 command of this op does not decode.
	OpTxn
	opCount // first invalid op
)

var opNames = [...]string{"noop", "put", "delete", "session_create", "session_close", "session_expire", "member_set", "member_remove", "enqueue", "txn"}

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
	// Ops are the operations of an OpTxn, in order; encoded only with OpTxn.
	Ops []TxnOp
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
	presenceMask = 1<<iota - 1
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
	return n + c.txnSectionLen()
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
	return c.appendTxnSection(dst)
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
	return m
}

// Unmarshal decodes a command encoded by Marshal. The returned Value aliases
// data (callers that keep it beyond data's lifetime must copy it); Path and
// the member strings are copies. Any input that is not exactly a canonical
// encoding is an error; Unmarshal never panics.
func Unmarshal(data []byte) (Command, error) {
	var c Command
	if len(data) == 0 {
		return c, fmt.Errorf("%w: empty", ErrMalformed)
	}
	switch data[0] {
	case FormatVersion:
	case FormatV1:
		c.Format = FormatV1
	default:
		return c, fmt.Errorf("%w %d", ErrUnknownVersion, data[0])
	}
	if len(data) < headerLen {
		return c, fmt.Errorf("%w: %d-byte header truncated", ErrMalformed, len(data))
	}
	d := decoder{data: data, offset: headerLen}
	if err := c.decodeHeader(data); err != nil {
		return Command{}, err
	}
	mask := d.uvarint("presence mask")
	if d.err == nil && mask&^presenceMask != 0 {
		d.fail("unknown presence bits %#x", mask&^presenceMask)
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
	if c.Op == OpTxn {
		c.Ops = d.txnOps()
	}
	if d.err == nil && d.offset != len(data) {
		d.fail("%d trailing bytes", len(data)-d.offset)
	}
	if d.err != nil {
		return Command{}, d.err
	}
	return c, nil
}

func (c *Command) decodeHeader(data []byte) error {
	c.Op = Op(data[1])
	if c.Op >= opCount {
		return fmt.Errorf("%w: unknown op %d", ErrMalformed, data[1])
	}
	if c.Op == OpTxn && c.Legacy() {
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
