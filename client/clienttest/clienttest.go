// Package clienttest is an in-memory fake of latch's HTTP API (docs/api.md) for
// tests of code that uses the client: a Cluster of N Servers sharing one
// state, each on its own loopback port, with faults a test can switch on
// (a server down, failing the next requests with a chosen code and leader
// hint, losing the reply of an applied write, hanging).
//
// It is not latch: there is no consensus and no session expiry by time (call
// Expire). It implements the node API (PUT/GET/DELETE /v1/kv with
// prev_version, ephemeral, sequential, mkdir -p, children, recursive delete),
// sessions with request_seq deduplication and batched heartbeats, watches
// (POST /v1/watch with known_index and persistent, and the session's
// Server-Sent Events stream), locks (/v1/lock/acquire|release with wait_ms,
// GET /v1/lock/{name}), elections (/v1/election/join|resign, GET
// /v1/election/{role}), GET /v1/status, /v1/cluster/members and /healthz,
// and every successful reply carries X-Latch-Index.
//
// Watches are server-local as in latch: a watch lives on the server that
// registered it and fires on that server's stream of the session, and a
// server accepts one only while the session's stream is open there. When a
// stream ends (the client leaves, EndStreams, Stop, a newer stream, the
// session's end) that server drops the session's watches and queued events,
// and the client must re-register with known_index.
package clienttest

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/latch-io/latch/api"
)

// Cluster is a set of fake servers over one shared state.
type Cluster struct {
	servers []*Server
	state   *state
}

// NewCluster starts n fake servers on loopback ports. Close stops them.
func NewCluster(n int) (*Cluster, error) {
	c := &Cluster{state: newState()}
	for i := 0; i < n; i++ {
		s := &Server{cluster: c, name: fmt.Sprintf("n%d", i+1)}
		listener, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("clienttest: listen: %w", err)
		}
		s.addr = listener.Addr().String()
		s.serve(listener)
		c.servers = append(c.servers, s)
	}
	return c, nil
}

// URLs returns the servers' base URLs, in order.
func (c *Cluster) URLs() []string {
	urls := make([]string, len(c.servers))
	for i, s := range c.servers {
		urls[i] = s.URL()
	}
	return urls
}

// Server returns the i-th server (0-based).
func (c *Cluster) Server(i int) *Server { return c.servers[i] }

// Close stops every server.
func (c *Cluster) Close() {
	for _, s := range c.servers {
		s.Stop()
	}
}

// Index returns the cluster's applied index (one per write).
func (c *Cluster) Index() uint64 {
	c.state.mu.Lock()
	defer c.state.mu.Unlock()
	return c.state.index
}

// Expire ends session id as if it timed out: its ephemeral nodes go.
func (c *Cluster) Expire(id string) {
	c.state.mu.Lock()
	defer c.state.mu.Unlock()
	c.state.endSessionLocked(id)
}

// SessionByHandle returns the id of the live session whose public handle is
// handle (as the fake's reads show it): a test's shortcut to act on a
// session it did not create. The API never maps a handle back to an id.
func (c *Cluster) SessionByHandle(handle string) (string, bool) {
	c.state.mu.Lock()
	defer c.state.mu.Unlock()
	for id := range c.state.sessions {
		if handleOf(id) == handle {
			return id, true
		}
	}
	return "", false
}

// Heartbeats returns how many heartbeats session id received, on any server.
func (c *Cluster) Heartbeats(id string) int {
	c.state.mu.Lock()
	defer c.state.mu.Unlock()
	if s := c.state.sessions[id]; s != nil {
		return s.heartbeats
	}
	return 0
}

// Request is one request a Server received.
type Request struct {
	Method string
	Path   string // URL path, unescaped
	Query  url.Values
	Time   time.Time
}

// Server is one fake server.
type Server struct {
	cluster *Cluster
	name    string
	addr    string

	mu          sync.Mutex // guards the fields below
	httpServer  *http.Server
	failures    []failure // answered, in order, before handling requests
	lostReplies int       // writes to apply and then answer 503
	hang        bool
	requests    []Request
}

type failure struct {
	code       api.Code
	leaderHint string
}

// URL returns the server's base URL, e.g. "http://127.0.0.1:41234".
func (s *Server) URL() string { return "http://" + s.addr }

// Name returns the server's member name ("n1", "n2", ...).
func (s *Server) Name() string { return s.name }

// Stop closes the server's listener and connections: clients see refused
// connections until Start.
func (s *Server) Stop() {
	s.mu.Lock()
	hs := s.httpServer
	s.httpServer = nil
	s.mu.Unlock()
	if hs != nil {
		_ = hs.Close()
	}
	st := s.cluster.state
	st.mu.Lock()
	if r := st.registries[s.name]; r != nil {
		r.endAllLocked("server stopped")
	}
	st.mu.Unlock()
}

