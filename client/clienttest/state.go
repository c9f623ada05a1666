package clienttest

import (
	"fmt"
	"sort"
	"sync"

	"github.com/latch-io/latch/api"
)

// state is the fake cluster's data, shared by its servers.
type state struct {
	mu          sync.Mutex // guards every field
	index       uint64     // one per applied write
	nodes       map[string]*node
	sequences   map[string]uint64 // per parent: last sequential counter
	sessions    map[string]*session
	lastSession uint64
	// history is every event ever published, oldest first (a fake keeps
	// it all), for registrations with known_index.
	history []api.Event
	// changed is closed and replaced whenever an event is published, to
	// wake lock acquirers waiting on the queue.
	changed chan struct{}
	// registries are the servers' watch registries, keyed by server name:
	// watches are server-local, as in latch.
	registries map[string]*registry
	// registrations logs every watch registration, oldest first.
	registrations []Registration
	lastWatch     uint64
	acquires      int // lock acquire calls that reached a queue
}

type node struct {
	value    string
	version  uint64
	created  uint64
	modified uint64
	owner    string // session id of an ephemeral node
	children map[string]bool
}

type session struct {
	timeoutMs  uint64
	heartbeats int
	ephemerals map[string]bool
	replies    map[uint64]storedReply // request_seq -> first result
}

// storedReply is the first result of a session-scoped write.
type storedReply struct {
	index  uint64
	result any
	err    error
}

func newState() *state {
	return &state{
		nodes:      map[string]*node{"/": {children: map[string]bool{}}},
		sequences:  map[string]uint64{},
		sessions:   map[string]*session{},
		changed:    make(chan struct{}),
		registries: map[string]*registry{},
	}
}

// putArgs are a PUT's parameters.
type putArgs struct {
	path, value, prevVersion string
	ephemeral, sequential    bool
	sessionID                string
}

// liveSessionLocked returns docs/api.md's 410 session_expired when session id
// does not exist, and nil when it does.
func (st *state) liveSessionLocked(id string) error {
	if st.sessions[id] == nil {
		return api.Errorf(api.CodeSessionExpired, "session %s is gone", id)
	}
	return nil
}

func (st *state) putLocked(a putArgs) (*api.Node, error) {
	if a.ephemeral && a.sessionID == "" {
		return nil, api.Errorf(api.CodeInvalidArgument, "ephemeral needs session_id")
	}
	if a.sessionID != "" {
		if err := st.liveSessionLocked(a.sessionID); err != nil {
			return nil, err
		}
	}
	path := a.path
	if a.sequential {
		parent := api.Parent(path)
		st.sequences[parent]++
		path = fmt.Sprintf("%s%0*d", path, api.SequenceDigits, st.sequences[parent])
	}
	existing := st.nodes[path]
	if err := checkPrev(path, existing, a.prevVersion, false); err != nil {
		return nil, err
	}
	if parent := st.nodes[api.Parent(path)]; parent != nil && parent.owner != "" {
		return nil, api.Errorf(api.CodeInvalidArgument, "ephemeral node %s cannot have children", api.Parent(path))
	}
	st.index++
	if existing == nil {
		st.mkdirLocked(api.Parent(path))
		existing = &node{created: st.index, children: map[string]bool{}}
		st.nodes[path] = existing
		st.nodes[api.Parent(path)].children[api.Base(path)] = true
		if a.ephemeral {
			existing.owner = a.sessionID
			st.sessions[a.sessionID].ephemerals[path] = true
		}
		existing.value, existing.version, existing.modified = a.value, 1, st.index
		st.publishLocked(api.EventCreated, path, 1)
		st.publishLocked(api.EventChildrenChanged, api.Parent(path), st.nodes[api.Parent(path)].version)
	} else {
		existing.value = a.value
		existing.version++
		existing.modified = st.index
		st.publishLocked(api.EventChanged, path, existing.version)
	}
	return &api.Node{Path: path, Version: existing.version, CreatedIndex: existing.created,
		ModifiedIndex: existing.modified, Index: st.index}, nil
}

// mkdirLocked creates path and its missing ancestors as empty nodes.
func (st *state) mkdirLocked(path string) {
	if st.nodes[path] != nil {
		return
	}
	st.mkdirLocked(api.Parent(path))
	st.nodes[path] = &node{version: 1, created: st.index, modified: st.index, children: map[string]bool{}}
	st.nodes[api.Parent(path)].children[api.Base(path)] = true
	st.publishLocked(api.EventCreated, path, 1)
	st.publishLocked(api.EventChildrenChanged, api.Parent(path), st.nodes[api.Parent(path)].version)
}

