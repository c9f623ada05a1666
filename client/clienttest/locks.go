package clienttest

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/latch-io/latch/api"
)

// Lock and election queues: ephemeral sequential children of
// /locks/{name} (lock-NNNNNNNNNN) and /elections/{role}
// (candidate-NNNNNNNNNN), the first one holding or leading, each token the
// created index of its node, as in docs/api.md.

// queueMember is one node of a queue.
type queueMember struct {
	path  string
	owner string
	token uint64
	value string
}

// queueLocked lists dir's members in order.
func (st *state) queueLocked(dir string) []queueMember {
	n := st.nodes[dir]
	if n == nil {
		return nil
	}
	children, _ := st.childrenLocked(dir)
	members := make([]queueMember, 0, len(children.Children))
	for _, name := range children.Children {
		path := api.Join(dir, name)
		child := st.nodes[path]
		members = append(members, queueMember{path: path, owner: child.owner, token: child.created, value: child.value})
	}
	return members
}

// enqueueLocked returns session's member of dir, creating it if needed; an
// existing member gets value, as the real server does.
func (st *state) enqueueLocked(dir, prefix, session, value string) (queueMember, error) {
	for _, m := range st.queueLocked(dir) {
		if m.owner != session {
			continue
		}
		if m.value != value {
			if _, err := st.putLocked(putArgs{path: m.path, value: value, ephemeral: true, sessionID: session}); err != nil {
				return queueMember{}, err
			}
			m.value = value
		}
		return m, nil
	}
	node, err := st.putLocked(putArgs{path: dir + "/" + prefix, value: value, ephemeral: true, sequential: true, sessionID: session})
	if err != nil {
		return queueMember{}, err
	}
	return queueMember{path: node.Path, owner: session, token: node.CreatedIndex, value: value}, nil
}

// dequeueLocked removes the first member of dir that matches, as one write
// (the index advances), and reports whether there was one.
func (st *state) dequeueLocked(dir string, matches func(queueMember) bool) bool {
	for _, m := range st.queueLocked(dir) {
		if matches(m) {
			st.index++
			st.removeLocked(m.path)
			return true
		}
	}
	return false
}

// place returns how many members are ahead of path, and the one just ahead.
func place(members []queueMember, path string) (ahead int, predecessor string, found bool) {
	for i, m := range members {
		if m.path == path {
			if i > 0 {
				predecessor = members[i-1].path
			}
			return i, predecessor, true
		}
	}
	return 0, "", false
}

// queueDir validates a lock name or election role and returns its directory.
func queueDir(root, name string) (string, error) {
	if name == "" || strings.Contains(name, "/") {
		return "", api.Errorf(api.CodeInvalidArgument, "name %q must be one non-empty path segment", name)
	}
	dir := root + "/" + name
	return dir, api.ValidatePath(dir)
}

func (s *Server) handleLockAcquire(w http.ResponseWriter, r *http.Request) {
	var req api.LockRequest
	if !decodeBody(w, r, &req) {
		return
	}
	dir, err := queueDir("/locks", req.Name)
	if err != nil {
		writeError(w, err)
		return
	}
	deadline := time.NewTimer(time.Duration(req.WaitMs) * time.Millisecond)
	defer deadline.Stop()
	st := s.cluster.state
	st.mu.Lock()
	if err := st.liveSessionLocked(req.SessionID); err != nil {
		st.mu.Unlock()
		writeError(w, err)
		return
	}
	mine, err := st.enqueueLocked(dir, "lock-", req.SessionID, "")
	if err != nil {
		st.mu.Unlock()
		writeError(w, err)
		return
	}
	st.acquires++
	for {
		ahead, _, found := place(st.queueLocked(dir), mine.path)
		index, changed := st.index, st.changed
		if !found {
			st.mu.Unlock()
			writeError(w, api.Errorf(api.CodeSessionExpired, "the session's place in lock %q is gone", req.Name))
			return
		}
		if ahead == 0 {
			st.mu.Unlock()
			reply(w, index, &api.Lock{Held: true, SessionHandle: handleOf(req.SessionID), FencingToken: mine.token, Path: mine.path, Index: index}, nil)
			return
		}
		st.mu.Unlock()
		select {
		case <-changed:
			st.mu.Lock()
		case <-deadline.C:
			writeLockNotHeld(w, req.Name, handleOf(req.SessionID), ahead, index)
			return
		case <-r.Context().Done():
			return
		}
	}
}

