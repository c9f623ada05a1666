package fsm

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/command"
	"github.com/latch-io/latch/internal/placement"
)

// ReadSnapshot reads a snapshot written by WriteSnapshot of the state
// machine of a cluster with one shard (format version 2, or 1: no removed
// members) and returns the state it holds. It checks every frame's checksum
// and every invariant of the state (order, parents, children counts,
// owners, no removed member a member), so a corrupt input is an error
// wrapping ErrCorruptSnapshot and naming the byte offset, never a panic. A
// snapshot of a shard of a sharded cluster is refused (ErrWrongShard).
// Reading is buffered: it may consume bytes of r past the snapshot's end.
func ReadSnapshot(r io.Reader) (*FSM, error) {
	return readSnapshot(r, unsharded)
}

// ReadShardSnapshot is ReadSnapshot for shard shard of a cluster of shards
// shards: the snapshot must be of that shard (format version 3, or 2 or 1
// for shard 0 of 1); a snapshot of another shard or shard count is refused
// with an error wrapping ErrWrongShard.
func ReadShardSnapshot(r io.Reader, shard, shards int) (*FSM, error) {
	want, err := newShardID(shard, shards)
	if err != nil {
		return nil, err
	}
	return readSnapshot(r, want)
}

// ErrWrongShard is wrapped by the error of a snapshot read for a shard it
// is not of.
var ErrWrongShard = errors.New("fsm: snapshot of another shard")

func readSnapshot(r io.Reader, want shardID) (*FSM, error) {
	sr := &snapshotReader{r: bufio.NewReaderSize(r, 256<<10), want: want}
	f, err := sr.read()
	if err != nil {
		return nil, err
	}
	return f, nil
}

// snapshotReader reads frames, tracking the offset of every byte.
type snapshotReader struct {
	r       *bufio.Reader
	offset  int64 // bytes consumed so far
	payload []byte
	want    shardID // the shard the snapshot must be of
	version byte
	// txnResults says records carry their transaction part (versions 4 and 5).
	txnResults bool
	// auth says the auth frames follow the nodes (versions 6 to 9).
	auth bool
	// times says node frames end with the node's times (versions 10 to
	// 17); sawTimes that a node read so far holds any.
	times, sawTimes bool
	// ledger says the quota ledger follows the auth frames (versions 19 to
	// 33).
	ledger bool
	// streams says session frames end with their stream position
	// (versions 34 to 65).
	streams bool
}

func corruptf(offset int64, format string, args ...any) error {
	return fmt.Errorf("%w: offset %d: %s", ErrCorruptSnapshot, offset, fmt.Sprintf(format, args...))
}

// readFull reads exactly n bytes into buf (grown as needed).
func (sr *snapshotReader) readFull(buf []byte, n int, what string) ([]byte, error) {
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	got, err := io.ReadFull(sr.r, buf)
	sr.offset += int64(got)
	switch {
	case err == nil:
		return buf, nil
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return nil, corruptf(sr.offset, "truncated in %s", what)
	default:
		return nil, fmt.Errorf("fsm: read snapshot: offset %d: %w", sr.offset, err)
	}
}

// frame reads the next frame, which must be of type want, and returns a
// decoder over its payload (valid until the next call).
func (sr *snapshotReader) frame(want byte) (*payloadDecoder, error) {
	start := sr.offset
	header := make([]byte, 0, binary.MaxVarintLen64+1)
	for len(header) < cap(header) {
		b, err := sr.readFull(nil, 1, "frame header")
		if err != nil {
			return nil, err
		}
		header = append(header, b[0])
		if len(header) > 1 && b[0] < 0x80 {
			break
		}
	}
	length, n := binary.Uvarint(header[1:])
	if n <= 0 || n != len(header)-1 || n != uvarintLen(length) {
		return nil, corruptf(start+1, "bad frame length")
	}
	if length > maxFramePayload {
		return nil, corruptf(start+1, "frame length %d over the limit of %d", length, maxFramePayload)
	}
	payload, err := sr.readFull(sr.payload, int(length), "frame payload")
	if err != nil {
		return nil, err
	}
	sr.payload = payload
	sum, err := sr.readFull(nil, 4, "frame checksum")
	if err != nil {
		return nil, err
	}
	crc := crc32.Update(crc32.Checksum(header, castagnoli), castagnoli, payload)
	if binary.LittleEndian.Uint32(sum) != crc {
		return nil, corruptf(start, "checksum mismatch in the frame of %d bytes", sr.offset-start)
	}
	if header[0] != want {
		return nil, corruptf(start, "frame of type %d where type %d belongs", header[0], want)
	}
	return &payloadDecoder{data: payload, base: start + int64(len(header))}, nil
}

