package fsm

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"hash/crc64"
	"io"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/command"
)

// Snapshot format, version 2. A snapshot is the 8-byte magic "LATCHFSM",
// a format version byte, then frames:
//
//	frame   = type byte, payload length (uvarint), payload, CRC-32C of
//	          type, length and payload (4 bytes, little endian)
//	header  = applied index, member count, removed member count, session
//	          count, node count
//	member  = id, name, peer url, client url, learner (0/1)
//	removed = a removed member, encoded as a member
//	session = id, timeout ms, highest request seq, record count, records
//	record  = seq, error code, error message, node path, version,
//	          created index, modified index, session id, timeout ms
//	node    = bytes shared with the previous node's path, rest of the path,
//	          value, version, created index, modified index, owner,
//	          sequence, children count
//	end     = empty
//
// Integers are uvarints and strings a uvarint length then the bytes. The
// frames come in the order header, members (by id), removed members (by
// id), sessions (by id), nodes (in tree order: the root first, parents
// before children), end. The encoding of a state is unique, so Hash can be
// a checksum of it.
//
// Version 1, written by older binaries and still read, has no removed
// members: its header lacks their count and it has no removed frames. A
// state read from it remembers no removal, and is written back as version 2.
//
// Version 3 is the state of one shard of a sharded cluster (more than one
// shard); a state machine of a cluster with one shard has none of its state
// and is written as version 2, byte for byte as before. Version 3 adds:
//
//	header    = applied index, shard, shard count, directory fence,
//	            session fence, member count, removed member count, session
//	            count, ending count, directory count, node count
//	ending    = session id, index it ended at (shard 0 only)
//	directory = path, incarnation, sequence, children count
//	node      = as in version 2, then the closing mark
//
// with the frames in the order header, members, removed members, sessions,
// ending sessions (by id), directories (in tree order), nodes, end. Versions
// 1 and 2 are the state of shard 0 of 1.
//
// Versions 4 and 5 are versions 2 and 3 with a transaction part at the end
// of every exactly-once record: 0 for the result of a single write; 1, the
// operation count (at least 1) and each operation's node path, version,
// created index, modified index, owner, data length and children count for
// an applied transaction; 2 and the failed operation's index for a refused
// one. A state is written in version 4 or 5 only if its exactly-once
// windows hold a transaction's result, in version 2 or 3 otherwise, so the
// encoding of a state stays unique and a cluster that never ran a
// transaction writes what an older binary reads.
//
// Versions 6 to 9 are versions 2 to 5 with the auth state: every session
// frame ends with the session's owner (a user name, or ""), and the auth
// state (users, roles, tokens, the enabled flag) follows the nodes, before
// the end:
//
//	auth  = enabled (0/1), role count, user count, token count
//	role  = name, grant count, grants (permission byte, prefix)
//	user  = name, password hash, role count, role names
//	token = SHA-256 digest, user, expiry (Unix milliseconds)
//
// roles, users and tokens each sorted by name (digest). A state is written
// in them only if its auth state is not empty (enabled, or any user, role or
// token) or a session has an owner, so a cluster that never used auth
// writes what an older binary reads.
//
// Versions 10 to 17 are versions 2 to 9 with the times of every node: each
// node frame ends (after the closing mark of a shard's) with its ctime,
// mtime, cversion and pzxid (see nodeData). A state is written in them only
// if a node holds any of the four (which every state does once a stamped
// command created or wrote a node), so a state of older binaries is written
// back as they wrote it.
//
// Versions 19 to 33 (odd: 3, 5, 7, 9, 11, 13, 15, 17 raised by 16) are the
// versions of a shard of a sharded cluster with the quota ledger
// (quota_ledger.go) after every other frame (the auth frames included),
// before the end:
//
//	ledger   = table epoch, peer count, peers (shard, last seq given to it,
//	           last seq taken from it) by shard, quota count (that of the
//	           auth frame), each quota's epoch, allotted nodes and allotted
//	           bytes (in the auth frame's order), transfer count
//	transfer = recipient, seq, prefix, epoch, nodes, bytes, by (recipient,
//	           seq)
//
// A shard's state is written in them only if its ledger is not empty (a
// quota, a sequence number, a transfer or a table epoch), so a sharded
// cluster that never set a quota writes what an older binary reads. Usage
// is written in no version: it is counted from the nodes when a snapshot is
// read.
const (
	snapshotMagic   = "LATCHFSM"
	snapshotVersion = 2
	// snapshotVersion1 is the format without removed members.
	snapshotVersion1 = 1
	// snapshotVersion3 is the format of a shard of a sharded cluster.
	snapshotVersion3 = 3
	// snapshotVersionTxn is version 2 whose records hold transactions.
	snapshotVersionTxn = 4
	// snapshotVersionShardTxn is version 3 whose records hold transactions.
	snapshotVersionShardTxn = 5
	// snapshotAuthRaise raises a version to the one with auth state.
	snapshotAuthRaise = 4
	// snapshotTimesRaise raises a version (2 to 9) to the one with node
	// times (10 to 17).
	snapshotTimesRaise = 8
	// snapshotVersionMax is the newest version without the quota ledger.
	snapshotVersionMax = snapshotVersionShardTxn + snapshotAuthRaise + snapshotTimesRaise
	// snapshotLedgerRaise raises a sharded version (3 to 17, odd) to the
	// one with the quota ledger (19 to 33).
	snapshotLedgerRaise = 16
	// maxFramePayload bounds the memory ReadSnapshot allocates for one frame.
	maxFramePayload = 16 << 20
)

