package fsm

import (
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/tidwall/btree"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/command"
	"github.com/latch-io/latch/internal/placement"
)

// FSM is the replicated state machine of one consensus group. It is not safe
// for concurrent use; see the package documentation.
type FSM struct {
	// nodes holds the tree in pathLess order. Invariant: "/" is present.
	nodes *btree.BTreeG[entry]
	// cache remembers recently stored entries of nodes for point lookups
	// (nodecache.go); nil until the first store, and in every clone.
	cache *nodeCache
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
	// nodeGen marks the node data this FSM may modify in place (see edit):
	// renewed whenever something else starts sharing the tree's data (a
	// Clone, a transaction's undo copy).
	nodeGen uint64
	// shard is which shard of the cluster this state machine is (see
	// shard.go); fixed at construction, recorded in snapshots.
	shard shardID
	// The sharding state (shard.go, directory.go, fence.go). All of it is
	// empty, and the fences 0, when the cluster has one shard.
	//
	// dirs holds the directory records of this shard, by path: one per
	// directory P whose children live here (ChildShard(P)) while P's own
	// record lives in another shard.
	dirs *btree.BTreeG[dirRecord]
	// ending holds, in shard 0 only, the sessions ended whose cleanup is
	// not yet confirmed in every other shard, by id.
	ending *btree.BTreeG[endingSession]
	// dirFence is the index of the latest OpDirClose applied.
	dirFence uint64
	// sessionFence is the index of the latest OpSessionsEnded applied
	// (shards other than 0).
	sessionFence uint64
	// auth is the auth state (auth.go): users, roles, tokens, the enabled
	// flag. Only the meta group's (shard 0) is used by the server, but for
	// its quotas, which every shard holds (quota.go).
	auth authState
	// quota holds the usage of every quota here and, with several shards,
	// this shard's allotments and transfers (quota.go, quota_ledger.go).
	quota quotaState
	// quotaShort lists the quotas short of allotment for the write being
	// applied (sharded only): not state, reset by every write.
	quotaShort []QuotaShortfall
	// applyingTime is the TimeMs of the command Apply is applying (0: an
	// entry of a binary that kept no times, which then changes no node's
	// times, cversion or pzxid). Not state of its own: set from the
	// command by every Apply.
	applyingTime uint64
	// pastAuth holds the auth states the latest auth changes replaced,
	// oldest first, at most maxPastAuth (PermittedAt): the watch registry
	// asks what a user could read at the index of each event of a batch of
	// applied entries, which may hold auth changes between its events. It is
	// no part of the replicated state: clones and snapshots leave it out.
	pastAuth []pastAuthState
}

// generations hands out generation numbers, unique in the process.
var generations atomic.Uint64

func newGeneration() uint64 { return generations.Add(1) }

var treeOptions = btree.Options{NoLocks: true}

// New returns an empty state machine of a cluster with one shard: the root
// node only, applied index 0.
func New() *FSM { return newShard(unsharded) }

// NewShard returns the empty state machine of shard shard of a cluster with
// shards shards (see placement). Every replica of the shard must be built
// with the same pair. NewShard(0, 1) is New().
func NewShard(shard, shards int) (*FSM, error) {
	id, err := newShardID(shard, shards)
	if err != nil {
		return nil, err
	}
	return newShard(id), nil
}

func newShard(id shardID) *FSM {
	f := &FSM{
		nodes:      btree.NewBTreeGOptions(entryLess, treeOptions),
		sessions:   btree.NewBTreeGOptions(sessionLess, treeOptions),
		owners:     btree.NewBTreeGOptions(ownerLess, treeOptions),
		dirs:       btree.NewBTreeGOptions(dirRecordLess, treeOptions),
		ending:     btree.NewBTreeGOptions(endingLess, treeOptions),
		generation: newGeneration(),
		nodeGen:    newGeneration(),
		shard:      id,
		auth:       newAuthState(),
		quota:      newQuotaState(),
	}
	f.storeNode(entry{path: "/", nodeData: &nodeData{}})
	return f
}