// writeLockNotHeld writes docs/api.md's 409 for an acquire that gave up.
func writeLockNotHeld(w http.ResponseWriter, name, handle string, position int, index uint64) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(api.CodeLockNotHeld.Status())
	_ = json.NewEncoder(w).Encode(struct {
		Error         api.Error `json:"error"`
		Held          bool      `json:"held"`
		SessionHandle string    `json:"session_handle"`
		Position      int       `json:"position"`
		Index         uint64    `json:"index"`
	}{*api.Errorf(api.CodeLockNotHeld, "lock %s not acquired within wait_ms", name), false, handle, position, index})
}

func (s *Server) handleLockRelease(w http.ResponseWriter, r *http.Request) {
	var req api.LockRequest
	if !decodeBody(w, r, &req) {
		return
	}
	dir, err := queueDir("/locks", req.Name)
	if err != nil {
		writeError(w, err)
		return
	}
	st := s.cluster.state
	st.mu.Lock()
	defer st.mu.Unlock()
	if err := st.liveSessionLocked(req.SessionID); err != nil {
		writeError(w, err)
		return
	}
	if st.dequeueLocked(dir, func(m queueMember) bool {
		return m.owner == req.SessionID && (req.FencingToken == 0 || m.token == req.FencingToken)
	}) {
		reply(w, st.index, &api.Released{Released: true, Index: st.index}, nil)
		return
	}
	writeError(w, api.Errorf(api.CodeLockNotHeld, "session %s holds no place in lock %q with token %d",
		req.SessionID, req.Name, req.FencingToken))
}

func (s *Server) handleLockState(w http.ResponseWriter, r *http.Request) {
	dir, err := queueDir("/locks", r.PathValue("name"))
	if err != nil {
		writeError(w, err)
		return
	}
	st := s.cluster.state
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.nodes[dir] == nil {
		writeError(w, api.Errorf(api.CodeNotFound, "lock %q not found", r.PathValue("name")))
		return
	}
	out := &api.LockState{Index: st.index}
	if members := st.queueLocked(dir); len(members) > 0 {
		out.Holder = &api.Holder{SessionHandle: handleOf(members[0].owner), FencingToken: members[0].token, Path: members[0].path}
		out.Waiters = len(members) - 1
	}
	reply(w, st.index, out, nil)
}

func (s *Server) handleElectionJoin(w http.ResponseWriter, r *http.Request) {
	var req api.ElectionRequest
	if !decodeBody(w, r, &req) {
		return
	}
	dir, err := queueDir("/elections", req.Role)
	if err != nil {
		writeError(w, err)
		return
	}
	st := s.cluster.state
	st.mu.Lock()
	defer st.mu.Unlock()
	if err := st.liveSessionLocked(req.SessionID); err != nil {
		writeError(w, err)
		return
	}
	mine, err := st.enqueueLocked(dir, "candidate-", req.SessionID, req.Value)
	if err != nil {
		writeError(w, err)
		return
	}
	ahead, predecessor, _ := place(st.queueLocked(dir), mine.path)
	reply(w, st.index, &api.Candidacy{IsLeader: ahead == 0, SessionHandle: handleOf(req.SessionID), FencingToken: mine.token, Watching: predecessor, Index: st.index}, nil)
}

func (s *Server) handleElectionResign(w http.ResponseWriter, r *http.Request) {
	var req api.ElectionRequest
	if !decodeBody(w, r, &req) {
		return
	}
	dir, err := queueDir("/elections", req.Role)
	if err != nil {
		writeError(w, err)
		return
	}
	st := s.cluster.state
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.dequeueLocked(dir, func(m queueMember) bool { return m.owner == req.SessionID }) {
		reply(w, st.index, &api.Resigned{Resigned: true, Index: st.index}, nil)
		return
	}
	writeError(w, api.Errorf(api.CodeNotFound, "session %s is not a candidate for %q", req.SessionID, req.Role))
}

func (s *Server) handleElectionState(w http.ResponseWriter, r *http.Request) {
	dir, err := queueDir("/elections", r.PathValue("role"))
	if err != nil {
		writeError(w, err)
		return
	}
	st := s.cluster.state
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.nodes[dir] == nil {
		writeError(w, api.Errorf(api.CodeNotFound, "election %q not found", r.PathValue("role")))
		return
	}
	members := st.queueLocked(dir)
	out := &api.ElectionState{Candidates: len(members), Index: st.index}
	if len(members) > 0 {
		out.Leader = &api.Leader{SessionHandle: handleOf(members[0].owner), Value: members[0].value, FencingToken: members[0].token}
	}
	reply(w, st.index, out, nil)
}

// Acquires returns how many lock acquire calls reached a queue.
func (c *Cluster) Acquires() int {
	c.state.mu.Lock()
	defer c.state.mu.Unlock()
	return c.state.acquires
}
