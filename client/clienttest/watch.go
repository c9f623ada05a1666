package clienttest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/latch-io/latch/api"
)

// Registration is one watch registration a server accepted.
type Registration struct {
	Server  string // the server's name
	Request api.WatchRequest
	Reply   api.Watch
}

// registry is one server's watches and event queues, per session. It is
// guarded by state.mu.
type registry struct {
	sessions map[string]*watchSession
	// refuse is how many more registrations to refuse as if the session
	// had no stream here (RefuseNextWatches).
	refuse int
}

type watchSession struct {
	watches map[string]*watch
	queue   []api.Event
	stream  *stream // the attached stream, or nil
}

type watch struct {
	id         string
	path       string
	recursive  bool
	persistent bool
	after      uint64          // fires for events above this index
	seen       map[string]bool // paths notified at seenIndex
	seenIndex  uint64
}

// stream is an attached event stream: wake signals queued events, and end
// (with reason set) tells the handler to finish.
type stream struct {
	wake   chan struct{} // capacity 1
	end    chan struct{}
	reason string
}

func (r *registry) sessionLocked(id string) *watchSession {
	ws := r.sessions[id]
	if ws == nil {
		ws = &watchSession{watches: map[string]*watch{}}
		r.sessions[id] = ws
	}
	return ws
}

// endStreamLocked ends session id's stream with reason and drops its
// watches and queued events, as latch does when a stream is lost.
func (r *registry) endStreamLocked(id, reason string) {
	ws := r.sessions[id]
	if ws == nil {
		return
	}
	if ws.stream != nil {
		ws.stream.reason = reason
		close(ws.stream.end)
	}
	delete(r.sessions, id)
}

func (r *registry) sessionEndedLocked(id string) { r.endStreamLocked(id, "session ended") }

func (r *registry) endAllLocked(reason string) {
	for id := range r.sessions {
		r.endStreamLocked(id, reason)
	}
}

func (st *state) registryLocked(server string) *registry {
	r := st.registries[server]
	if r == nil {
		r = &registry{sessions: map[string]*watchSession{}}
		st.registries[server] = r
	}
	return r
}

// matches reports whether a watch on w.path fires for a change at path.
func (w *watch) matches(path string) bool {
	if path == w.path {
		return true
	}
	return w.recursive && (w.path == "/" || strings.HasPrefix(path, w.path+"/"))
}

// publishLocked records a change at the current index and fires the
// watches it matches, on every server.
func (st *state) publishLocked(kind, path string, version uint64) {
	ev := api.Event{Event: kind, Path: path, Version: version, Index: st.index}
	st.history = append(st.history, ev)
	close(st.changed)
	st.changed = make(chan struct{})
	for _, r := range st.registries {
		for _, ws := range r.sessions {
			for id, w := range ws.watches {
				if w.matches(path) && ev.Index > w.after {
					ws.fireLocked(w, ev)
					if !w.persistent {
						delete(ws.watches, id)
					}
				}
			}
		}
	}
}

// fireLocked queues ev for watch w, once per (index, path).
func (ws *watchSession) fireLocked(w *watch, ev api.Event) {
	if ev.Index != w.seenIndex {
		w.seenIndex, w.seen = ev.Index, map[string]bool{}
	}
	if w.seen[ev.Path] {
		return
	}
	w.seen[ev.Path] = true
	ev.WatchID = w.id
	ws.queue = append(ws.queue, ev)
	if ws.stream != nil {
		select {
		case ws.stream.wake <- struct{}{}:
		default:
		}
	}
}

// changedSinceLocked returns the newest event after index that w matches.
func (st *state) changedSinceLocked(w *watch, index uint64) (api.Event, bool) {
	for i := len(st.history) - 1; i >= 0 && st.history[i].Index > index; i-- {
		if w.matches(st.history[i].Path) {
			return st.history[i], true
		}
	}
	return api.Event{}, false
}

