package sessions

import "time"

// Remaining returns, on the leader, the time each live session has left
// before it expires without a heartbeat (never negative); leading is false,
// and the map nil, on any other member, which does not decide expiry and
// keeps no meaningful deadlines. The read is for operators (the session
// listing): it changes nothing.
func (l *Liveness) Remaining() (left map[uint64]time.Duration, leading bool) {
	now := l.cfg.Clock.Now()
	t := l.tracker
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.leaderTerm == 0 {
		return nil, false
	}
	left = make(map[uint64]time.Duration, len(t.deadlines))
	for id, s := range t.deadlines {
		left[id] = max(s.deadline.Sub(now), 0)
	}
	return left, true
}