// placementMap returns the placement of f's cluster.
func (f *FSM) placementMap() placement.Map { return f.shard.placement }

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
	// Redo, with Err, says that the server must take another protocol step
	// and propose again (see Redo); Err then has code unavailable (but for
	// RedoQuotaRoom: quota_exceeded, the answer if no room is found), so a
	// refusal the server does not handle still reads as retryable.
	Redo Redo
	// Mark is the closing mark OpDirMark made (its index); Node then holds
	// the marked directory, whose CreatedIndex is its incarnation.
	Mark uint64
	// Txn is the outcome of an OpTxn (nil for other commands, and for a
	// transaction refused as a whole: an expired session, a request_seq
	// below the window, no operation).
	Txn *TxnResult
	// QuotaShort, with Redo RedoQuotaRoom, lists the quotas whose
	// allotment in this shard the refused write needed more of.
	QuotaShort []QuotaShortfall
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
	// CreatedAtMs and ModifiedAtMs are the wall-clock times (milliseconds
	// since the Unix epoch) the log recorded for the node's create and its
	// latest write (command.Command.TimeMs; 0 if not recorded).
	CreatedAtMs, ModifiedAtMs uint64
	// ChildrenVersion counts the creates and deletes of the node's children
	// in this shard; ChildrenModifiedIndex is the index of the latest, or
	// the node's CreatedIndex if none (0: not recorded, see nodeData).
	ChildrenVersion, ChildrenModifiedIndex uint64
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
	f.applyingTime = cmd.TimeMs
	switch cmd.Op {
	case command.OpNoop:
		return Result{}, nil
	case command.OpPut, command.OpDelete, command.OpEnqueue, command.OpTxn:
		return f.applyWrite(index, cmd)
	case command.OpSessionCreate, command.OpSessionClose, command.OpSessionExpire:
		return f.applySession(index, cmd)
	case command.OpMemberSet, command.OpMemberRemove:
		return f.applyMember(cmd)
	case command.OpSessionsEnded:
		return f.sessionsEnded(index, cmd.Sessions)
	case command.OpSessionsCleaned:
		return f.sessionsCleaned(cmd.Sessions)
	case command.OpDirMark:
		return f.markClosing(index, cmd)
	case command.OpDirUnmark:
		return f.unmarkClosing(cmd)
	case command.OpDirClose:
		return f.closeDirectory(index, cmd)
	case command.OpDirDelete:
		return f.deleteClosed(index, cmd)
	case command.OpAuth:
		if !quotaKind(cmd.Auth.Kind) {
			f.rememberAuth(index) // quotas change no permission
		}
		return f.applyAuth(index, cmd)
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
		nodes:        f.nodes.Copy(),
		sessions:     f.sessions.Copy(),
		owners:       f.owners.Copy(),
		members:      f.members,
		removed:      f.removed,
		applied:      f.applied,
		generation:   newGeneration(),
		nodeGen:      newGeneration(),
		shard:        f.shard,
		dirs:         f.dirs.Copy(),
		ending:       f.ending.Copy(),
		dirFence:     f.dirFence,
		sessionFence: f.sessionFence,
		auth:         f.auth.clone(),
		quota:        f.quota.clone(),
	}
	f.generation = newGeneration()
	f.nodeGen = newGeneration()
	return clone
}

func refuse(err *api.Error) (Result, []Event) {
	return Result{Err: err}, nil
}

// applyWrite applies OpPut, OpDelete, OpEnqueue or OpTxn, on behalf of a session if
// cmd.SessionID is set, exactly once if cmd.RequestSeq is set too.
func (f *FSM) applyWrite(index uint64, cmd *command.Command) (Result, []Event) {
	exactlyOnce := cmd.SessionID != 0 && cmd.RequestSeq != 0
	if ordered(cmd) && cmd.SessionID == 0 {
		return refuse(api.Errorf(api.CodeInvalidArgument, "a write with a stream tag needs a session"))
	}
	if cmd.SessionID != 0 {
		s, ok, refusal := f.writingSession(cmd)
		if refusal != nil {
			return *refusal, nil
		}
		if !ok {
			return refuse(api.Errorf(api.CodeSessionExpired, "session %s is expired or unknown", api.FormatID(cmd.SessionID)))
		}
		if ordered(cmd) {
			if err := s.stream.admits(cmd); err != nil {
				f.dropIdleSession(cmd.SessionID)
				return refuse(err)
			}
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
	f.quotaShort = f.quotaShort[:0]
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
	if len(f.quotaShort) > 0 && result.Err != nil && result.Redo == RedoNone {
		// A shard's allotment, not the quota, refused it: the server moves
		// room from other shards and proposes again.
		result.Redo, result.QuotaShort = RedoQuotaRoom, slices.Clone(f.quotaShort)
	}
	if result.Redo != RedoNone {
		f.dropIdleSession(cmd.SessionID)
		return result, nil // not remembered: the retry must apply
	}
	if exactlyOnce {
		f.remember(cmd.SessionID, cmd.RequestSeq, result)
	}
	if ordered(cmd) && cmd.SessionID != 0 {
		f.advanceStream(cmd)
	}
	f.dropIdleSession(cmd.SessionID)
	return result, events
}
