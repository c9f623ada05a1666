package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/latch-io/latch/api"
)

// Reasons a Session ends, reported by Session.Err. A session the server
// expired reports an *api.Error with api.CodeSessionExpired instead.
var (
	// ErrSessionClosed: Close was called.
	ErrSessionClosed = errors.New("client: session closed")
	// ErrSessionOrphaned: Orphan was called; the server still has the
	// session until it times out.
	ErrSessionOrphaned = errors.New("client: session orphaned: keepalive stopped")
	// ErrSessionLost: no heartbeat succeeded for a whole timeout, so the
	// server has expired the session or is about to.
	ErrSessionLost = errors.New("client: session lost: no heartbeat succeeded within its timeout")
)

// Session is a server-side session kept alive by this client. Its ephemeral
// nodes (and so its locks and candidacies) last as long as it does. Methods
// are safe for concurrent use.
type Session struct {
	client  *Client
	id      string // the bearer secret: whoever knows it acts as the session
	handle  string // api.SessionHandle of id: how others' reads name it
	timeout time.Duration
	// seq is the last request_seq handed out; writes take seq+1.
	seq atomic.Uint64

	done chan struct{} // closed once, by end

	mu  sync.Mutex // guards err and lastAlive
	err error      // why the session ended; nil while it lives
	// lastAlive is when the last heartbeat answered alive was sent (on the
	// client's clock), or when the session started.
	lastAlive time.Time

	hubOnce sync.Once
	hub     *watchHub // the session's watches and event stream; set by hubOnce
}

// NewSession creates a session with the given timeout (the server clamps it
// to its range; Timeout reports the value chosen) and starts keeping it
// alive with a heartbeat every timeout/3. The client's sessions with the
// same timeout share one batched heartbeat call per interval.
func (c *Client) NewSession(ctx context.Context, timeout time.Duration) (*Session, error) {
	body, err := json.Marshal(api.SessionCreateRequest{TimeoutMs: uint64(timeout.Milliseconds())})
	if err != nil {
		return nil, err
	}
	var reply api.Session
	// Creation is not idempotent (a retry after a lost reply makes a second
	// session, which then simply times out), so it retries like a
	// session-less write.
	cl := &call{method: "POST", path: "/v1/session/create", body: body, policy: retryIfNotSent, out: &reply}
	if err := c.do(ctx, cl); err != nil {
		return nil, err
	}
	return c.startSession(reply, 0), nil
}

// ResumeSession takes over keeping alive an existing session, such as one
// created by another process. Its request_seq numbers start from the
// current wall-clock microsecond so that they keep increasing across
// processes that take turns with the session.
func (c *Client) ResumeSession(ctx context.Context, id string) (*Session, error) {
	info, err := c.SessionInfo(ctx, id)
	if err != nil {
		return nil, err
	}
	return c.startSession(*info, uint64(time.Now().UnixMicro())), nil
}

// SessionInfo reads a session's timeout and ephemeral node count.
func (c *Client) SessionInfo(ctx context.Context, id string) (*api.Session, error) {
	var reply api.Session
	cl := &call{method: "GET", path: "/v1/session/" + url.PathEscape(id), out: &reply}
	if err := c.do(ctx, cl); err != nil {
		return nil, err
	}
	return &reply, nil
}

// Heartbeat sends one heartbeat for session id. A gone session yields an
// *api.Error with api.CodeSessionExpired.
func (c *Client) Heartbeat(ctx context.Context, id string) (*api.Heartbeat, error) {
	return postSafe[api.Heartbeat](ctx, c, "/v1/session/heartbeat", api.SessionRequest{SessionID: id})
}

func (c *Client) startSession(reply api.Session, firstSeq uint64) *Session {
	s := &Session{
		client:    c,
		id:        reply.SessionID,
		handle:    sessionHandle(reply),
		timeout:   time.Duration(reply.TimeoutMs) * time.Millisecond,
		done:      make(chan struct{}),
		lastAlive: c.clock.Now(),
	}
	s.seq.Store(firstSeq)
	c.keepalives.join(c, s)
	return s
}

// sessionHandle is the handle of the session described by reply, computed
// from its id (the server's session_handle if the id is not latch's format).
func sessionHandle(reply api.Session) string {
	if handle, err := api.SessionHandleOf(reply.SessionID); err == nil {
		return handle
	}
	return reply.SessionHandle
}

