package fsm

import (
	"bytes"
	"slices"
	"strings"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/command"
)

// put applies OpPut: it checks everything first and refuses without change,
// or writes the node, creating missing ancestors (mkdir -p).
func (f *FSM) put(index uint64, cmd *command.Command) (Result, []Event) {
	if err := checkPut(cmd); err != nil {
		return refuse(err)
	}
	if f.shard.sharded() {
		return f.putSharded(index, cmd)
	}
	if !cmd.Sequential {
		// The path is known: look it up first. A node that exists has
		// every ancestor, none of them ephemeral, so the walk up is for a
		// create only.
		if existing, exists := f.lookup(cmd.Path); exists {
			return f.putExisting(index, cmd, &existing)
		}
	}
	parent, missing, err := f.existingAncestor(api.Parent(cmd.Path))
	if err != nil {
		return refuse(err)
	}
	path, sequence := cmd.Path, uint64(0)
	if cmd.Sequential {
		if path, sequence, err = f.sequentialName(index, cmd, parent, len(missing) == 0); err != nil {
			return refuse(err)
		}
		if len(missing) == 0 {
			if existing, exists := f.lookup(path); exists {
				return f.putExisting(index, cmd, &existing) // refused: a sequential name must be new
			}
		}
	}
	if err := checkExisting(cmd, path, entry{}, false); err != nil {
		return refuse(err)
	}
	return f.create(index, cmd, path, sequence, parent, missing)
}

// putExisting applies a put to e, the node at its path (or at the
// sequential name it took): it checks the precondition and the ephemeral
// rules, then writes the value. On success e is the node as stored.
func (f *FSM) putExisting(index uint64, cmd *command.Command, e *entry) (Result, []Event) {
	if err := checkExisting(cmd, e.path, *e, true); err != nil {
		return refuse(err)
	}
	return f.update(index, cmd, e)
}

// sequentialName returns the name of a sequential create under parent
// (which exists, or is made by this put if !parentExists) and the sequence
// number it takes. Under version 2 (see command.FormatVersion) the name is
// the first one from the parent's counter on that no node has taken, and a
// parent made by this put counts from index; under version 1 it is the
// counter's value whether taken or not, and a new parent counts from 0.
func (f *FSM) sequentialName(index uint64, cmd *command.Command, parent entry, parentExists bool) (string, uint64, *api.Error) {
	next := newSequence(index, cmd) // a parent made by this put
	if parentExists {
		next = parent.sequence
	}
	for {
		path := sequentialPath(cmd.Path, next)
		if len(path) > api.MaxPathLen {
			return "", 0, api.Errorf(api.CodeInvalidArgument, "sequential path %q is over %d bytes", path, api.MaxPathLen)
		}
		if !parentExists || cmd.Legacy() {
			return path, next, nil
		}
		if next > index {
			return "", 0, sequenceAhead(cmd.Path, next, index)
		}
		if _, taken := f.lookup(path); !taken {
			return path, next, nil
		}
		// Taken by a plain create: skip it. Each skipped name is a node of
		// this parent made by an entry of its own, so the counter still
		// advances by at most one per entry (see newSequence).
		next++
	}
}

// sequenceAhead is the refusal of a sequential create that would take a
// number above its entry's index (version 2). A single write never does:
// the counter of a node made at index c starts at c and advances by at most
// one per entry after it (see newSequence), so a number taken at index i is
// at most i, and a parent made again after a delete at d, at some index
// above d, counts from above every number its previous incarnation gave.
// A transaction can take several numbers under one parent in one entry, or
// make several names a later create skips, so it could run the counter
// ahead of the index and a re-made parent could hand a name out twice:
// the create is refused instead. The index grows with every entry, so the
// same create succeeds later.
func sequenceAhead(prefix string, next, index uint64) *api.Error {
	return api.Errorf(api.CodePreconditionFailed,
		"sequential create %q would take number %d, above its log index %d: a transaction has run the parent's counter ahead "+
			"(numbers are never reused, so a counter may not pass the index); retry once the index has passed %d",
		prefix, next, index, next)
}

