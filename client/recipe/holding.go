package recipe

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/client"
)

// Errors of the recipes.
var (
	// ErrNotHeld: Release or Resign without a lock held or a candidacy.
	ErrNotHeld = errors.New("recipe: not held")
	// ErrLost: the lock or leadership ended without Release or Resign: the
	// session ended or the node was deleted.
	ErrLost = errors.New("recipe: lost")
	// ErrReleased is the reason of a holding ended by Release or Resign.
	ErrReleased = errors.New("recipe: released")
	// ErrNoLeader: the role has no candidate.
	ErrNoLeader = errors.New("recipe: no leader")
)

// holding is one tenure of a lock or a leadership: from the acquire that
// returned token until Release, the session's end or the node's deletion.
type holding struct {
	session *client.Session
	token   uint64
	path    string
	index   uint64 // index of the reply that granted it
	ctx     context.Context
	cancel  context.CancelFunc
	lost    chan struct{} // closed when the holding ends; err says why

	mu       sync.Mutex // guards err and watching
	err      error
	watching bool
}

func newHolding(s *client.Session, token uint64, path string, index uint64) *holding {
	h := &holding{session: s, token: token, path: path, index: index, lost: make(chan struct{})}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	go h.watchSession()
	return h
}

// watchSession ends the holding when the session ends.
func (h *holding) watchSession() {
	select {
	case <-h.session.Done():
		h.end(sessionEnded(h.session))
	case <-h.ctx.Done():
	}
}

// sessionEnded is the reason of a holding ended by its session's end. It
// names the session once: most reasons (the server's word on an expiry)
// already do.
func sessionEnded(s *client.Session) error {
	reason := s.Err()
	if strings.Contains(reason.Error(), s.ID()) {
		return fmt.Errorf("%w: the session ended: %w", ErrLost, reason)
	}
	return fmt.Errorf("%w: session %s ended: %w", ErrLost, s.ID(), reason)
}

// watchNode starts, once, a watch that ends the holding when its node is
// deleted; it is started lazily by Lost so that a holder that never asks
// pays no registration.
func (h *holding) watchNode() {
	h.mu.Lock()
	start := !h.watching && h.path != ""
	h.watching = true
	h.mu.Unlock()
	if !start {
		return
	}
	go func() {
		known := h.index
		for {
			w, err := h.session.Watch(h.ctx, h.path, client.KnownIndex(known), client.WatchJitter(0))
			if err != nil {
				return // the session or the holding ended; watchSession reports the first
			}
			ev, ok := <-w.Events()
			if !ok {
				return
			}
			if ev.Event.Event == api.EventDeleted {
				h.end(fmt.Errorf("%w: %s was deleted at index %d", ErrLost, h.path, ev.Index))
				return
			}
			known = ev.Index // not a deletion: watch again from there
		}
	}()
}

// end closes lost with reason (the first one wins).
func (h *holding) end(reason error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err != nil {
		return
	}
	h.err = reason
	close(h.lost)
	h.cancel()
}

// Err returns why the holding ended, or nil.
func (h *holding) Err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

// tenure is the current or last holding of a Lock or an Election, shared by
// the caller's goroutines and replaced only by a new grant.
type tenure struct {
	mu sync.Mutex // guards current
	// current is the current or last holding; nil before the first.
	current *holding
}

// grant records a granted acquire or candidacy with token, starting a new
// holding unless the current one already has that token and lasts, and
// returns token.
func (t *tenure) grant(s *client.Session, token uint64, path string, index uint64) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.current == nil || t.current.token != token || t.current.Err() != nil {
		t.current = newHolding(s, token, path, index)
	}
	return token
}

// last returns the current or last holding, nil before the first.
func (t *tenure) last() *holding {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.current
}

// end ends the current holding, which stays as the last one, with reason.
func (t *tenure) end(reason error) {
	if h := t.last(); h != nil {
		h.end(reason)
	}
}

// token returns the current holding's fencing token, 0 when none lasts.
func (t *tenure) token() uint64 {
	h := t.last()
	if h == nil || h.Err() != nil {
		return 0
	}
	return h.token
}

// lost returns the current holding's lost channel, closed when there was
// none.
func (t *tenure) lost() <-chan struct{} {
	h := t.last()
	if h == nil {
		return closedChannel
	}
	return h.lost
}

// closedChannel is the Lost of a recipe that holds nothing.
var closedChannel = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

// transient reports whether err says the cluster could not answer for now
// (unavailable or overloaded; the client gave up its attempts during an
// election, say), not that the request was refused. A recipe that blocks
// until it holds (Lock.Acquire, Election.Campaign) asks again after
// retryPause, as its requests are idempotent for the session.
func transient(err error) bool {
	switch api.CodeOf(err) {
	case api.CodeUnavailable, api.CodeOverloaded:
		return true
	}
	return false
}

// retryPause is the pause before a recipe asks again after a failure.
const retryPause = 100 * time.Millisecond

// pause waits d; false when ctx or session s ended first.
func pause(ctx context.Context, s *client.Session, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	case <-s.Done():
		return false
	}
}

// gone reports whether err says the session's place no longer exists.
func gone(err error) bool {
	switch api.CodeOf(err) {
	case api.CodeLockNotHeld, api.CodeNotFound, api.CodeSessionExpired:
		return true
	}
	return false
}