const (
	frameHeader byte = iota + 1
	frameMember
	frameSession
	frameNode
	frameEnd
	frameRemoved   // version 2
	frameEnding    // version 3
	frameDirectory // version 3
	frameAuth      // versions 6 to 9
	frameRole
	frameUser
	frameToken
	frameQuotaLedger   // versions 19 to 33
	frameQuotaTransfer // versions 19 to 33
)

// ErrCorruptSnapshot is wrapped by every ReadSnapshot error about its input.
var ErrCorruptSnapshot = errors.New("fsm: corrupt snapshot")

var (
	castagnoli = crc32.MakeTable(crc32.Castagnoli)
	crc64Table = crc64.MakeTable(crc64.ECMA)
)

// WriteSnapshot serialises f to w in the snapshot format, streaming: it holds
// one frame in memory at a time, whatever the size of the state. It only
// reads f, so it may run on a Clone on another goroutine.
func (f *FSM) WriteSnapshot(w io.Writer) error {
	return f.writeSnapshot(bufio.NewWriterSize(w, 256<<10))
}

func (f *FSM) writeSnapshot(w *bufio.Writer) error {
	sw := snapshotWriter{w: w, txnResults: f.holdsTxnResults(), times: f.holdsTimes()}
	sharded := f.shard.sharded()
	withAuth := !f.auth.empty() || f.ownedSessions()
	sw.auth = withAuth
	ledger := sharded && !f.ledgerEmpty()
	version := snapshotFormat(sharded, sw.txnResults, withAuth, sw.times)
	if ledger {
		version += snapshotLedgerRaise
	}
	sw.write(append([]byte(snapshotMagic), version))
	sw.frame(frameHeader, func(b []byte) []byte { return f.appendHeader(b, sharded) })
	for _, m := range f.members {
		sw.frame(frameMember, func(b []byte) []byte { return appendMember(b, m) })
	}
	for _, m := range f.removed {
		sw.frame(frameRemoved, func(b []byte) []byte { return appendMember(b, m) })
	}
	f.sessions.Scan(func(s session) bool {
		sw.frame(frameSession, func(b []byte) []byte {
			b = appendSession(b, s, sw.txnResults)
			if sw.auth {
				b = appendString(b, s.owner)
			}
			return b
		})
		return sw.err == nil
	})
	if sharded {
		f.writeShardFrames(&sw)
	}
	previous := ""
	f.nodes.Scan(func(e entry) bool {
		sw.frame(frameNode, func(b []byte) []byte {
			b = appendNode(b, previous, e)
			if sharded {
				b = binary.AppendUvarint(b, e.closing)
			}
			if sw.times {
				b = appendNodeTimes(b, e)
			}
			return b
		})
		previous = e.path
		return sw.err == nil
	})
	if withAuth {
		f.auth.writeFrames(&sw)
	}
	if ledger {
		f.writeLedger(&sw)
	}
	sw.frame(frameEnd, func(b []byte) []byte { return b })
	if sw.err != nil {
		return fmt.Errorf("fsm: write snapshot: %w", sw.err)
	}
	if err := sw.w.Flush(); err != nil {
		return fmt.Errorf("fsm: write snapshot: %w", err)
	}
	return nil
}

