package sessions

import (
	"sync"
	"time"

	"github.com/latch-io/latch/internal/fsm"
)

// tracker holds the deadline of every live session.
type tracker struct {
	mu        sync.Mutex
	deadlines map[uint64]trackedSession // guarded by mu
	relay     map[uint64]struct{}       // guarded by mu: heartbeats heard here, not yet sent to the leader
	// leaderTerm is the term in which this server, as leader, renewed every
	// deadline; 0 when it does not lead. Guarded by mu. Only deadlines renewed
	// in the current term may expire anything.
	leaderTerm uint64
}

type trackedSession struct {
	timeout  time.Duration
	deadline time.Time // a reading of the monotonic clock
	expiring bool      // an expiry proposal for it is in flight
}

func newTracker() *tracker {
	return &tracker{deadlines: map[uint64]trackedSession{}, relay: map[uint64]struct{}{}}
}

func (t *tracker) created(id, timeoutMs uint64, now time.Time) {
	timeout := time.Duration(timeoutMs) * time.Millisecond
	t.mu.Lock()
	t.deadlines[id] = trackedSession{timeout: timeout, deadline: now.Add(timeout)}
	t.mu.Unlock()
}

func (t *tracker) ended(id uint64) {
	t.mu.Lock()
	delete(t.deadlines, id)
	delete(t.relay, id)
	t.mu.Unlock()
}

// touch extends the deadlines of ids; unknown ids are ignored. It returns
// the ids whose expiry is already being proposed: too late to keep alive.
func (t *tracker) touch(ids []uint64, now time.Time) (expiring []uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, id := range ids {
		s, ok := t.deadlines[id]
		switch {
		case !ok:
		case s.expiring:
			expiring = append(expiring, id)
		default:
			s.deadline = now.Add(s.timeout)
			t.deadlines[id] = s
		}
	}
	return expiring
}

// lead grants every session a full timeout from now, for a server that has
// just become leader in term, before anything can be expired.
func (t *tracker) lead(now time.Time, term uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id, s := range t.deadlines {
		s.deadline = now.Add(s.timeout)
		s.expiring = false
		t.deadlines[id] = s
	}
	t.leaderTerm = term
}

// follow records that this server no longer leads.
func (t *tracker) follow() {
	t.mu.Lock()
	t.leaderTerm = 0
	t.mu.Unlock()
}

// reset replaces the tracked sessions with those of a restored state.
func (t *tracker) reset(sessions []fsm.Session, now time.Time) {
	t.mu.Lock()
	t.deadlines = make(map[uint64]trackedSession, len(sessions))
	t.mu.Unlock()
	for _, s := range sessions {
		t.created(s.ID, s.TimeoutMs, now)
	}
}

// due returns the sessions past their deadline and marks them expiring, if
// this server renewed the deadlines as leader of term.
func (t *tracker) due(now time.Time, limit int, term uint64) []uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if term == 0 || term != t.leaderTerm {
		return nil
	}
	var ids []uint64
	for id, s := range t.deadlines {
		if !s.expiring && now.After(s.deadline) {
			s.expiring = true
			t.deadlines[id] = s
			ids = append(ids, id)
			if len(ids) == limit {
				break
			}
		}
	}
	return ids
}

// unmark lets sessions whose expiry proposal failed be proposed again.
func (t *tracker) unmark(ids []uint64) {
	t.mu.Lock()
	for _, id := range ids {
		if s, ok := t.deadlines[id]; ok {
			s.expiring = false
			t.deadlines[id] = s
		}
	}
	t.mu.Unlock()
}

func (t *tracker) addRelay(id uint64) {
	t.mu.Lock()
	t.relay[id] = struct{}{}
	t.mu.Unlock()
}

func (t *tracker) takeRelay() []uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	ids := make([]uint64, 0, len(t.relay))
	for id := range t.relay {
		ids = append(ids, id)
	}
	clear(t.relay)
	return ids
}

// countTracked returns how many of ids the tracker holds.
func (t *tracker) countTracked(ids []uint64) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, id := range ids {
		if _, ok := t.deadlines[id]; ok {
			n++
		}
	}
	return n
}