// ID returns the session id. It is a bearer secret: whoever knows it can
// write, heartbeat, release, resign and close as the session. Keep it out of
// logs, values and anything others can read; name the session by Handle.
func (s *Session) ID() string { return s.id }

// Handle returns the session's public handle (api.SessionHandle of its id):
// what reads show for it as a node's owner (api.Node.OwnerHandle), a lock's
// holder or an election's leader (SessionHandle). Compare a read's handle
// with Handle to recognise this session; a handle grants nothing.
func (s *Session) Handle() string { return s.handle }

// Timeout returns the timeout the server chose.
func (s *Session) Timeout() time.Duration { return s.timeout }

// Done is closed when the session ends: Close, Orphan, expiry reported by
// the server, or a whole timeout without a successful heartbeat. Err then
// says which.
func (s *Session) Done() <-chan struct{} { return s.done }

// Err returns why the session ended, or nil while it lives.
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// nextSeq returns a request_seq never used before by this Session.
func (s *Session) nextSeq() uint64 { return s.seq.Add(1) }

// Close ends the session on the server, which deletes its ephemeral nodes,
// and stops the keepalive. Done is closed even if the server cannot be
// reached; the error then says so. On a cluster of several shards the
// reply's position in every shard is recorded, so that a later read
// through any member finds the session's nodes gone.
func (s *Session) Close(ctx context.Context) error {
	s.end(ErrSessionClosed)
	body, err := json.Marshal(api.SessionRequest{SessionID: s.id})
	if err != nil {
		return err
	}
	// A 410 of a sharded cluster carries the indexes too: an earlier
	// attempt of this call, whose reply was lost or a 503, closed the
	// session, and the cleanup's positions come with the retry's answer.
	var closed api.Closed
	err = s.client.do(ctx, &call{method: "POST", path: "/v1/session/close", body: body, policy: retrySafe, out: &closed, errOut: &closed})
	if err == nil || api.CodeOf(err) == api.CodeSessionExpired {
		for shard, index := range closed.Indexes {
			s.client.observeShardIndex(shard, index)
		}
	}
	if errors.Is(err, &api.Error{Code: api.CodeSessionExpired}) || errors.Is(err, &api.Error{Code: api.CodeNotFound}) {
		return nil
	}
	return err
}

// Orphan stops the keepalive without closing the session: the server keeps
// it (and its ephemeral nodes) until its timeout passes.
func (s *Session) Orphan() { s.end(ErrSessionOrphaned) }

// end records reason (the first one wins), closes Done and takes the
// session out of its keepalive group. A batched heartbeat already on its
// way may still carry the session's id.
func (s *Session) end(reason error) {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return
	}
	s.err = reason
	close(s.done)
	s.mu.Unlock()
	s.client.keepalives.leave(s)
}

// noteWriteError ends the session if a write reported it expired.
func (s *Session) noteWriteError(err error) {
	var apiErr *api.Error
	if errors.As(err, &apiErr) && apiErr.Code == api.CodeSessionExpired {
		s.end(apiErr)
	}
}

// heartbeatAnswered records the outcome of a heartbeat sent at sent (err
// nil: alive) and ends the session if it must be given up. The keepalive
// group's goroutine calls it.
func (s *Session) heartbeatAnswered(err error, sent, now time.Time) {
	s.mu.Lock()
	if err == nil {
		if sent.After(s.lastAlive) {
			s.lastAlive = sent
		}
		s.mu.Unlock()
		return
	}
	sinceAlive := now.Sub(s.lastAlive)
	s.mu.Unlock()
	if reason := s.fatalHeartbeatError(err, sinceAlive); reason != nil {
		s.end(reason)
	}
}

// fatalHeartbeatError returns why the session must be given up after a
// failed heartbeat, or nil to keep trying.
func (s *Session) fatalHeartbeatError(err error, sinceAlive time.Duration) error {
	var apiErr *api.Error
	if errors.As(err, &apiErr) && (apiErr.Code == api.CodeSessionExpired || apiErr.Code == api.CodeNotFound) {
		message := apiErr.Message
		if !strings.Contains(message, s.id) { // the server's message names it as a rule
			message = fmt.Sprintf("session %s: %s", s.id, message)
		}
		return &api.Error{Code: api.CodeSessionExpired, Message: message}
	}
	if sinceAlive >= s.timeout {
		return fmt.Errorf("%w (session %s, last error: %w)", ErrSessionLost, s.id, err)
	}
	return nil
}