// appendHeader appends the header frame's payload, of version 3 if sharded,
// else of version 2.
func (f *FSM) appendHeader(b []byte, sharded bool) []byte {
	b = binary.AppendUvarint(b, f.applied)
	if sharded {
		b = binary.AppendUvarint(b, uint64(f.shard.index))
		b = binary.AppendUvarint(b, uint64(f.shard.count()))
		b = binary.AppendUvarint(b, f.dirFence)
		b = binary.AppendUvarint(b, f.sessionFence)
	}
	b = binary.AppendUvarint(b, uint64(len(f.members)))
	b = binary.AppendUvarint(b, uint64(len(f.removed)))
	b = binary.AppendUvarint(b, uint64(f.sessions.Len()))
	if sharded {
		b = binary.AppendUvarint(b, uint64(f.ending.Len()))
		b = binary.AppendUvarint(b, uint64(f.dirs.Len()))
	}
	return binary.AppendUvarint(b, uint64(f.nodes.Len()))
}

// writeShardFrames writes the ending sessions and directory records of a
// version-3 snapshot.
func (f *FSM) writeShardFrames(sw *snapshotWriter) {
	f.ending.Scan(func(e endingSession) bool {
		sw.frame(frameEnding, func(b []byte) []byte {
			return binary.AppendUvarint(binary.AppendUvarint(b, e.id), e.ended)
		})
		return sw.err == nil
	})
	f.dirs.Scan(func(r dirRecord) bool {
		sw.frame(frameDirectory, func(b []byte) []byte {
			b = appendString(b, r.path)
			b = binary.AppendUvarint(b, r.incarnation)
			b = binary.AppendUvarint(b, r.sequence)
			return binary.AppendUvarint(b, uint64(r.children))
		})
		return sw.err == nil
	})
}

// Hash returns a fingerprint of all replicated state, the applied index
// included: the CRC-64 of its snapshot encoding. Replicas are equal iff
// (up to collisions) their hashes are. It costs a full serialisation.
func (f *FSM) Hash() uint64 {
	h := crc64.New(crc64Table)
	if err := f.writeSnapshot(bufio.NewWriterSize(h, 4096)); err != nil {
		panic(fmt.Sprintf("fsm: hashing cannot fail: %v", err)) // hash writers never fail
	}
	return h.Sum64()
}

// snapshotWriter writes frames, remembering the first error.
type snapshotWriter struct {
	w       *bufio.Writer
	payload []byte
	header  []byte
	err     error
	// txnResults says records carry their transaction part (version 3).
	txnResults bool
	// auth says sessions carry their owner and the auth frames follow the
	// nodes (versions 6 to 9).
	auth bool
	// times says node frames end with the node's times (versions 10 to 17).
	times bool
}

func (sw *snapshotWriter) write(b []byte) {
	if sw.err == nil {
		_, sw.err = sw.w.Write(b)
	}
}