func (sr *snapshotReader) read() (*FSM, error) {
	magic, err := sr.readFull(nil, len(snapshotMagic)+1, "magic")
	if err != nil {
		return nil, err
	}
	if string(magic[:len(snapshotMagic)]) != snapshotMagic {
		return nil, corruptf(0, "not a latch state machine snapshot")
	}
	sr.version = magic[len(snapshotMagic)]
	if sr.version >= snapshotVersion+snapshotStreamsRaise && sr.version <= snapshotVersionMaxNoStreams+snapshotStreamsRaise {
		sr.version -= snapshotStreamsRaise
		sr.streams = true
	}
	if sr.version > snapshotVersionMax && sr.version <= snapshotVersionMax+snapshotLedgerRaise && sr.version%2 == 1 {
		sr.version -= snapshotLedgerRaise
		sr.ledger = true
	}
	if sr.version >= snapshotVersion+snapshotTimesRaise && sr.version <= snapshotVersionMax {
		sr.version -= snapshotTimesRaise
		sr.times = true
	}
	if sr.version > snapshotVersionShardTxn && sr.version <= snapshotVersionShardTxn+snapshotAuthRaise {
		sr.version -= snapshotAuthRaise
		sr.auth = true
	}
	switch sr.version {
	case snapshotVersion, snapshotVersion1, snapshotVersion3, snapshotVersionTxn, snapshotVersionShardTxn:
	default:
		return nil, corruptf(int64(len(snapshotMagic)), "unknown snapshot format version %d", sr.version)
	}
	sr.txnResults = sr.version == snapshotVersionTxn || sr.version == snapshotVersionShardTxn
	f, counts, err := sr.readHeader()
	if err != nil {
		return nil, err
	}
	if f.members, err = sr.readMembers(frameMember, counts.members, nil); err != nil {
		return nil, err
	}
	isMember := func(id uint64) bool { _, ok := f.Member(id); return ok }
	if f.removed, err = sr.readMembers(frameRemoved, counts.removed, isMember); err != nil {
		return nil, err
	}
	if err := sr.readSessions(f, counts.sessions); err != nil {
		return nil, err
	}
	if sr.streams && !f.holdsStreams() {
		// Only a state with them is written in versions 34 to 65: the
		// encoding of a state is unique.
		return nil, corruptf(int64(len(snapshotMagic)), "format version %d but no session holds a stream position", magic[len(snapshotMagic)])
	}
	if sr.txnResults && !f.holdsTxnResults() {
		// Only a state with them is written in version 4 or 5: the encoding
		// of a state is unique.
		return nil, corruptf(int64(len(snapshotMagic)), "format version %d but no transaction result is remembered", sr.version)
	}
	if err := sr.readEnding(f, counts.ending); err != nil {
		return nil, err
	}
	if err := sr.readDirectories(f, counts.directories); err != nil {
		return nil, err
	}
	if f.shard.sharded() {
		err = sr.readShardNodes(f, counts.nodes)
	} else {
		err = sr.readNodes(f, counts.nodes)
	}
	if err != nil {
		return nil, err
	}
	if sr.times && !sr.sawTimes {
		// Only a state with them is written in versions 10 to 17: the
		// encoding of a state is unique.
		return nil, corruptf(sr.offset, "format version %d but no node holds times", sr.version+snapshotTimesRaise)
	}
	if sr.auth {
		if err := sr.readAuth(f); err != nil {
			return nil, err
		}
	}
	if err := sr.readQuotaLedger(f); err != nil {
		return nil, err
	}
	f.recountQuotas()
	d, err := sr.frame(frameEnd)
	if err != nil {
		return nil, err
	}
	return f, d.finish()
}

// frameCounts are the numbers of frames of each kind a header announces.
type frameCounts struct {
	members, removed, sessions, ending, directories, nodes uint64
}

