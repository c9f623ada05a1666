package fsm

import (
	"fmt"
	"sync/atomic"

	"github.com/tidwall/btree"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/command"
)

// FSM is the replicated state machine of one consensus group. It is not safe
// for concurrent use; see the package documentation.
type FSM struct {
	// nodes holds the tree in pathLess order. Invariant: "/" is present.
	nodes *btree.BTreeG[entry]
	// sessions holds the live sessions by id.
	sessions *btree.BTreeG[session]
	// owners indexes ephemeral nodes by owner session so that closing a
	// session costs O(its ephemeral nodes). Invariant: (s, p) is present iff
	// node p exists with owner s.
	owners *btree.BTreeG[ownerKey]
	// members is sorted by ID. It is replaced on change, never modified in
	// place, so clones may share it.
	members []command.Member
	// removed holds, sorted by ID, every member whose removal was applied
	// and that was not added again since, as it was when removed (or with
	// its ID only if it was no member then). Raft must never see a removed
	// id again, and member ids derive from names, so the server refuses
	// these ids and names for good. It grows by one entry per removed member
	// and is never trimmed: removals are rare. Like members, it is replaced
	// on change, never modified in place. Invariant: no ID is in both.
	removed []command.Member
	// applied is the index of the last entry applied or advanced over.
	applied uint64
	// generation marks the dedup tables this FSM may modify in place: a
	// table made under another generation is shared with a clone and is
	// copied before it is modified.
	generation uint64
}

// generations hands out generation numbers, unique in the process.
var generations atomic.Uint64

func newGeneration() uint64 { return generations.Add(1) }

var treeOptions = btree.Options{NoLocks: true}

// New returns an empty state machine: the root node only, applied index 0.
func New() *FSM {
	f := &FSM{
		nodes:      btree.NewBTreeGOptions(entryLess, treeOptions),
		sessions:   btree.NewBTreeGOptions(sessionLess, treeOptions),
		owners:     btree.NewBTreeGOptions(ownerLess, treeOptions),
		generation: newGeneration(),
	}
	f.nodes.Set(entry{path: "/", nodeData: &nodeData{}})
	return f
}

// Result is the outcome of one applied command.
type Result struct {
	// Err is nil or an *api.Error: a deterministic refusal. Treat it as
	// read-only.
	Err error
	// Node is the node written (OpPut, with the final sequential path) or
	// deleted (OpDelete).
	Node NodeMeta
	// SessionID and TimeoutMs describe the session made by OpSessionCreate:
	// its id is the command's SessionID (the create entry's index in old
	// entries without one).
	SessionID uint64
	TimeoutMs uint64
	// Txn is the outcome of an OpTxn (nil for other commands, and for a
	// transaction refused as a whole: an expired session, a request_seq
	// below the window, no operation).
	Txn *TxnResult
}

// NodeMeta is the metadata of a node.
type NodeMeta struct {
	Path          string
	Version       uint64 // 1 on create, +1 on every write
	CreatedIndex  uint64
	ModifiedIndex uint64
}

// Node is a node as read by Get.
type Node struct {
	NodeMeta
	// Value is shared with the state machine: callers must not modify it.
	Value         []byte
	Owner         uint64 // the owning session of an ephemeral node; 0 = persistent
	ChildrenCount int
}

// Apply applies cmd, committed at the raft log index index, and returns its
// result and the watch events it causes, in a fixed order, each carrying
// index. It also advances Applied to index. Called by the server's apply
// loop only. index must exceed Applied(); anything else is a broken
// invariant of the caller and panics. cmd.Value is copied, never retained.
func (f *FSM) Apply(index uint64, cmd *command.Command) (Result, []Event) {
	if index <= f.applied {
		panic(fmt.Sprintf("fsm: apply of index %d after index %d", index, f.applied))
	}
	f.applied = index
	switch cmd.Op {
	case command.OpNoop:
		return Result{}, nil
	case command.OpPut, command.OpDelete, command.OpEnqueue, command.OpTxn:
		return f.applyWrite(index, cmd)
	case command.OpSessionCreate:
		return f.createSession(index, cmd), nil
	case command.OpSessionClose:
		return f.closeSession(index, cmd.SessionID)
	case command.OpSessionExpire:
		return f.expireSessions(index, cmd.Sessions)
	case command.OpMemberSet:
		f.setMember(cmd.Member)
		return Result{}, nil
	case command.OpMemberRemove:
		f.removeMember(cmd.Member.ID)
		return Result{}, nil
	default:
		return refuse(api.Errorf(api.CodeInvalidArgument, "unknown operation %v", cmd.Op))
	}
}

// Advance moves the applied index to index for a log entry that carries no
// command (an empty entry, a configuration change). An index at or below
// Applied() is ignored.
func (f *FSM) Advance(index uint64) {
	if index > f.applied {
		f.applied = index
	}
}

// Applied returns the index of the last entry applied.
func (f *FSM) Applied() uint64 { return f.applied }

// Clone returns a copy of f in O(1): both share their B-tree nodes and copy
// them on write. The clone may then be read or serialised on another
// goroutine while f keeps applying; Clone itself must be called where Apply
// could be (it updates f).
func (f *FSM) Clone() *FSM {
	clone := &FSM{
		nodes:      f.nodes.Copy(),
		sessions:   f.sessions.Copy(),
		owners:     f.owners.Copy(),
		members:    f.members,
		removed:    f.removed,
		applied:    f.applied,
		generation: newGeneration(),
	}
	f.generation = newGeneration()
	return clone
}

func refuse(err *api.Error) (Result, []Event) {
	return Result{Err: err}, nil
}

// applyWrite applies OpPut, OpDelete, OpEnqueue or OpTxn, on behalf of a session if
// cmd.SessionID is set, exactly once if cmd.RequestSeq is set too.
func (f *FSM) applyWrite(index uint64, cmd *command.Command) (Result, []Event) {
	exactlyOnce := cmd.SessionID != 0 && cmd.RequestSeq != 0
	if cmd.SessionID != 0 {
		s, ok := f.sessions.Get(session{id: cmd.SessionID})
		if !ok {
			return refuse(api.Errorf(api.CodeSessionExpired, "session %s is expired or unknown", api.FormatID(cmd.SessionID)))
		}
		if exactlyOnce {
			if result, seen, err := s.dedup.lookup(cmd.RequestSeq); err != nil {
				return refuse(err)
			} else if seen {
				return result, nil
			}
		}
	}
	var result Result
	var events []Event
	switch cmd.Op {
	case command.OpPut:
		result, events = f.put(index, cmd)
	case command.OpEnqueue:
		result, events = f.enqueue(index, cmd)
	case command.OpTxn:
		result, events = f.txn(index, cmd)
	default:
		result, events = f.delete(index, cmd)
	}
	if exactlyOnce {
		f.remember(cmd.SessionID, cmd.RequestSeq, result)
	}
	return result, events
}
