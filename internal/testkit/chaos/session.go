package chaos

import (
	"net/http"
	"sync"
	"time"

	"github.com/latch-io/latch/api"
)

// session is a client session kept alive by a heartbeat goroutine sending
// to random members, which can be paused to play a frozen client.
type session struct {
	id      string
	timeout time.Duration

	mu       sync.Mutex // guards the fields below
	isPaused bool       // heartbeats withheld
	isDead   bool       // a heartbeat or request saw session_expired, or the client gave up on it
	done     chan struct{}
	once     sync.Once
}

// newSession creates a session on a random member, or returns nil.
func newSession(r *run, timeout time.Duration) *session {
	ctx, cancel := requestContext()
	defer cancel()
	var created api.Session
	err := call(ctx, http.MethodPost, r.node(), "/v1/session/create", nil,
		&api.SessionCreateRequest{TimeoutMs: uint64(timeout / time.Millisecond)}, &created)
	if err != nil {
		return nil
	}
	s := &session{id: created.SessionID, timeout: time.Duration(created.TimeoutMs) * time.Millisecond, done: make(chan struct{})}
	go s.heartbeats(r)
	return s
}

// renewSession returns s while it is alive. Otherwise it stops s's
// heartbeats and opens a new session with timeout on a random member; when
// none could be opened it backs off 100ms and returns nil.
func renewSession(r *run, s *session, timeout time.Duration) *session {
	if s != nil && !s.expired() {
		return s
	}
	if s != nil {
		s.stop()
	}
	fresh := newSession(r, timeout)
	if fresh == nil {
		time.Sleep(100 * time.Millisecond)
	}
	return fresh
}

func (s *session) heartbeats(r *run) {
	ticker := time.NewTicker(s.timeout / 5)
	defer ticker.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-ticker.C:
		}
		if s.paused() {
			continue
		}
		ctx, cancel := requestContext()
		err := call(ctx, http.MethodPost, r.node(), "/v1/session/heartbeat", nil, &api.SessionRequest{SessionID: s.id}, nil)
		cancel()
		if code(err) == api.CodeSessionExpired {
			s.markExpired()
		}
	}
}

func (s *session) paused() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.isPaused
}

func (s *session) pauseHeartbeats() {
	s.mu.Lock()
	s.isPaused = true
	s.mu.Unlock()
}

func (s *session) markExpired() {
	s.mu.Lock()
	s.isDead = true
	s.mu.Unlock()
}

func (s *session) expired() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.isDead
}

// stop ends the heartbeats.
func (s *session) stop() { s.once.Do(func() { close(s.done) }) }

// close closes the session on a random member, best effort.
func (s *session) close(r *run) {
	ctx, cancel := requestContext()
	defer cancel()
	_ = call(ctx, http.MethodPost, r.node(), "/v1/session/close", nil, &api.SessionRequest{SessionID: s.id}, nil)
}
