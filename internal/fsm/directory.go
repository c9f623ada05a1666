package fsm

import (
	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/command"
)

// Directories across shards (docs/design.md, "Directories across shards").
// Write S = Shard(P), where P's node lives, and C = ChildShard(P), where its
// children live. When S = C (always with one shard) P's node counts its
// children and holds its sequential counter, as it always did. Otherwise C
// holds P's directory record: P's incarnation (its created_index in S), the
// counter and the children count. The record is opened by the first create
// under P (OpPut or OpEnqueue carrying Incarnation and Observed) and closed
// by OpDirClose, which raises C's directory fence; in S, P is deleted only
// by OpDirDelete after OpDirMark marked it closing.

// dirRecord is the directory record of a directory whose node lives in
// another shard. Stored by value: it is small.
type dirRecord struct {
	path        string
	incarnation uint64 // the directory's created_index in its own shard
	sequence    uint64 // the next suffix of a sequential child
	children    int
}

func dirRecordLess(a, b dirRecord) bool { return pathLess(a.path, b.path) }

// Directory is a directory record as read by Directory.
type Directory struct {
	Path          string
	Incarnation   uint64 // the directory's created_index in its own shard
	Sequence      uint64 // the next suffix of a sequential child
	ChildrenCount int
	// Opened is false when no record is open: no child was created since
	// the directory's last close (its children count is then 0).
	Opened bool
}

// Directory returns the directory record of dir, whose children live in this
// shard while its node lives in another. Without an open record it returns
// Opened false and a count of 0. It is an error (invalid_argument) to ask a
// shard that does not hold dir's children, or, with one shard, at all: the
// node counts its children (Get).
func (f *FSM) Directory(dir string) (Directory, error) {
	if err := api.ValidatePath(dir); err != nil {
		return Directory{}, err
	}
	if !f.foreignDirectory(dir) {
		return Directory{}, api.Errorf(api.CodeInvalidArgument, "%s holds no directory record of %q", f.shard, dir)
	}
	r, ok := f.dirs.Get(dirRecord{path: dir})
	if !ok {
		return Directory{Path: dir}, nil
	}
	return Directory{Path: dir, Incarnation: r.incarnation, Sequence: r.sequence, ChildrenCount: r.children, Opened: true}, nil
}

// DirectoryFence returns the index of the latest OpDirClose applied in this
// shard (0 if none): a create opening a directory record with an Observed
// index below it is refused.
func (f *FSM) DirectoryFence() uint64 { return f.dirFence }

// DirectoryCount returns the number of open directory records.
func (f *FSM) DirectoryCount() int { return f.dirs.Len() }

// parentDir is where a create's parent keeps its children: its node
// (local), or its directory record (open, or about to be opened).
type parentDir struct {
	local  bool
	node   entry
	record dirRecord
	open   bool // record is not yet stored: the create opens it
}

func (p *parentDir) sequence() uint64 {
	if p.local {
		return p.node.sequence
	}
	return p.record.sequence
}

// putSharded applies OpPut (and OpEnqueue's put) in a sharded cluster. It
// creates no missing ancestor: each lives in its own shard, and the server
// makes them top-down (RedoCreateParent).
func (f *FSM) putSharded(index uint64, cmd *command.Command) (Result, []Event) {
	if cmd.Path == "/" {
		return f.putRoot(index, cmd)
	}
	dir := api.Parent(cmd.Path)
	if !f.holdsChildrenOf(dir) {
		return f.wrongShard("the children of %q live in shard %d", dir, f.placementMap().ChildShard(dir))
	}
	parent, refusal := f.parentOf(index, dir, cmd)
	if refusal != nil {
		return *refusal, nil
	}
	path, sequence := cmd.Path, uint64(0)
	if cmd.Sequential {
		var err *api.Error
		if path, sequence, err = f.nextFreeName(cmd.Path, parent.sequence()); err != nil {
			return refuse(err)
		}
	}
	existing, exists := f.lookup(path)
	if err := checkExisting(cmd, path, existing, exists); err != nil {
		return refuse(err)
	}
	if exists {
		return f.update(index, cmd, &existing)
	}
	return f.createSharded(index, cmd, path, sequence, parent)
}