// newSequence is the counter of a node created at index: the first suffix
// its sequential children get. Under version 2 it is index: a node's
// counter only advances, by at most one per log entry (a sequential create
// takes one number, a plain create can make one skip it), so every number
// an earlier node at the same path handed out is below the index that
// deleted it, itself below index. Names are then never reused, with no
// memory of deleted paths. Under version 1 it is 0.
func newSequence(index uint64, cmd *command.Command) uint64 {
	if cmd.Legacy() {
		return 0
	}
	return index
}

// checkPut validates what a put can check without reading the tree.
func checkPut(cmd *command.Command) *api.Error {
	if err := api.ValidatePath(cmd.Path); err != nil {
		return asAPIError(err)
	}
	switch {
	case cmd.Path == "/" && cmd.Ephemeral:
		return api.Errorf(api.CodeInvalidArgument, "the root cannot be ephemeral")
	case cmd.Path == "/" && cmd.Sequential:
		return api.Errorf(api.CodeInvalidArgument, "the root cannot be created sequentially")
	case cmd.Ephemeral && cmd.SessionID == 0:
		return api.Errorf(api.CodeInvalidArgument, "an ephemeral node needs a session")
	}
	return nil
}

// checkExisting checks the precondition and the ephemeral rules against the
// node at path, if it exists.
func checkExisting(cmd *command.Command, path string, existing entry, exists bool) *api.Error {
	var version uint64 // a missing node has version 0
	if exists {
		version = existing.version
	}
	switch cmd.Precondition {
	case command.PrecondNone:
		if exists {
			return api.Errorf(api.CodePreconditionFailed, "node %q exists", path)
		}
	case command.PrecondVersion:
		if version != cmd.Version {
			return api.Errorf(api.CodePreconditionFailed, "node %q has version %d, not %d", path, version, cmd.Version)
		}
	}
	switch {
	case !exists:
		return nil
	case cmd.Sequential:
		return api.Errorf(api.CodePreconditionFailed, "sequential node %q already exists", path)
	case cmd.Ephemeral && existing.owner != cmd.SessionID:
		return api.Errorf(api.CodePreconditionFailed, "node %q exists and is not an ephemeral node of session %#x", path, cmd.SessionID)
	}
	return nil
}

// existingAncestor returns the deepest existing node on the way from p up to
// the root, and the paths of the missing ones below it, top-down. The
// existing one must not be ephemeral: ephemeral nodes cannot have children.
func (f *FSM) existingAncestor(p string) (entry, []string, *api.Error) {
	var missing []string
	for {
		e, ok := f.lookup(p)
		if ok {
			if e.owner != 0 {
				return entry{}, nil, api.Errorf(api.CodeInvalidArgument, "node %q is ephemeral and cannot have children", p)
			}
			return e, missing, nil
		}
		missing = append([]string{p}, missing...)
		p = api.Parent(p)
	}
}

// update writes cmd's value to the existing node e, which then holds the
// node as stored. Ownership is kept.
func (f *FSM) update(index uint64, cmd *command.Command, e *entry) (Result, []Event) {
	if err := f.checkQuotas(e.path, nil, int64(len(cmd.Value))-int64(len(e.value))); err != nil {
		return refuse(err)
	}
	f.countNode(e.path, 0, int64(len(cmd.Value))-int64(len(e.value)))
	data := f.edit(e)
	data.value = cloneBytes(cmd.Value)
	data.version++
	data.modified = index
	if cmd.TimeMs != 0 {
		data.mtime = cmd.TimeMs
	}
	f.storeNode(*e)
	events := []Event{{Kind: EventChanged, Path: e.path, Version: e.version, Index: index}}
	return Result{Node: e.meta()}, events
}