// handleWatch registers a watch, as latch does only for a session whose
// event stream is open on this server.
func (s *Server) handleWatch(w http.ResponseWriter, r *http.Request) {
	var req api.WatchRequest
	if !decodeBody(w, r, &req) {
		return
	}
	if err := api.ValidatePath(req.Path); err != nil {
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
	reg := st.registryLocked(s.name)
	if ws := reg.sessions[req.SessionID]; ws == nil || ws.stream == nil || reg.refuse > 0 {
		reg.refuse = max(reg.refuse-1, 0)
		writeError(w, api.Errorf(api.CodePreconditionFailed,
			"session %s has no event stream open on member %s: open GET /v1/session/%s/events on this member first",
			req.SessionID, s.name, req.SessionID))
		return
	}
	st.lastWatch++
	at := st.index
	wt := &watch{id: api.FormatID(st.lastWatch), path: req.Path, recursive: req.Recursive,
		persistent: req.Persistent, after: max(at, req.KnownIndex)}
	ws := reg.sessionLocked(req.SessionID)
	fired := false
	if req.KnownIndex > 0 && req.KnownIndex < at {
		if ev, changed := st.changedSinceLocked(wt, req.KnownIndex); changed {
			ev.Index = at
			ws.fireLocked(wt, ev)
			fired = true
		}
	}
	if req.Persistent || !fired {
		ws.watches[wt.id] = wt
	}
	var version uint64
	if n := st.nodes[req.Path]; n != nil {
		version = n.version
	}
	out := api.Watch{WatchID: wt.id, CurrentVersion: version, Index: at}
	st.registrations = append(st.registrations, Registration{Server: s.name, Request: req, Reply: out})
	reply(w, at, &out, nil)
}

// handleEvents serves a session's event stream (Server-Sent Events) until
// the client leaves or the stream is ended; either way the session's
// watches on this server are dropped.
func (s *Server) handleEvents(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	st := s.cluster.state
	st.mu.Lock()
	if err := st.liveSessionLocked(id); err != nil {
		st.mu.Unlock()
		writeError(w, err)
		return
	}
	reg := st.registryLocked(s.name)
	ws := reg.sessionLocked(id)
	if ws.stream != nil {
		reg.endStreamLocked(id, "replaced")
		ws = reg.sessionLocked(id)
	}
	str := &stream{wake: make(chan struct{}, 1), end: make(chan struct{})}
	ws.stream = str
	index := st.index
	st.mu.Unlock()

	flusher, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set(api.HeaderIndex, fmt.Sprint(index))
	w.WriteHeader(http.StatusOK)
	if flusher != nil {
		flusher.Flush()
	}
	defer func() {
		st.mu.Lock()
		if reg.sessions[id] == ws && ws.stream == str {
			reg.endStreamLocked(id, "closed")
		}
		st.mu.Unlock()
	}()
	for {
		for _, ev := range s.takeEvents(ws, str) {
			data, _ := json.Marshal(ev)
			if _, err := fmt.Fprintf(w, "data: %s\n\n", data); err != nil {
				return
			}
		}
		if flusher != nil {
			flusher.Flush()
		}
		select {
		case <-str.wake:
		case <-str.end:
			st.mu.Lock()
			reason := str.reason
			st.mu.Unlock()
			data, _ := json.Marshal(map[string]string{"reason": reason})
			_, _ = fmt.Fprintf(w, "event: end\ndata: %s\n\n", data)
			return
		case <-r.Context().Done():
			return
		}
	}
}

// takeEvents empties ws's queue, unless str is no longer its stream.
func (s *Server) takeEvents(ws *watchSession, str *stream) []api.Event {
	st := s.cluster.state
	st.mu.Lock()
	defer st.mu.Unlock()
	if ws.stream != str {
		return nil
	}
	events := ws.queue
	ws.queue = nil
	return events
}

// EndStreams ends every event stream of every server with reason (as a
// server does for a slow consumer) and drops the sessions' watches there.
func (c *Cluster) EndStreams(reason string) {
	c.state.mu.Lock()
	defer c.state.mu.Unlock()
	for _, r := range c.state.registries {
		r.endAllLocked(reason)
	}
}

// RefuseNextWatches makes server i refuse the next n watch registrations
// with latch's 409 precondition_failed for a session without an event
// stream there, although the session's stream is open: as when the server
// ended the stream just before the registration arrived.
func (c *Cluster) RefuseNextWatches(i, n int) {
	c.state.mu.Lock()
	defer c.state.mu.Unlock()
	c.state.registryLocked(c.servers[i].name).refuse += n
}

// Registrations returns every watch registration accepted so far.
func (c *Cluster) Registrations() []Registration {
	c.state.mu.Lock()
	defer c.state.mu.Unlock()
	return append([]Registration(nil), c.state.registrations...)
}

// Streams returns how many event streams are attached on server i.
func (c *Cluster) Streams(i int) int {
	c.state.mu.Lock()
	defer c.state.mu.Unlock()
	n := 0
	if r := c.state.registries[c.servers[i].name]; r != nil {
		for _, ws := range r.sessions {
			if ws.stream != nil {
				n++
			}
		}
	}
	return n
}

// WatchCount returns how many watches server i holds.
func (c *Cluster) WatchCount(i int) int {
	c.state.mu.Lock()
	defer c.state.mu.Unlock()
	n := 0
	if r := c.state.registries[c.servers[i].name]; r != nil {
		for _, ws := range r.sessions {
			n += len(ws.watches)
		}
	}
	return n
}

// handleCancelWatch serves DELETE /v1/watch/{id}?session_id= (latch's
// cancel of a watch on the server that holds it).
func (s *Server) handleCancelWatch(w http.ResponseWriter, r *http.Request) {
	id, session := r.PathValue("id"), r.URL.Query().Get("session_id")
	st := s.cluster.state
	st.mu.Lock()
	defer st.mu.Unlock()
	if ws := st.registryLocked(s.name).sessions[session]; ws != nil && ws.watches[id] != nil {
		delete(ws.watches, id)
		reply(w, st.index, map[string]bool{"cancelled": true}, nil)
		return
	}
	writeError(w, api.Errorf(api.CodeNotFound, "no watch %s of session %s", id, session))
}
