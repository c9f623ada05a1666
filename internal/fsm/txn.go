package fsm

import (
	"github.com/tidwall/btree"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/command"
)

// TxnResult is the outcome of an OpTxn. It is shared with the exactly-once
// window: treat it as read-only.
type TxnResult struct {
	// Ops holds one result per operation, in order, when the transaction
	// was applied (Result.Err is nil).
	Ops []TxnOpResult
	// Failed, when Result.Err is set, is the index of the operation whose
	// refusal (Result.Err) refused the whole transaction.
	Failed int
}

// TxnOpResult is the node an applied operation of a transaction left, as
// it was right after that operation (later operations of the same
// transaction may have changed it since): for a create, the node made
// (with its sequential name); for a set, the node written; for a delete,
// the node deleted, as it was; for a check, the node checked (its Path
// only, when it had to be absent).
type TxnOpResult struct {
	Node          NodeMeta
	Owner         uint64 // the owning session of an ephemeral node; 0 = persistent
	DataLength    int
	ChildrenCount int
	// CreatedAtMs, ChildrenVersion and ChildrenModifiedIndex are as Node's
	// (0 for a deleted node, and for a check of an absent one).
	CreatedAtMs, ChildrenVersion, ChildrenModifiedIndex uint64
}

// txn applies the operations of an OpTxn in order, all or nothing at index:
// each operation sees the effects of the ones before it; the first refusal
// restores the state as it was before the first operation and refuses the
// whole transaction with that operation's error and index, with no event.
// The session (if any) is live and the exactly-once window was checked by
// applyWrite.
//
// The undo is a copy-on-write copy (O(1)) of the five trees the
// operations may change (nodes, sessions for the ephemeral counts, owners,
// the quota counts, and, with several shards, the directory records whose
// children counts and sequence counters a create or delete moves), taken
// before the first operation that needs it (below) and put back on
// refusal. Operations never
// touch members, removed members, the applied index or a dedup table, so
// nothing else needs restoring.
//
// The copy is taken only when it can be needed, right before the first
// operation that changes the state and is not the last one: an operation
// refuses before it changes anything, as the same write outside a
// transaction does (TestRefusedWritesChangeNothing), and a check changes
// nothing. So one operation, or checks followed by one change (a
// ZooKeeper client's create, a check of the parent and the create; a
// delete at a version), takes none. The copy is O(1), but it makes the
// next change of each tree copy every node on its path (the trees are
// shared with the copy until then), which was most of the apply cost of
// those writes.
//
// A refusal keeps the refused operation's Redo (sharding's protocol
// steps: a fence passed, a directory to open), so the server takes the
// step, or explains why a transaction cannot, instead of answering 503.
func (f *FSM) txn(index uint64, cmd *command.Command) (Result, []Event) {
	if len(cmd.Ops) == 0 {
		return refuse(api.Errorf(api.CodeInvalidArgument, "a transaction needs at least one operation"))
	}
	var undo txnUndo
	out, results := newTxnResult(len(cmd.Ops))
	var events []Event
	for i := range cmd.Ops {
		op := &cmd.Ops[i]
		if !undo.taken() && op.Kind != command.TxnCheck && i < len(cmd.Ops)-1 {
			// A later operation may refuse once this one changed the
			// state; only checks, which change nothing, ran before it.
			undo = f.undoCopy()
		}
		result, opEvents, refusal := f.txnOp(index, cmd, op)
		if refusal.Err != nil {
			f.restore(undo)
			*out = TxnResult{Failed: i}
			return Result{Err: refusal.Err, Redo: refusal.Redo, Txn: out}, nil
		}
		results = append(results, result)
		if events == nil {
			events = opEvents // no copy for the first (often only) operation
		} else {
			events = append(events, opEvents...)
		}
	}
	if undo.taken() {
		f.untrackStores(false)
	}
	out.Ops = results
	return Result{Txn: out}, events
}

// newTxnResult returns an empty result of a transaction of n operations,
// and room for their results: for one operation (most of them: a
// ZooKeeper client's create, set or delete), both in one allocation.
func newTxnResult(n int) (*TxnResult, []TxnOpResult) {
	if n == 1 {
		one := new(struct {
			txn TxnResult
			ops [1]TxnOpResult
		})
		return &one.txn, one.ops[:0]
	}
	return new(TxnResult), make([]TxnOpResult, 0, n)
}

// txnUndo holds copy-on-write copies of the trees a transaction's
// operations may change; the zero value holds none.
type txnUndo struct {
	nodes    *btree.BTreeG[entry]
	sessions *btree.BTreeG[session]
	owners   *btree.BTreeG[ownerKey]
	counts   *btree.BTreeG[quotaCount]
	dirs     *btree.BTreeG[dirRecord]
}

// undoCopy takes the copies a refused transaction puts back.
func (f *FSM) undoCopy() txnUndo {
	f.nodeGen = newGeneration() // the copy shares every node's data
	f.trackStores()
	return txnUndo{nodes: f.nodes.Copy(), sessions: f.sessions.Copy(), owners: f.owners.Copy(), counts: f.quota.counts.Copy(), dirs: f.dirs.Copy()}
}

// taken reports whether u holds copies.
func (u txnUndo) taken() bool { return u.nodes != nil }

// restore puts back the trees of u, if it holds any.
func (f *FSM) restore(u txnUndo) {
	if u.taken() {
		f.nodes, f.sessions, f.owners, f.quota.counts, f.dirs = u.nodes, u.sessions, u.owners, u.counts, u.dirs
		f.untrackStores(true)
	}
}

