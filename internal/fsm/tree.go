package fsm

import (
	"strconv"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/command"
)

// entry is one node of the tree as stored in the B-tree. It is small (the
// B-tree passes items by value to every comparison) and points to the node's
// data, which is immutable once in the tree: a Clone shares it, so a change
// stores a modified copy (see edit).
type entry struct {
	path string
	*nodeData
}

// nodeData is the part of a node that its path does not give.
type nodeData struct {
	value    []byte
	version  uint64
	created  uint64
	modified uint64
	owner    uint64 // the session owning this ephemeral node; 0 = persistent
	sequence uint64 // the next suffix of a sequential child
	children int    // number of direct children (in this shard)
	// closing is the closing mark of a directory whose children live in
	// another shard: the index of the OpDirMark of a delete in progress;
	// 0 if none.
	closing uint64
	// ctime and mtime are the wall-clock times, in milliseconds since the
	// Unix epoch, of the commands that created the node and last wrote its
	// value: their TimeMs, which the log carries (0: that command had
	// none). Never a reading of a clock at apply.
	ctime, mtime uint64
	// cversion counts the creates and deletes of the node's children here
	// (ZooKeeper's cversion). pzxid is the index of the latest of them, or
	// the index that created the node if there was none since (ZooKeeper's
	// pzxid); 0 in a node read from a snapshot of a binary that did not
	// keep it, until a child changes.
	cversion, pzxid uint64
	// writer is the node generation of the FSM that made this data by an
	// edit and may modify it in place (see FSM.edit); 0 for data made
	// otherwise (a create, a snapshot's load), which the first edit copies.
	writer uint64
}

// childrenChanged records in data a create or a delete of one of its
// children at index, if the command being applied is stamped (see
// applyingTime).
func (f *FSM) childrenChanged(data *nodeData, index uint64) {
	if f.applyingTime == 0 {
		return
	}
	data.cversion++
	data.pzxid = index
}

// newNodeData is the data of a node that cmd creates at index, with no
// children yet. A command without TimeMs (an entry of a binary that kept
// no times) records none of them, so old logs replay to the state they
// made.
func newNodeData(index uint64, cmd *command.Command) *nodeData {
	data := &nodeData{version: 1, created: index, modified: index}
	if cmd.TimeMs != 0 {
		data.ctime, data.mtime, data.pzxid = cmd.TimeMs, cmd.TimeMs, index
	}
	return data
}

// edit returns e's data for modification; the caller then stores e with
// f.storeNode. Data that only f's tree holds (made by an edit since f's
// last Clone or transaction undo copy: its writer is f.nodeGen) is
// modified in place; any other is first copied, and the copy becomes e's,
// so a clone or an undo copy sharing the old data never sees the change.
func (f *FSM) edit(e *entry) *nodeData {
	if e.nodeData.writer == f.nodeGen {
		return e.nodeData
	}
	copied := *e.nodeData
	copied.writer = f.nodeGen
	e.nodeData = &copied
	return &copied
}

func (e *entry) meta() NodeMeta {
	return NodeMeta{Path: e.path, Version: e.version, CreatedIndex: e.created, ModifiedIndex: e.modified}
}

// pathLess orders paths as a pre-order walk of the tree with siblings sorted
// by name: it compares bytes, except that '/' sorts below every other byte.
// A subtree is then one contiguous run (the node, then every path with its
// prefix plus "/"), and a parent always comes before its children.
func pathLess(a, b string) bool {
	n := min(len(a), len(b))
	// Skip the shared prefix eight bytes at a time: in a namespace of deep
	// paths it is most of each comparison of a B-tree search.
	i := 0
	for ; i+8 <= n && load64(a[i:i+8]) == load64(b[i:i+8]); i += 8 {
	}
	for ; i < n; i++ {
		x, y := a[i], b[i]
		if x == y {
			continue
		}
		if x == '/' {
			return true
		}
		if y == '/' {
			return false
		}
		return x < y
	}
	return len(a) < len(b)
}

// load64 returns the first eight bytes of s as one word (the compiler
// makes it one load).
func load64(s string) uint64 {
	_ = s[7]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

func entryLess(a, b entry) bool { return pathLess(a.path, b.path) }

// afterSubtree returns a key that sorts after every path of p's subtree and
// at or before p's next sibling: valid paths contain no NUL byte, and '/'
// sorts below it.
func afterSubtree(p string) string { return p + "\x00" }

// childPrefix returns the prefix shared by the paths of p's descendants.
func childPrefix(p string) string {
	if p == "/" {
		return "/"
	}
	return p + "/"
}

// sequentialPath appends the zero-padded sequence number to p.
func sequentialPath(p string, sequence uint64) string {
	digits := strconv.FormatUint(sequence, 10)
	buf := make([]byte, 0, len(p)+max(api.SequenceDigits, len(digits)))
	buf = append(buf, p...)
	for i := len(digits); i < api.SequenceDigits; i++ {
		buf = append(buf, '0')
	}
	buf = append(buf, digits...)
	return string(buf)
}

// ownerKey is an entry of the owner index: the ephemeral node path owned by
// a session.
type ownerKey struct {
	owner uint64
	path  string
}

func ownerLess(a, b ownerKey) bool {
	if a.owner != b.owner {
		return a.owner < b.owner
	}
	return a.path < b.path
}

// uvarintLen returns the length of v's minimal varint encoding.
func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}
