package check

import (
	"net/http"
	"sync"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/clock"
)

// Session is a client session kept alive by a heartbeat goroutine sending
// to random members, which can be paused to play a frozen client. Its
// heartbeats are paced by its client's clock: a skewed one plays a client
// whose clock runs slow.
type Session struct {
	ID      string
	timeout time.Duration
	clock   clock.Clock
	skewed  bool // its clock is not the real one

	mu       sync.Mutex // guards the fields below
	isPaused bool       // heartbeats withheld
	isDead   bool       // a heartbeat or request saw session_expired, or the client gave up on it
	done     chan struct{}
	once     sync.Once
}

// NewSession creates a session on a random member, or returns nil.
func NewSession(r *Run, timeout time.Duration) *Session {
	return newSessionOn(r, timeout, nil)
}

// newSessionOn is NewSession with a client clock (nil: the real one).
func newSessionOn(r *Run, timeout time.Duration, clientClock clock.Clock) *Session {
	ctx, cancel := RequestContext()
	defer cancel()
	var created api.Session
	err := r.Call(ctx, http.MethodPost, r.Node(), "/v1/session/create", nil,
		&api.SessionCreateRequest{TimeoutMs: uint64(timeout / time.Millisecond)}, &created)
	if err != nil {
		return nil
	}
	s := &Session{ID: created.SessionID, timeout: time.Duration(created.TimeoutMs) * time.Millisecond,
		clock: clientClock, skewed: clientClock != nil, done: make(chan struct{})}
	if s.clock == nil {
		s.clock = clock.Real()
	}
	go s.heartbeats(r)
	return s
}

// RenewSession returns s while it is alive. Otherwise it stops s's
// heartbeats and opens a new session with timeout on a random member; when
// none could be opened it backs off 100ms and returns nil.
func RenewSession(r *Run, s *Session, timeout time.Duration) *Session {
	if s != nil && !s.Expired() {
		return s
	}
	if s != nil {
		s.Stop()
	}
	fresh := NewSession(r, timeout)
	if fresh == nil {
		time.Sleep(100 * time.Millisecond)
	}
	return fresh
}

func (s *Session) heartbeats(r *Run) {
	ticker := s.clock.NewTicker(s.timeout / 5)
	defer ticker.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-ticker.C():
		}
		if s.paused() {
			continue
		}
		ctx, cancel := RequestContext()
		err := r.Call(ctx, http.MethodPost, r.Node(), "/v1/session/heartbeat", nil, &api.SessionRequest{SessionID: s.ID}, nil)
		cancel()
		if Code(err) == api.CodeSessionExpired {
			s.SawExpired(r)
		}
	}
}

func (s *Session) paused() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.isPaused
}

func (s *Session) PauseHeartbeats() {
	s.mu.Lock()
	s.isPaused = true
	s.mu.Unlock()
}

// SawExpired records that the cluster answered session_expired. An expiry
// of a session whose client never withheld its heartbeats (not paused, its
// clock not skewed) is counted in Report.SpuriousExpiries, once per session:
// a member's clock running fast, or a fault that cut the client off for
// longer than the timeout, expired it.
func (s *Session) SawExpired(r *Run) {
	s.mu.Lock()
	spurious := !s.isDead && !s.isPaused && !s.skewed
	s.isDead = true
	s.mu.Unlock()
	if spurious {
		r.Update(func(report *Report) { report.SpuriousExpiries++ })
	}
}

// MarkExpired records that the client gave up on the session.
func (s *Session) MarkExpired() {
	s.mu.Lock()
	s.isDead = true
	s.mu.Unlock()
}

func (s *Session) Expired() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.isDead
}

// Timeout is the session timeout the cluster granted.
func (s *Session) Timeout() time.Duration { return s.timeout }

// Stop ends the heartbeats.
func (s *Session) Stop() { s.once.Do(func() { close(s.done) }) }

// Close closes the session on a random member, best effort.
func (s *Session) Close(r *Run) {
	ctx, cancel := RequestContext()
	defer cancel()
	_ = r.Call(ctx, http.MethodPost, r.Node(), "/v1/session/close", nil, &api.SessionRequest{SessionID: s.ID}, nil)
}