// readHeader reads the header frame and returns the empty state machine of
// the shard it names, with its applied index and fences, and its counts.
// Version 1 has no removed members; versions 1 and 2 are shard 0 of 1.
func (sr *snapshotReader) readHeader() (*FSM, frameCounts, error) {
	start := sr.offset
	d, err := sr.frame(frameHeader)
	if err != nil {
		return nil, frameCounts{}, err
	}
	var c frameCounts
	applied := d.uvarint()
	id := unsharded
	var dirFence, sessionFence uint64
	if sr.sharded() {
		id = d.shardID()
		dirFence, sessionFence = d.uvarint(), d.uvarint()
	}
	c.members = d.uvarint()
	if sr.version != snapshotVersion1 {
		c.removed = d.uvarint()
	}
	c.sessions = d.uvarint()
	if sr.sharded() {
		c.ending, c.directories = d.uvarint(), d.uvarint()
	}
	c.nodes = d.uvarint()
	switch {
	case d.err != nil:
	case dirFence > applied || sessionFence > applied:
		d.fail(d.base, "fences %d and %d beyond the applied index %d", dirFence, sessionFence, applied)
	case id.meta() && sessionFence != 0:
		d.fail(d.base, "shard 0 has a session fence")
	case !id.meta() && c.ending != 0:
		d.fail(d.base, "%s has ending sessions", id)
	}
	if err := d.finish(); err != nil {
		return nil, frameCounts{}, err
	}
	if id != sr.want {
		return nil, frameCounts{}, fmt.Errorf("%w: offset %d: the snapshot is of %s, not %s", ErrWrongShard, start, id, sr.want)
	}
	f := newShard(id)
	f.applied, f.dirFence, f.sessionFence = applied, dirFence, sessionFence
	return f, c, nil
}

// shardID decodes the shard and shard count of a version-3 header: a
// sharded cluster's (a cluster with one shard writes version 2).
func (d *payloadDecoder) shardID() shardID {
	at := d.at()
	shard, shards := d.uvarint(), d.uvarint()
	if d.err != nil {
		return unsharded
	}
	if shards < 2 || shards > placement.MaxShards || shard >= shards {
		d.fail(at, "shard %d of %d: a version-3 snapshot is of a shard of 2 to %d", shard, shards, placement.MaxShards)
		return unsharded
	}
	return mustShardID(int(shard), int(shards))
}

// readMembers reads count member frames of type typ (frameMember or
// frameRemoved), which must be sorted by id and, if clash is set, have no id
// for which it is true.
func (sr *snapshotReader) readMembers(typ byte, count uint64, clash func(id uint64) bool) ([]command.Member, error) {
	var members []command.Member
	for i := uint64(0); i < count; i++ {
		d, err := sr.frame(typ)
		if err != nil {
			return nil, err
		}
		m := d.member()
		if n := len(members); d.err == nil && n > 0 && members[n-1].ID >= m.ID {
			d.fail(d.base, "member %d out of order", m.ID)
		}
		if d.err == nil && clash != nil && clash(m.ID) {
			d.fail(d.base, "removed member %d is also a member", m.ID)
		}
		if err := d.finish(); err != nil {
			return nil, err
		}
		members = append(members, m)
	}
	return members, nil
}

func (sr *snapshotReader) readSessions(f *FSM, count uint64) error {
	var previous uint64
	for i := uint64(0); i < count; i++ {
		d, err := sr.frame(frameSession)
		if err != nil {
			return err
		}
		s := session{id: d.uvarint(), timeoutMs: d.uvarint()}
		if d.err == nil && s.id <= previous {
			d.fail(d.base, "session %d out of order", s.id)
		}
		s.dedup = d.dedupTable(f.generation, sr.txnResults)
		if sr.auth {
			s.owner = d.string()
			if s.owner != "" {
				checkSortedName(d, "user", "", s.owner)
			}
		}
		if sr.streams {
			s.stream = d.streamPos()
		}
		if err := d.finish(); err != nil {
			return err
		}
		f.sessions.Load(s)
		previous = s.id
	}
	return nil
}

// openNode is a node of the pre-order walk whose children are still being
// read.
type openNode struct {
	path     string
	children int // the count its frame declared
	seen     int // children read so far
	offset   int64
}