// putRoot writes the root's value, in the shard holding the root.
func (f *FSM) putRoot(index uint64, cmd *command.Command) (Result, []Event) {
	if !f.holdsNode("/") {
		return f.wrongShard("the root lives in shard %d", f.placementMap().Shard("/"))
	}
	root, _ := f.lookup("/")
	if err := checkExisting(cmd, "/", root, true); err != nil {
		return refuse(err)
	}
	return f.update(index, cmd, &root)
}

// parentOf returns where dir keeps its children for a create of cmd, or a
// refusal: dir's node here must exist and be persistent; dir's record must
// be open, or be opened by cmd (Incarnation set, Observed not below the
// directory fence).
func (f *FSM) parentOf(index uint64, dir string, cmd *command.Command) (parentDir, *Result) {
	if f.holdsNode(dir) {
		e, ok := f.lookup(dir)
		switch {
		case !ok:
			r := redo(RedoCreateParent, "%s: parent %q is missing: create it first", f.shard, dir)
			return parentDir{}, &r
		case e.owner != 0:
			r := Result{Err: api.Errorf(api.CodeInvalidArgument, "node %q is ephemeral and cannot have children", dir)}
			return parentDir{}, &r
		}
		return parentDir{local: true, node: e}, nil
	}
	record, ok := f.dirs.Get(dirRecord{path: dir})
	switch {
	case ok && (cmd.Incarnation == 0 || cmd.Incarnation == record.incarnation):
		return parentDir{record: record}, nil
	case ok:
		r := redo(RedoDirectoryFenced, "%s: directory %q is open as incarnation %d, not %d: read it again",
			f.shard, dir, record.incarnation, cmd.Incarnation)
		return parentDir{}, &r
	case cmd.Incarnation == 0:
		r := redo(RedoOpenDirectory, "%s: directory %q is not open here: open it", f.shard, dir)
		return parentDir{}, &r
	case cmd.Observed < f.dirFence:
		r := redo(RedoDirectoryFenced, "%s: directory %q was read at index %d, below the directory fence %d: read it again",
			f.shard, dir, cmd.Observed, f.dirFence)
		return parentDir{}, &r
	}
	// A new record counts from the index that opens it: every number an
	// earlier record of dir handed out is below the close that removed it,
	// itself below index (invariant 12 within this shard's log).
	opened := dirRecord{path: dir, incarnation: cmd.Incarnation, sequence: index}
	return parentDir{record: opened, open: true}, nil
}

// nextFreeName returns the first sequential name prefix+N, N from next on,
// that no node has taken, and N.
func (f *FSM) nextFreeName(prefix string, next uint64) (string, uint64, *api.Error) {
	for {
		path := sequentialPath(prefix, next)
		if len(path) > api.MaxPathLen {
			return "", 0, api.Errorf(api.CodeInvalidArgument, "sequential path %q is over %d bytes", path, api.MaxPathLen)
		}
		if _, taken := f.lookup(path); !taken {
			return path, next, nil
		}
		next++
	}
}

// createSharded makes the node at path under parent, whose children count
// (and counter, for a sequential create) it advances.
func (f *FSM) createSharded(index uint64, cmd *command.Command, path string, sequence uint64, parent parentDir) (Result, []Event) {
	if err := f.checkQuotas(path, []string{path}, int64(len(cmd.Value))); err != nil {
		return refuse(err)
	}
	parentVersion := uint64(0) // a record has no version: the node is in another shard
	if parent.local {
		data := f.edit(&parent.node)
		data.children++
		f.childrenChanged(data, index)
		if cmd.Sequential {
			data.sequence = sequence + 1
		}
		f.storeNode(parent.node)
		parentVersion = parent.node.version
	} else {
		parent.record.children++
		if cmd.Sequential {
			parent.record.sequence = sequence + 1
		}
		f.dirs.Set(parent.record)
	}
	var owner uint64
	if cmd.Ephemeral {
		owner = cmd.SessionID
		f.addEphemeral(owner, path)
	}
	data := newNodeData(index, cmd)
	data.value, data.owner, data.sequence = cloneBytes(cmd.Value), owner, index
	e := entry{path: path, nodeData: data}
	f.storeNode(e)
	f.countNode(path, 1, int64(len(data.value)))
	events := []Event{
		{Kind: EventCreated, Path: path, Version: 1, Index: index},
		{Kind: EventChildrenChanged, Path: api.Parent(path), Version: parentVersion, Index: index},
	}
	return Result{Node: e.meta()}, events
}

