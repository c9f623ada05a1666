package fsm

import (
	"strings"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/command"
)

// Get returns the node at path: not_found if it does not exist,
// invalid_argument if path is invalid (both *api.Error). In a sharded
// cluster, ask the shard holding the node (placement Shard); if its
// children live in another shard, ChildrenCount is 0 here and the count is
// that shard's Directory(path).ChildrenCount.
func (f *FSM) Get(path string) (Node, error) {
	e, err := f.get(path)
	if err != nil {
		return Node{}, err
	}
	return Node{NodeMeta: e.meta(), Value: e.value, Owner: e.owner, ChildrenCount: e.children,
		CreatedAtMs: e.ctime, ModifiedAtMs: e.mtime, ChildrenVersion: e.cversion, ChildrenModifiedIndex: e.pzxid}, nil
}

func (f *FSM) get(path string) (entry, error) {
	if e, ok := f.lookup(path); ok {
		return e, nil // only valid paths are stored
	}
	if err := api.ValidatePath(path); err != nil {
		return entry{}, err
	}
	return entry{}, api.Errorf(api.CodeNotFound, "node %q not found", path)
}

// Children returns the names of path's children, sorted bytewise; errors as
// Get. It costs O(children × log nodes), not O(subtree).
//
// In a sharded cluster, ask the shard holding path's children
// (placement ChildShard): if path's own node lives in another shard, the
// names come from its directory record and path's existence is not checked
// here (an unknown directory has no children).
func (f *FSM) Children(path string) ([]string, error) {
	count, err := f.childrenCount(path)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, count)
	if count == 0 {
		return names, nil
	}
	prefix := childPrefix(path)
	iter := f.nodes.Iter()
	defer iter.Release()
	for ok := iter.Seek(entry{path: prefix}); ok; {
		child := iter.Item().path
		if child == path { // the root sorts at its own prefix "/"
			ok = iter.Next()
			continue
		}
		if !strings.HasPrefix(child, prefix) {
			break
		}
		names = append(names, child[len(prefix):])
		ok = iter.Seek(entry{path: afterSubtree(child)})
	}
	return names, nil
}

// childrenCount returns the number of path's children in this shard, from
// its node or, if that lives in another shard, from its directory record.
func (f *FSM) childrenCount(path string) (int, error) {
	if f.foreignDirectory(path) {
		d, err := f.Directory(path)
		return d.ChildrenCount, err
	}
	e, err := f.get(path)
	if err != nil {
		return 0, err
	}
	return e.children, nil
}

// Session returns the live session id: not_found (*api.Error) if it is
// unknown, closed or expired. Only shard 0 holds sessions: in another shard
// of a sharded cluster, Session, Sessions and SessionCount see the local
// records of the sessions that wrote there (timeout 0), never liveness.
func (f *FSM) Session(id uint64) (Session, error) {
	s, ok := f.sessions.Get(session{id: id})
	if !ok {
		return Session{}, api.Errorf(api.CodeNotFound, "session %#x not found", id)
	}
	return s.public(), nil
}

func (s session) public() Session {
	return Session{ID: s.id, TimeoutMs: s.timeoutMs, Ephemerals: s.ephemerals, Owner: s.owner}
}

// Sessions returns every live session, sorted by id.
func (f *FSM) Sessions() []Session {
	sessions := make([]Session, 0, f.sessions.Len())
	f.sessions.Scan(func(s session) bool {
		sessions = append(sessions, s.public())
		return true
	})
	return sessions
}

// SessionCount returns the number of live sessions.
func (f *FSM) SessionCount() int { return f.sessions.Len() }

// NodeCount returns the number of nodes, the root included.
func (f *FSM) NodeCount() int { return f.nodes.Len() }

// Members returns the cluster members, sorted by ID.
func (f *FSM) Members() []command.Member {
	return append([]command.Member(nil), f.members...)
}

// Member returns the member with raft id id, without copying the list.
func (f *FSM) Member(id uint64) (command.Member, bool) {
	if i, ok := findMember(f.members, id); ok {
		return f.members[i], true
	}
	return command.Member{}, false
}

// RemovedMember reports whether the member with raft id id was removed from
// the cluster (and not added again since) and returns it as it was when its
// removal was applied: with its name and addresses, or with its ID alone if
// the removal named an id that was no member. Raft must never see a removed
// id again: the server refuses to add it and tells a removed peer that
// contacts it so. The record is replicated and in snapshots, so it survives
// restarts; there is one per removed member, kept forever.
func (f *FSM) RemovedMember(id uint64) (command.Member, bool) {
	if i, ok := findMember(f.removed, id); ok {
		return f.removed[i], true
	}
	return command.Member{}, false
}

// RemovedMemberNamed returns the removed member (see RemovedMember) named
// name, the one with the lowest id if several had that name. The empty name
// never matches (a removed id without a record of its member has none). It
// costs O(removed members).
func (f *FSM) RemovedMemberNamed(name string) (command.Member, bool) {
	if name == "" {
		return command.Member{}, false
	}
	for _, m := range f.removed {
		if m.Name == name {
			return m, true
		}
	}
	return command.Member{}, false
}

// RemovedMembers returns every removed member (see RemovedMember), sorted by
// ID.
func (f *FSM) RemovedMembers() []command.Member {
	return append([]command.Member(nil), f.removed...)
}