// frame writes one frame whose payload encode appends to a reused buffer.
func (sw *snapshotWriter) frame(typ byte, encode func([]byte) []byte) {
	if sw.err != nil {
		return
	}
	sw.payload = encode(sw.payload[:0])
	sw.header = binary.AppendUvarint(append(sw.header[:0], typ), uint64(len(sw.payload)))
	crc := crc32.Update(crc32.Checksum(sw.header, castagnoli), castagnoli, sw.payload)
	sw.write(sw.header)
	sw.write(sw.payload)
	sw.write(binary.LittleEndian.AppendUint32(sw.header[:0], crc))
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendMember(b []byte, m command.Member) []byte {
	b = binary.AppendUvarint(b, m.ID)
	b = appendString(b, m.Name)
	b = appendString(b, m.PeerURL)
	b = appendString(b, m.ClientURL)
	if m.Learner {
		return append(b, 1)
	}
	return append(b, 0)
}

func appendSession(b []byte, s session, txnResults bool) []byte {
	b = binary.AppendUvarint(b, s.id)
	b = binary.AppendUvarint(b, s.timeoutMs)
	if s.dedup == nil {
		return append(b, 0, 0)
	}
	b = binary.AppendUvarint(b, s.dedup.highest)
	b = binary.AppendUvarint(b, uint64(len(s.dedup.records)))
	for _, r := range s.dedup.records {
		b = binary.AppendUvarint(b, r.seq)
		b = appendResult(b, r.result)
		if txnResults {
			b = appendTxnResult(b, r.result.Txn, r.result.Err != nil)
		}
	}
	return b
}

func appendResult(b []byte, r Result) []byte {
	var code, message string
	if e, ok := r.Err.(*api.Error); ok {
		code, message = string(e.Code), e.Message
	}
	b = appendString(b, code)
	b = appendString(b, message)
	b = appendString(b, r.Node.Path)
	b = binary.AppendUvarint(b, r.Node.Version)
	b = binary.AppendUvarint(b, r.Node.CreatedIndex)
	b = binary.AppendUvarint(b, r.Node.ModifiedIndex)
	b = binary.AppendUvarint(b, r.SessionID)
	return binary.AppendUvarint(b, r.TimeoutMs)
}

func appendNode(b []byte, previous string, e entry) []byte {
	shared := 0
	for shared < len(previous) && shared < len(e.path) && previous[shared] == e.path[shared] {
		shared++
	}
	b = binary.AppendUvarint(b, uint64(shared))
	b = appendString(b, e.path[shared:])
	b = binary.AppendUvarint(b, uint64(len(e.value)))
	b = append(b, e.value...)
	b = binary.AppendUvarint(b, e.version)
	b = binary.AppendUvarint(b, e.created)
	b = binary.AppendUvarint(b, e.modified)
	b = binary.AppendUvarint(b, e.owner)
	b = binary.AppendUvarint(b, e.sequence)
	return binary.AppendUvarint(b, uint64(e.children))
}

// snapshotFormat is the version a state is written in: 3 for a shard of a
// sharded cluster, 2 otherwise, each raised by 2 (to 5 or 4) when the
// exactly-once windows hold a transaction's result, all of them raised
// by 4 (to 6 through 9) when the state holds auth state, and all of those
// by 8 (to 10 through 17) when its nodes hold times.
func snapshotFormat(sharded, txnResults, withAuth, times bool) byte {
	version := byte(snapshotVersion)
	if sharded {
		version = snapshotVersion3
	}
	if txnResults {
		version += snapshotVersionTxn - snapshotVersion
	}
	if withAuth {
		version += snapshotAuthRaise
	}
	if times {
		version += snapshotTimesRaise
	}
	return version
}

// appendNodeTimes appends the times part of a node frame (versions 10 to
// 17).
func appendNodeTimes(b []byte, e entry) []byte {
	b = binary.AppendUvarint(b, e.ctime)
	b = binary.AppendUvarint(b, e.mtime)
	b = binary.AppendUvarint(b, e.cversion)
	return binary.AppendUvarint(b, e.pzxid)
}

// hasTimes reports whether e holds any of the times of versions 10 to 17.
func (e entry) hasTimes() bool {
	return e.ctime|e.mtime|e.cversion|e.pzxid != 0
}

// holdsTimes reports whether a node holds times, so the state is written in
// versions 10 to 17. It stops at the first such node: in a state that has
// any, the root (whose cversion counts its children) usually is one.
func (f *FSM) holdsTimes() bool {
	found := false
	f.nodes.Scan(func(e entry) bool {
		found = e.hasTimes()
		return !found
	})
	return found
}