// Start listens again on the server's address after Stop.
func (s *Server) Start() error {
	listener, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("clienttest: relisten on %s: %w", s.addr, err)
	}
	s.serve(listener)
	return nil
}

func (s *Server) serve(listener net.Listener) {
	hs := &http.Server{Handler: s.handler(), ReadHeaderTimeout: 10 * time.Second}
	s.mu.Lock()
	s.httpServer = hs
	s.mu.Unlock()
	go func() { _ = hs.Serve(listener) }()
}

// FailNext makes the next n requests fail with code (and, for
// api.CodeUnavailable, the leader hint, when not empty) without being
// handled.
func (s *Server) FailNext(n int, code api.Code, leaderHint string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := 0; i < n; i++ {
		s.failures = append(s.failures, failure{code: code, leaderHint: leaderHint})
	}
}

// LoseNextReplies makes the next n writes (PUT, DELETE) apply and then
// answer 503, as when a reply is lost in a failover.
func (s *Server) LoseNextReplies(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lostReplies += n
}

// Hang makes every request wait until its client gives up, while on.
func (s *Server) Hang(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hang = on
}

// Requests returns the requests this server received, oldest first.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// handler routes the API and applies the server's faults first.
func (s *Server) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /v1/status", s.handleStatus)
	mux.HandleFunc("GET /v1/cluster/members", s.handleMembers)
	mux.HandleFunc("PUT /v1/kv/{path...}", s.handlePut)
	mux.HandleFunc("GET /v1/kv/{path...}", s.handleGet)
	mux.HandleFunc("DELETE /v1/kv/{path...}", s.handleDelete)
	mux.HandleFunc("POST /v1/session/create", s.handleSessionCreate)
	mux.HandleFunc("POST /v1/session/heartbeat", s.handleHeartbeat)
	mux.HandleFunc("POST /v1/session/close", s.handleSessionClose)
	mux.HandleFunc("GET /v1/session/{id}", s.handleSessionGet)
	mux.HandleFunc("GET /v1/session/{id}/events", s.handleEvents)
	mux.HandleFunc("POST /v1/watch", s.handleWatch)
	mux.HandleFunc("DELETE /v1/watch/{id}", s.handleCancelWatch)
	mux.HandleFunc("POST /v1/lock/acquire", s.handleLockAcquire)
	mux.HandleFunc("POST /v1/lock/release", s.handleLockRelease)
	mux.HandleFunc("GET /v1/lock/{name}", s.handleLockState)
	mux.HandleFunc("POST /v1/election/join", s.handleElectionJoin)
	mux.HandleFunc("POST /v1/election/resign", s.handleElectionResign)
	mux.HandleFunc("GET /v1/election/{role}", s.handleElectionState)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.intercept(w, r) {
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// intercept records r and applies hang and FailNext; it reports whether
// it answered r.
func (s *Server) intercept(w http.ResponseWriter, r *http.Request) bool {
	s.mu.Lock()
	s.requests = append(s.requests, Request{Method: r.Method, Path: r.URL.Path, Query: r.URL.Query(), Time: time.Now()})
	hang := s.hang
	var fail *failure
	if len(s.failures) > 0 {
		fail = &s.failures[0]
		s.failures = s.failures[1:]
	}
	s.mu.Unlock()
	if hang {
		<-r.Context().Done()
		return true
	}
	if fail != nil {
		writeError(w, &api.Error{Code: fail.code, Message: "injected failure", LeaderHint: fail.leaderHint})
		return true
	}
	return false
}

// takeLostReply reports whether this write's reply is to be lost.
func (s *Server) takeLostReply() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lostReplies > 0 {
		s.lostReplies--
		return true
	}
	return false
}

// decodeBody decodes r's JSON body into into; on failure it writes a 400
// invalid_argument and returns false.
func decodeBody(w http.ResponseWriter, r *http.Request, into any) bool {
	if err := json.NewDecoder(r.Body).Decode(into); err != nil {
		writeError(w, api.Errorf(api.CodeInvalidArgument, "bad JSON body: %v", err))
		return false
	}
	return true
}

// reply writes a result or an error: the reply of every handler.
func reply(w http.ResponseWriter, index uint64, result any, err error) {
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set(api.HeaderIndex, fmt.Sprint(index))
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(result)
}

func writeError(w http.ResponseWriter, err error) {
	e, ok := err.(*api.Error)
	if !ok {
		e = api.Errorf(api.CodeInternal, "%v", err)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.Code.Status())
	_ = json.NewEncoder(w).Encode(api.ErrorBody{Error: *e})
}