// deleteSharded applies OpDelete in a sharded cluster: one node, never a
// subtree (the server deletes a prefix bottom-up, shard by shard), and a
// persistent node whose children live in another shard only through the
// close protocol.
func (f *FSM) deleteSharded(index uint64, cmd *command.Command, e entry) (Result, []Event) {
	switch {
	case cmd.Recursive:
		return refuse(api.Errorf(api.CodeInvalidArgument, "%s: a recursive delete spans shards: the server deletes the subtree bottom-up", f.shard))
	case e.owner == 0 && !f.holdsChildrenOf(e.path):
		return redo(RedoCloseDirectory, "%s: the children of %q live in shard %d: delete it with the close protocol",
			f.shard, e.path, f.placementMap().ChildShard(e.path)), nil
	case e.children > 0:
		return refuse(api.Errorf(api.CodePreconditionFailed, "node %q has %d children", e.path, e.children))
	}
	if err := othersEphemeral(cmd, []entry{e}); err != nil {
		return refuse(err)
	}
	return Result{Node: e.meta()}, []Event{f.remove(index, e), f.unlinkChild(index, e.path)}
}

// unlinkChildRecord decrements the children count of dir's record, which
// holds a child that is being removed.
func (f *FSM) unlinkChildRecord(index uint64, dir string) Event {
	r, _ := f.dirs.Get(dirRecord{path: dir})
	r.children--
	f.dirs.Set(r)
	return Event{Kind: EventChildrenChanged, Path: dir, Index: index}
}

// markClosing applies OpDirMark in S: it marks the directory cmd.Path
// closing, with the entry's index as the mark, if the precondition holds and
// no other delete has marked it.
func (f *FSM) markClosing(index uint64, cmd *command.Command) (Result, []Event) {
	e, refusal := f.closableNode(cmd.Path)
	if refusal != nil {
		return *refusal, nil
	}
	switch {
	case cmd.Precondition == command.PrecondNone:
		return refuse(api.Errorf(api.CodePreconditionFailed, "node %q exists", cmd.Path))
	case cmd.Precondition == command.PrecondVersion && e.version != cmd.Version:
		return refuse(api.Errorf(api.CodePreconditionFailed, "node %q has version %d, not %d", cmd.Path, e.version, cmd.Version))
	case e.closing != 0:
		return refuse(api.Errorf(api.CodePreconditionFailed, "node %q is being deleted (closing since index %d)", cmd.Path, e.closing))
	}
	f.edit(&e).closing = index
	f.storeNode(e)
	return Result{Node: e.meta(), Mark: index}, nil
}

// unmarkClosing applies OpDirUnmark in S: it removes the closing mark
// cmd.Mark; any other mark is refused.
func (f *FSM) unmarkClosing(cmd *command.Command) (Result, []Event) {
	e, refusal := f.closableNode(cmd.Path)
	if refusal != nil {
		return *refusal, nil
	}
	if e.closing == 0 || e.closing != cmd.Mark {
		return refuse(api.Errorf(api.CodePreconditionFailed, "node %q is not closing under mark %d", cmd.Path, cmd.Mark))
	}
	f.edit(&e).closing = 0
	f.storeNode(e)
	return Result{Node: e.meta()}, nil
}