// create makes the node at path under parent, first making the missing
// ancestors (top-down) between them. sequence is the number a sequential
// create took: its parent's counter moves past it.
func (f *FSM) create(index uint64, cmd *command.Command, path string, sequence uint64, parent entry, missing []string) (Result, []Event) {
	if f.quota.counts.Len() > 0 {
		if err := f.checkQuotas(path, append(slices.Clone(missing), path), int64(len(cmd.Value))); err != nil {
			return refuse(err)
		}
	}
	events := make([]Event, 0, 2*(len(missing)+1))
	data := f.edit(&parent)
	data.children++
	f.childrenChanged(data, index)
	if cmd.Sequential && len(missing) == 0 {
		data.sequence = sequence + 1
	}
	f.storeNode(parent)
	for i, p := range missing {
		events = append(events, createdEvents(index, p, parent)...)
		data := newNodeData(index, cmd)
		data.children, data.sequence = 1, newSequence(index, cmd)
		f.childrenChanged(data, index)
		if cmd.Sequential && i == len(missing)-1 {
			data.sequence = sequence + 1
		}
		parent = entry{path: p, nodeData: data}
		f.storeNode(parent)
		f.countNode(p, 1, 0)
	}
	var owner uint64
	if cmd.Ephemeral {
		owner = cmd.SessionID
		f.addEphemeral(owner, path)
	}
	data = newNodeData(index, cmd)
	data.value, data.owner, data.sequence = cloneBytes(cmd.Value), owner, newSequence(index, cmd)
	e := entry{path: path, nodeData: data}
	f.storeNode(e)
	f.countNode(path, 1, int64(len(data.value)))
	events = append(events, createdEvents(index, path, parent)...)
	return Result{Node: e.meta()}, events
}

func createdEvents(index uint64, path string, parent entry) []Event {
	return []Event{
		{Kind: EventCreated, Path: path, Version: 1, Index: index},
		{Kind: EventChildrenChanged, Path: parent.path, Version: parent.version, Index: index},
	}
}

// delete applies OpDelete.
func (f *FSM) delete(index uint64, cmd *command.Command) (Result, []Event) {
	if err := api.ValidatePath(cmd.Path); err != nil {
		return refuse(asAPIError(err))
	}
	if cmd.Path == "/" {
		return refuse(api.Errorf(api.CodeInvalidArgument, "the root cannot be deleted"))
	}
	e, ok := f.lookup(cmd.Path)
	if !ok {
		return refuse(api.Errorf(api.CodeNotFound, "node %q not found", cmd.Path))
	}
	if f.shard.sharded() && !f.holdsNode(cmd.Path) {
		return f.wrongShard("node %q lives in shard %d", cmd.Path, f.placementMap().Shard(cmd.Path))
	}
	switch {
	case cmd.Precondition == command.PrecondNone:
		return refuse(api.Errorf(api.CodePreconditionFailed, "node %q exists", cmd.Path))
	case cmd.Precondition == command.PrecondVersion && e.version != cmd.Version:
		return refuse(api.Errorf(api.CodePreconditionFailed, "node %q has version %d, not %d", cmd.Path, e.version, cmd.Version))
	case f.shard.sharded():
		return f.deleteSharded(index, cmd, e)
	case e.children > 0 && !cmd.Recursive:
		return refuse(api.Errorf(api.CodePreconditionFailed, "node %q has %d children", cmd.Path, e.children))
	}
	subtree := []entry{e}
	if e.children > 0 {
		subtree = f.subtree(e)
	}
	if err := othersEphemeral(cmd, subtree); err != nil {
		return refuse(err)
	}
	events := make([]Event, 0, len(subtree)+1)
	for i := len(subtree) - 1; i >= 0; i-- { // descendants before ancestors
		events = append(events, f.remove(index, subtree[i]))
	}
	events = append(events, f.unlinkChild(index, cmd.Path))
	return Result{Node: e.meta()}, events
}