// checkPrev applies prev_version ("", "any", "none" or N) to existing.
func checkPrev(path string, existing *node, prev string, mustExist bool) error {
	switch prev {
	case "", "any":
		if mustExist && existing == nil {
			return api.Errorf(api.CodeNotFound, "%s does not exist", path)
		}
		return nil
	case "none":
		if existing != nil {
			return api.Errorf(api.CodePreconditionFailed, "%s exists", path)
		}
		return nil
	}
	var want uint64
	if _, err := fmt.Sscan(prev, &want); err != nil {
		return api.Errorf(api.CodeInvalidArgument, "bad prev_version %q", prev)
	}
	if existing == nil {
		return api.Errorf(api.CodeNotFound, "%s does not exist", path)
	}
	if existing.version != want {
		return api.Errorf(api.CodePreconditionFailed, "%s is at version %d, not %d", path, existing.version, want)
	}
	return nil
}

func (st *state) deleteLocked(path, prev string, recursive bool, sessionID string) (*api.Deleted, error) {
	if sessionID != "" {
		if err := st.liveSessionLocked(sessionID); err != nil {
			return nil, err
		}
	}
	if path == "/" {
		return nil, api.Errorf(api.CodeInvalidArgument, "cannot delete the root")
	}
	existing := st.nodes[path]
	if err := checkPrev(path, existing, prev, true); err != nil {
		return nil, err
	}
	if len(existing.children) > 0 && !recursive {
		return nil, api.Errorf(api.CodePreconditionFailed, "%s has children", path)
	}
	st.index++
	st.removeLocked(path)
	return &api.Deleted{Deleted: true, Index: st.index}, nil
}

// removeLocked deletes path and its subtree.
func (st *state) removeLocked(path string) {
	n := st.nodes[path]
	if n == nil {
		return
	}
	for child := range n.children {
		st.removeLocked(api.Join(path, child))
	}
	if n.owner != "" {
		if s := st.sessions[n.owner]; s != nil {
			delete(s.ephemerals, path)
		}
	}
	delete(st.nodes, path)
	delete(st.nodes[api.Parent(path)].children, api.Base(path))
	st.publishLocked(api.EventDeleted, path, n.version)
	st.publishLocked(api.EventChildrenChanged, api.Parent(path), st.nodes[api.Parent(path)].version)
}

func (st *state) getLocked(path string) (*api.Node, error) {
	n := st.nodes[path]
	if n == nil {
		return nil, api.Errorf(api.CodeNotFound, "%s does not exist", path)
	}
	return &api.Node{Path: path, Value: n.value, Version: n.version, CreatedIndex: n.created,
		ModifiedIndex: n.modified, Ephemeral: n.owner != "", OwnerHandle: handleOf(n.owner),
		ChildrenCount: len(n.children), Index: st.index}, nil
}

func (st *state) childrenLocked(path string) (*api.Children, error) {
	n := st.nodes[path]
	if n == nil {
		return nil, api.Errorf(api.CodeNotFound, "%s does not exist", path)
	}
	names := make([]string, 0, len(n.children))
	for name := range n.children {
		names = append(names, name)
	}
	sort.Strings(names)
	return &api.Children{Path: path, Children: names, Index: st.index}, nil
}

// endSessionLocked deletes session id and its ephemeral nodes.
func (st *state) endSessionLocked(id string) bool {
	s := st.sessions[id]
	if s == nil {
		return false
	}
	st.index++
	paths := make([]string, 0, len(s.ephemerals))
	for p := range s.ephemerals {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		st.removeLocked(p)
	}
	delete(st.sessions, id)
	for _, r := range st.registries {
		r.sessionEndedLocked(id)
	}
	return true
}

func (st *state) createSessionLocked(timeoutMs uint64) *api.Session {
	st.index++
	st.lastSession++
	id := fmt.Sprintf("0x%016x", st.lastSession)
	timeoutMs = min(max(timeoutMs, 100), 60000)
	st.sessions[id] = &session{timeoutMs: timeoutMs, ephemerals: map[string]bool{}, replies: map[uint64]storedReply{}}
	return &api.Session{SessionID: id, SessionHandle: handleOf(id), TimeoutMs: timeoutMs, Index: st.index}
}

// handleOf is the public handle of session id, as latch's replies show it
// for a node's owner, a lock's holder or an election's leader ("" for no
// session).
func handleOf(id string) string {
	handle, err := api.SessionHandleOf(id)
	if err != nil {
		return ""
	}
	return handle
}

// trimPath turns the {path...} wildcard into a node path.
func trimPath(wildcard string) string {
	return "/" + wildcard
}