func (sr *snapshotReader) readNodes(f *FSM, count uint64) error {
	if count == 0 {
		return corruptf(sr.offset, "no root node")
	}
	f.nodes.Clear()
	f.dropNodeCache()
	var stack []openNode
	ephemerals := make(map[uint64]int)
	previous := ""
	for i := uint64(0); i < count; i++ {
		start := sr.offset
		d, err := sr.frame(frameNode)
		if err != nil {
			return err
		}
		e := d.node(previous)
		sr.nodeTimes(d, e, f.applied)
		if err := d.finish(); err != nil {
			return err
		}
		if stack, err = checkNodePlace(stack, previous, e, start); err != nil {
			return err
		}
		if e.owner != 0 {
			if _, ok := f.sessions.Get(session{id: e.owner}); !ok {
				return corruptf(start, "node %q is owned by unknown session %d", e.path, e.owner)
			}
			ephemerals[e.owner]++
			f.owners.Set(ownerKey{owner: e.owner, path: e.path})
		}
		f.nodes.Load(e)
		stack = append(stack, openNode{path: e.path, children: e.children, offset: start})
		previous = e.path
	}
	if _, err := closeOpenNodes(stack, ""); err != nil {
		return err
	}
	for id, n := range ephemerals { // order is irrelevant: each sets one session
		s, _ := f.sessions.Get(session{id: id})
		s.ephemerals = n
		f.sessions.Set(s)
	}
	return nil
}

// checkNodePlace checks that e may follow previous in a pre-order walk whose
// open ancestors are stack, and returns the stack with e's parent on top.
func checkNodePlace(stack []openNode, previous string, e entry, offset int64) ([]openNode, error) {
	if previous == "" {
		if e.path != "/" || e.owner != 0 {
			return nil, corruptf(offset, "first node %q is not the persistent root", e.path)
		}
		return stack, nil
	}
	if err := api.ValidatePath(e.path); err != nil {
		return nil, corruptf(offset, "node path: %v", err)
	}
	if !pathLess(previous, e.path) {
		return nil, corruptf(offset, "node %q does not sort after %q", e.path, previous)
	}
	if e.owner != 0 && e.children != 0 {
		return nil, corruptf(offset, "ephemeral node %q has %d children", e.path, e.children)
	}
	stack, err := closeOpenNodes(stack, api.Parent(e.path))
	if err != nil {
		return nil, err
	}
	if len(stack) == 0 {
		return nil, corruptf(offset, "node %q has no parent", e.path)
	}
	parent := &stack[len(stack)-1]
	parent.seen++
	return stack, nil
}

// closeOpenNodes pops the nodes above parent (all of them if parent is not
// open), checking that each had all its declared children.
func closeOpenNodes(stack []openNode, parent string) ([]openNode, error) {
	for len(stack) > 0 && stack[len(stack)-1].path != parent {
		top := stack[len(stack)-1]
		if top.seen != top.children {
			return nil, corruptf(top.offset, "node %q declares %d children but has %d", top.path, top.children, top.seen)
		}
		stack = stack[:len(stack)-1]
	}
	return stack, nil
}

// member decodes a member or removed member frame.
func (d *payloadDecoder) member() command.Member {
	m := command.Member{ID: d.uvarint(), Name: d.string(), PeerURL: d.string(), ClientURL: d.string()}
	learnerAt := d.at()
	switch d.byte() {
	case 0:
	case 1:
		m.Learner = true
	default:
		d.fail(learnerAt, "learner flag is not 0 or 1")
	}
	return m
}

// payloadDecoder decodes the fields of one frame payload, remembering the
// first error.
type payloadDecoder struct {
	data []byte
	pos  int
	base int64 // offset of data[0] in the snapshot
	err  error
}

func (d *payloadDecoder) at() int64 { return d.base + int64(d.pos) }

func (d *payloadDecoder) fail(offset int64, format string, args ...any) {
	if d.err == nil {
		d.err = corruptf(offset, format, args...)
	}
}

func (d *payloadDecoder) finish() error {
	if d.err == nil && d.pos != len(d.data) {
		d.fail(d.at(), "%d unexpected bytes at the end of a frame", len(d.data)-d.pos)
	}
	return d.err
}

func (d *payloadDecoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.data[d.pos:])
	if n <= 0 || n != uvarintLen(v) {
		d.fail(d.at(), "bad integer")
		return 0
	}
	d.pos += n
	return v
}

func (d *payloadDecoder) byte() byte {
	if d.err != nil {
		return 0
	}
	if d.pos >= len(d.data) {
		d.fail(d.at(), "frame truncated")
		return 0
	}
	d.pos++
	return d.data[d.pos-1]
}

// bytes returns a sub-slice of the payload (callers copy what they keep).
func (d *payloadDecoder) bytes() []byte {
	at := d.at()
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.data)-d.pos) {
		d.fail(at, "length %d exceeds the frame", n)
		return nil
	}
	b := d.data[d.pos : d.pos+int(n)]
	d.pos += int(n)
	return b
}