// othersEphemeral refuses a delete that would remove an ephemeral node of a
// session other than the command's: an ephemeral node says its session is
// alive and holds something (a lock, a candidacy, a membership), so only
// that session, or its end, takes it away. Otherwise anyone who can read a
// lock's queue could delete its holder's node and take the lock. Version-1
// commands keep the rule they were applied under (anyone could delete).
func othersEphemeral(cmd *command.Command, nodes []entry) *api.Error {
	if cmd.Legacy() {
		return nil
	}
	for _, n := range nodes {
		if n.owner != 0 && n.owner != cmd.SessionID {
			return api.Errorf(api.CodePreconditionFailed,
				"node %q is an ephemeral node of another session: only its session deletes it (by a delete with its session_id, a release, a resign or the session's end)", n.path)
		}
	}
	return nil
}

// subtree returns root and its descendants in pre-order.
func (f *FSM) subtree(root entry) []entry {
	nodes := []entry{root}
	prefix := childPrefix(root.path)
	f.nodes.Ascend(entry{path: prefix}, func(e entry) bool {
		if !strings.HasPrefix(e.path, prefix) {
			return false
		}
		nodes = append(nodes, e)
		return true
	})
	return nodes
}

// remove deletes the single node e (its parent's children count is the
// caller's business) and returns its event.
func (f *FSM) remove(index uint64, e entry) Event {
	f.removeNode(e)
	f.countNode(e.path, -1, -int64(len(e.value)))
	if e.owner != 0 {
		f.removeEphemeral(e.owner, e.path)
	}
	return Event{Kind: EventDeleted, Path: e.path, Version: e.version, Index: index}
}

// unlinkChild decrements the children count of path's parent and returns
// the parent's event.
func (f *FSM) unlinkChild(index uint64, path string) Event {
	if dir := api.Parent(path); f.foreignDirectory(dir) {
		return f.unlinkChildRecord(index, dir)
	}
	parent, _ := f.lookup(api.Parent(path))
	data := f.edit(&parent)
	data.children--
	f.childrenChanged(data, index)
	f.storeNode(parent)
	return Event{Kind: EventChildrenChanged, Path: parent.path, Version: parent.version, Index: index}
}

func cloneBytes(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return append([]byte(nil), b...)
}

// asAPIError returns err as an *api.Error, wrapping any other error as
// invalid_argument.
func asAPIError(err error) *api.Error {
	if e, ok := err.(*api.Error); ok {
		return e
	}
	return api.Errorf(api.CodeInvalidArgument, "%v", err)
}

// enqueue applies OpEnqueue: the session's existing node of the queue (with
// cmd.Value, if that differs, from version 2 on), or a new ephemeral
// sequential node. cmd.SessionID is a live session (applyWrite
// checked it) or 0.
func (f *FSM) enqueue(index uint64, cmd *command.Command) (Result, []Event) {
	if cmd.SessionID == 0 {
		return refuse(api.Errorf(api.CodeInvalidArgument, "joining a queue needs a session"))
	}
	if err := api.ValidatePath(cmd.Path); err != nil {
		return refuse(asAPIError(err))
	}
	if e, ok := f.queuedNode(cmd.SessionID, cmd.Path); ok {
		if cmd.Legacy() || bytes.Equal(e.value, cmd.Value) {
			return Result{Node: e.meta()}, nil
		}
		return f.update(index, cmd, &e) // a new value for the same place
	}
	put := *cmd
	put.Ephemeral, put.Sequential = true, true
	return f.put(index, &put)
}

// queuedNode returns the ephemeral node prefix+NNNNNNNNNN owned by session,
// if any, found through the owner index in O(log n).
func (f *FSM) queuedNode(session uint64, prefix string) (entry, bool) {
	var found string
	f.owners.Ascend(ownerKey{owner: session, path: prefix}, func(k ownerKey) bool {
		if k.owner != session || !strings.HasPrefix(k.path, prefix) {
			return false
		}
		if isSequenceSuffix(k.path[len(prefix):]) {
			found = k.path
			return false
		}
		return true
	})
	if found == "" {
		return entry{}, false
	}
	return f.lookup(found)
}

// isSequenceSuffix reports whether s is a sequence number as appended by a
// sequential create.
func isSequenceSuffix(s string) bool {
	if len(s) < api.SequenceDigits {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