// txnOp applies one operation of the transaction cmd, or refuses it
// (leaving the caller to undo the earlier ones): refusal.Err is then set,
// with the write's Redo if it has one.
func (f *FSM) txnOp(index uint64, cmd *command.Command, op *command.TxnOp) (result TxnOpResult, events []Event, refusal Result) {
	if err := api.ValidatePath(op.Path); err != nil {
		return TxnOpResult{}, nil, Result{Err: asAPIError(err)}
	}
	if err := checkTxnOpShape(op); err != nil {
		return TxnOpResult{}, nil, Result{Err: err}
	}
	if op.Kind == command.TxnCheck {
		result, err := f.txnCheck(op)
		if err != nil {
			return TxnOpResult{}, nil, Result{Err: err}
		}
		return result, nil, Result{}
	}
	write := txnWriteCommand(cmd, op)
	if op.Kind == command.TxnSet {
		e, ok := f.lookup(op.Path)
		if !ok {
			return TxnOpResult{}, nil, Result{Err: api.Errorf(api.CodeNotFound, "node %q not found", op.Path)}
		}
		if !f.shard.sharded() {
			// As put would, with the node in hand (checkPut holds for a
			// set that passed checkTxnOpShape).
			written, events := f.putExisting(index, &write, &e)
			if written.Err != nil {
				return TxnOpResult{}, nil, Result{Err: written.Err, Redo: written.Redo}
			}
			return entryResult(e), events, Result{}
		}
	}
	var written Result
	if op.Kind == command.TxnDelete {
		written, events = f.delete(index, &write)
	} else {
		written, events = f.put(index, &write)
	}
	if written.Err != nil {
		return TxnOpResult{}, nil, Result{Err: written.Err, Redo: written.Redo}
	}
	return f.txnOpResult(written.Node), events, Result{}
}

// checkTxnOpShape refuses the flags and preconditions an operation's kind
// does not take.
func checkTxnOpShape(op *command.TxnOp) *api.Error {
	switch {
	case op.Kind > command.TxnCheck:
		return api.Errorf(api.CodeInvalidArgument, "unknown transaction operation %v", op.Kind)
	case op.Kind != command.TxnCreate && (op.Ephemeral || op.Sequential):
		return api.Errorf(api.CodeInvalidArgument, "%v of %q: only a create is ephemeral or sequential", op.Kind, op.Path)
	case op.Kind != command.TxnDelete && op.Recursive:
		return api.Errorf(api.CodeInvalidArgument, "%v of %q: only a delete is recursive", op.Kind, op.Path)
	case op.Kind != command.TxnCreate && op.Kind != command.TxnSet && len(op.Value) > 0:
		return api.Errorf(api.CodeInvalidArgument, "%v of %q: only a create or a set has a value", op.Kind, op.Path)
	case op.Kind == command.TxnCreate && op.Precondition != command.PrecondAny:
		return api.Errorf(api.CodeInvalidArgument, "create of %q takes no version: the node must not exist", op.Path)
	case op.Kind != command.TxnCheck && op.Precondition == command.PrecondNone:
		return api.Errorf(api.CodeInvalidArgument, "%v of %q: only a check requires a node to be absent", op.Kind, op.Path)
	case op.Precondition == command.PrecondVersion && op.Version == 0:
		return api.Errorf(api.CodeInvalidArgument, "%v of %q: version 0 is no node's version", op.Kind, op.Path)
	}
	return nil
}

// txnWriteCommand returns the single write that applies a create, set or
// delete operation of the transaction cmd: its session, and its format's
// rules.
func txnWriteCommand(cmd *command.Command, op *command.TxnOp) command.Command {
	write := command.Command{
		Format: cmd.Format, TimeMs: cmd.TimeMs, Path: op.Path, Value: op.Value,
		Precondition: op.Precondition, Version: op.Version,
		Recursive: op.Recursive, SessionID: cmd.SessionID,
	}
	switch op.Kind {
	case command.TxnCreate:
		write.Op, write.Precondition = command.OpPut, command.PrecondNone
		write.Ephemeral, write.Sequential = op.Ephemeral, op.Sequential
	case command.TxnSet:
		write.Op = command.OpPut
	default:
		write.Op = command.OpDelete
	}
	return write
}

// txnCheck applies a check operation: it changes nothing.
func (f *FSM) txnCheck(op *command.TxnOp) (TxnOpResult, *api.Error) {
	e, exists := f.lookup(op.Path)
	switch {
	case op.Precondition == command.PrecondNone && exists:
		return TxnOpResult{}, api.Errorf(api.CodePreconditionFailed, "node %q exists", op.Path)
	case op.Precondition == command.PrecondNone:
		return TxnOpResult{Node: NodeMeta{Path: op.Path}}, nil
	case !exists:
		return TxnOpResult{}, api.Errorf(api.CodeNotFound, "node %q not found", op.Path)
	case op.Precondition == command.PrecondVersion && e.version != op.Version:
		return TxnOpResult{}, api.Errorf(api.CodePreconditionFailed, "node %q has version %d, not %d", op.Path, e.version, op.Version)
	}
	return f.txnOpResult(e.meta()), nil
}

// txnOpResult describes the node meta names as the tree holds it now (a
// deleted node: as meta gives it, with no owner or data).
func (f *FSM) txnOpResult(meta NodeMeta) TxnOpResult {
	e, ok := f.lookup(meta.Path)
	if !ok || e.created != meta.CreatedIndex {
		return TxnOpResult{Node: meta}
	}
	return entryResult(e)
}

// entryResult describes e as the tree holds it.
func entryResult(e entry) TxnOpResult {
	return TxnOpResult{Node: e.meta(), Owner: e.owner, DataLength: len(e.value), ChildrenCount: e.children,
		CreatedAtMs: e.ctime, ChildrenVersion: e.cversion, ChildrenModifiedIndex: e.pzxid}
}