// closableNode returns the node path, which must live here, exist, be
// persistent and have its children in another shard.
func (f *FSM) closableNode(path string) (entry, *Result) {
	if err := api.ValidatePath(path); err != nil {
		r := Result{Err: asAPIError(err)}
		return entry{}, &r
	}
	if !f.foreignChildren(path) {
		r, _ := f.wrongShard("%q is not a node here whose children live in another shard", path)
		return entry{}, &r
	}
	e, ok := f.lookup(path)
	switch {
	case !ok:
		r := Result{Err: api.Errorf(api.CodeNotFound, "node %q not found", path)}
		return entry{}, &r
	case e.owner != 0:
		r := Result{Err: api.Errorf(api.CodeInvalidArgument, "node %q is ephemeral: delete it directly", path)}
		return entry{}, &r
	}
	return e, nil
}

// foreignChildren reports whether the node path lives here and its
// children in another shard. Never true with one shard.
func (f *FSM) foreignChildren(path string) bool {
	return f.shard.sharded() && f.holdsNode(path) && !f.holdsChildrenOf(path)
}

// closeDirectory applies OpDirClose in C: it removes the record of
// cmd.Path of incarnation cmd.Incarnation if it has no children, or finds
// none, and then raises the directory fence to index. A record with
// children, or of another incarnation, is refused and nothing changes.
func (f *FSM) closeDirectory(index uint64, cmd *command.Command) (Result, []Event) {
	if err := api.ValidatePath(cmd.Path); err != nil {
		return refuse(asAPIError(err))
	}
	switch {
	case !f.foreignDirectory(cmd.Path):
		return f.wrongShard("it holds no directory record of %q", cmd.Path)
	case cmd.Incarnation == 0:
		return refuse(api.Errorf(api.CodeInvalidArgument, "closing directory %q needs its incarnation", cmd.Path))
	}
	if r, ok := f.dirs.Get(dirRecord{path: cmd.Path}); ok {
		switch {
		case r.incarnation != cmd.Incarnation:
			return refuse(api.Errorf(api.CodePreconditionFailed, "directory %q is open as incarnation %d, not %d", cmd.Path, r.incarnation, cmd.Incarnation))
		case r.children > 0:
			return refuse(api.Errorf(api.CodePreconditionFailed, "node %q has %d children", cmd.Path, r.children))
		}
		f.dirs.Delete(r)
	}
	f.dirFence = index
	return Result{}, nil
}

// deleteClosed applies OpDirDelete in S: it deletes cmd.Path if it is still
// closing under the mark cmd.Mark.
func (f *FSM) deleteClosed(index uint64, cmd *command.Command) (Result, []Event) {
	e, refusal := f.closableNode(cmd.Path)
	if refusal != nil {
		return *refusal, nil
	}
	if e.closing == 0 || e.closing != cmd.Mark {
		return refuse(api.Errorf(api.CodePreconditionFailed, "node %q is not closing under mark %d", cmd.Path, cmd.Mark))
	}
	return Result{Node: e.meta()}, []Event{f.remove(index, e), f.unlinkChild(index, e.path)}
}

// ClosingDirectory is a directory marked closing by a delete in progress.
type ClosingDirectory struct {
	Path        string
	Mark        uint64 // the index of its OpDirMark
	Incarnation uint64 // its created_index
}

// ClosingDirectories returns the directories of this shard marked closing,
// in tree order: deletes in progress, or left by a server that stopped
// midway, which the shard's leader finishes (OpDirClose, then OpDirDelete,
// or OpDirUnmark if the close is refused). It costs a scan of the shard's
// nodes; the leader calls it when it takes office.
func (f *FSM) ClosingDirectories() []ClosingDirectory {
	var list []ClosingDirectory
	f.nodes.Scan(func(e entry) bool {
		if e.closing != 0 {
			list = append(list, ClosingDirectory{Path: e.path, Mark: e.closing, Incarnation: e.created})
		}
		return true
	})
	return list
}

// ClosingMark returns the closing mark of the node at path (the index of
// the OpDirMark that marked it), or 0 if it is not marked or not here. A
// create's open path reads it in the directory's own shard: no directory
// record is opened under a directory being deleted.
func (f *FSM) ClosingMark(path string) uint64 {
	e, ok := f.lookup(path)
	if !ok {
		return 0
	}
	return e.closing
}