func (d *payloadDecoder) string() string { return string(d.bytes()) }

// streamPos decodes a session's stream position (versions 34 to 65): all
// zero, or an id, a floor and a seq none of which is zero.
func (d *payloadDecoder) streamPos() streamPos {
	at := d.at()
	pos := streamPos{id: d.uvarint(), floor: d.uvarint(), seq: d.uvarint()}
	if d.err == nil && pos != (streamPos{}) && (pos.id == 0 || pos.floor == 0 || pos.seq == 0) {
		d.fail(at, "stream position with a zero part (id %d, floor %d, seq %d)", pos.id, pos.floor, pos.seq)
	}
	return pos
}

func (d *payloadDecoder) dedupTable(generation uint64, txnResults bool) *dedupTable {
	at := d.at()
	t := &dedupTable{generation: generation, highest: d.uvarint()}
	count := d.uvarint()
	if d.err == nil && count > DedupWindow {
		d.fail(at, "%d remembered requests, over the window of %d", count, DedupWindow)
	}
	for i := uint64(0); i < count && d.err == nil; i++ {
		recordAt := d.at()
		seq := d.uvarint()
		result := d.result()
		if txnResults {
			result.Txn = d.txnResult(result.Err != nil)
		}
		switch {
		case d.err != nil:
		case seq < t.floor() || seq > t.highest:
			d.fail(recordAt, "request seq %d outside the window ending at %d", seq, t.highest)
		case len(t.records) > 0 && t.records[len(t.records)-1].seq >= seq:
			d.fail(recordAt, "request seq %d out of order", seq)
		}
		t.records = append(t.records, dedupRecord{seq: seq, result: result})
	}
	if d.err != nil || (t.highest == 0 && count == 0) {
		return nil
	}
	if count == 0 {
		d.fail(at, "request window ending at %d has no requests", t.highest)
	}
	return t
}

func (d *payloadDecoder) result() Result {
	at := d.at()
	code, message := d.string(), d.string()
	var r Result
	if code != "" {
		r.Err = &api.Error{Code: api.Code(code), Message: message}
	} else if message != "" {
		d.fail(at, "error message without a code")
	}
	r.Node = NodeMeta{Path: d.string(), Version: d.uvarint(), CreatedIndex: d.uvarint(), ModifiedIndex: d.uvarint()}
	r.SessionID = d.uvarint()
	r.TimeoutMs = d.uvarint()
	return r
}

// node decodes a node frame whose path shares a prefix with previous.
func (d *payloadDecoder) node(previous string) entry {
	at := d.at()
	shared := d.uvarint()
	suffix := d.bytes()
	if d.err == nil && shared > uint64(len(previous)) {
		d.fail(at, "shared prefix %d longer than the previous path", shared)
	}
	if d.err != nil {
		return entry{}
	}
	path := previous[:shared] + string(suffix)
	if len(suffix) > 0 && shared < uint64(len(previous)) && previous[shared] == suffix[0] {
		d.fail(at, "shared prefix %d is not the longest", shared)
	}
	e := entry{path: path, nodeData: &nodeData{value: cloneBytes(d.bytes())}}
	e.version, e.created, e.modified = d.uvarint(), d.uvarint(), d.uvarint()
	e.owner, e.sequence = d.uvarint(), d.uvarint()
	children := d.uvarint()
	if d.err == nil && children > uint64(maxChildren) {
		d.fail(at, "children count %d is impossible", children)
	}
	e.children = int(children)
	return e
}

// nodeTimes decodes the times part of a node frame into e, in versions 10
// to 17. A pzxid is an index of this log: none is past the applied index.
func (sr *snapshotReader) nodeTimes(d *payloadDecoder, e entry, applied uint64) {
	if !sr.times || d.err != nil {
		return
	}
	at := d.at()
	e.ctime, e.mtime, e.cversion, e.pzxid = d.uvarint(), d.uvarint(), d.uvarint(), d.uvarint()
	if d.err == nil && e.pzxid > applied {
		d.fail(at, "node %q: pzxid %d past the applied index %d", e.path, e.pzxid, applied)
	}
	sr.sawTimes = sr.sawTimes || e.hasTimes()
}

// maxChildren bounds a children count read from a snapshot.
const maxChildren = 1 << 40

// sharded says the snapshot is of a shard of a sharded cluster (versions 3
// and 5).
func (sr *snapshotReader) sharded() bool {
	return sr.version == snapshotVersion3 || sr.version == snapshotVersionShardTxn
}
