package clienttest

import (
	"net/http"
	"strconv"

	"github.com/latch-io/latch/api"
)

func (s *Server) handleStatus(w http.ResponseWriter, r *http.Request) {
	st := s.cluster.state
	st.mu.Lock()
	index := st.index
	st.mu.Unlock()
	role := "follower"
	if s == s.cluster.servers[0] {
		role = "leader"
	}
	reply(w, index, &api.Status{ID: s.name, Name: s.name, Role: role, Term: 1, LeaderID: s.cluster.servers[0].name,
		LeaderClient: s.cluster.servers[0].URL(), CommitIndex: index, AppliedIndex: index, Members: s.cluster.members()}, nil)
}

func (s *Server) handleMembers(w http.ResponseWriter, r *http.Request) {
	reply(w, s.cluster.Index(), &api.Members{Members: s.cluster.members(), Index: s.cluster.Index()}, nil)
}

func (c *Cluster) members() []api.Member {
	members := make([]api.Member, len(c.servers))
	for i, s := range c.servers {
		members[i] = api.Member{ID: s.name, Name: s.name, PeerURL: "http://" + s.addr + "/peer", ClientURL: s.URL()}
	}
	return members
}

func (s *Server) handlePut(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var body api.PutRequest
	if !decodeBody(w, r, &body) {
		return
	}
	args := putArgs{path: trimPath(r.PathValue("path")), value: body.Value, prevVersion: q.Get("prev_version"),
		ephemeral: q.Get("ephemeral") == "true", sequential: q.Get("sequential") == "true", sessionID: q.Get("session_id")}
	s.write(w, r, func(st *state) (uint64, any, error) {
		node, err := st.putLocked(args)
		return st.index, node, err
	})
}

func (s *Server) handleDelete(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	path := trimPath(r.PathValue("path"))
	s.write(w, r, func(st *state) (uint64, any, error) {
		deleted, err := st.deleteLocked(path, q.Get("prev_version"), q.Get("recursive") == "true", q.Get("session_id"))
		return st.index, deleted, err
	})
}

// write applies a PUT or DELETE once per (session_id, request_seq) and
// answers with the first result; it loses the reply when told to.
func (s *Server) write(w http.ResponseWriter, r *http.Request, apply func(*state) (uint64, any, error)) {
	if err := api.ValidatePath(trimPath(r.PathValue("path"))); err != nil {
		writeError(w, err)
		return
	}
	q := r.URL.Query()
	sessionID := q.Get("session_id")
	seq, err := parseSeq(q.Get("request_seq"))
	if err != nil {
		writeError(w, err)
		return
	}
	st := s.cluster.state
	st.mu.Lock()
	var stored storedReply
	sess := st.sessions[sessionID]
	if previous, seen := sess.reply(seq); seen {
		stored = previous
	} else {
		stored.index, stored.result, stored.err = apply(st)
		if sess != nil && seq != 0 {
			sess.replies[seq] = stored
		}
	}
	st.mu.Unlock()
	if s.takeLostReply() {
		writeError(w, api.Errorf(api.CodeUnavailable, "injected lost reply (the write was applied)"))
		return
	}
	reply(w, stored.index, stored.result, stored.err)
}

func (sess *session) reply(seq uint64) (storedReply, bool) {
	if sess == nil || seq == 0 {
		return storedReply{}, false
	}
	stored, seen := sess.replies[seq]
	return stored, seen
}

func parseSeq(raw string) (uint64, error) {
	if raw == "" {
		return 0, nil
	}
	seq, err := strconv.ParseUint(raw, 10, 64)
	if err != nil {
		return 0, api.Errorf(api.CodeInvalidArgument, "bad request_seq %q", raw)
	}
	return seq, nil
}

func (s *Server) handleGet(w http.ResponseWriter, r *http.Request) {
	path := trimPath(r.PathValue("path"))
	if err := api.ValidatePath(path); err != nil {
		writeError(w, err)
		return
	}
	q := r.URL.Query()
	switch q.Get("consistency") {
	case "", api.Linearizable, api.Stale:
	default:
		writeError(w, api.Errorf(api.CodeInvalidArgument, "bad consistency %q", q.Get("consistency")))
		return
	}
	minIndex, err := parseSeq(q.Get("min_index"))
	if err != nil {
		writeError(w, err)
		return
	}
	st := s.cluster.state
	st.mu.Lock()
	defer st.mu.Unlock()
	if minIndex > st.index {
		writeError(w, api.Errorf(api.CodeUnavailable, "min_index %d is beyond the applied index %d", minIndex, st.index))
		return
	}
	if q.Get("children") == "true" {
		children, err := st.childrenLocked(path)
		reply(w, st.index, children, err)
		return
	}
	node, err := st.getLocked(path)
	reply(w, st.index, node, err)
}

func (s *Server) handleSessionCreate(w http.ResponseWriter, r *http.Request) {
	var body api.SessionCreateRequest
	if !decodeBody(w, r, &body) {
		return
	}
	st := s.cluster.state
	st.mu.Lock()
	defer st.mu.Unlock()
	created := st.createSessionLocked(body.TimeoutMs)
	reply(w, st.index, created, nil)
}

func (s *Server) handleHeartbeat(w http.ResponseWriter, r *http.Request) {
	var body api.SessionRequest
	if !decodeBody(w, r, &body) {
		return
	}
	st := s.cluster.state
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(body.SessionIDs) == 0 {
		sess := st.sessions[body.SessionID]
		if sess == nil {
			writeError(w, api.Errorf(api.CodeSessionExpired, "session %s is gone", body.SessionID))
			return
		}
		sess.heartbeats++
		reply(w, st.index, &api.Heartbeat{Alive: true, Index: st.index}, nil)
		return
	}
	out := &api.Heartbeat{Alive: true, Index: st.index}
	for _, id := range body.SessionIDs {
		if sess := st.sessions[id]; sess != nil {
			sess.heartbeats++
		} else {
			out.Alive = false
			out.Expired = append(out.Expired, id)
		}
	}
	reply(w, st.index, out, nil)
}

func (s *Server) handleSessionClose(w http.ResponseWriter, r *http.Request) {
	s.sessionCall(w, r, func(st *state, id string, sess *session) (any, error) {
		st.endSessionLocked(id)
		return &api.Closed{Closed: true, Index: st.index}, nil
	})
}

// sessionCall decodes {session_id}, finds the session (410 if gone) and
// runs fn on it under the state lock.
func (s *Server) sessionCall(w http.ResponseWriter, r *http.Request, fn func(*state, string, *session) (any, error)) {
	var body api.SessionRequest
	if !decodeBody(w, r, &body) {
		return
	}
	st := s.cluster.state
	st.mu.Lock()
	defer st.mu.Unlock()
	if err := st.liveSessionLocked(body.SessionID); err != nil {
		writeError(w, err)
		return
	}
	result, err := fn(st, body.SessionID, st.sessions[body.SessionID])
	reply(w, st.index, result, err)
}

func (s *Server) handleSessionGet(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	st := s.cluster.state
	st.mu.Lock()
	defer st.mu.Unlock()
	sess := st.sessions[id]
	if sess == nil {
		writeError(w, api.Errorf(api.CodeSessionExpired, "session %s has expired or was closed", id))
		return
	}
	reply(w, st.index, &api.Session{SessionID: id, SessionHandle: handleOf(id), TimeoutMs: sess.timeoutMs,
		EphemeralCount: len(sess.ephemerals), Index: st.index}, nil)
}
