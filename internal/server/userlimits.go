package server

import (
	"math"
	"sync"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/fsm"
)

// Per-user limits, applied once auth is enabled and a request proves a
// user, so one client cannot starve the others: a request rate
// (AuthConfig.UserRate, a token bucket per user on each member) and a cap on
// the sessions a user holds (AuthConfig.MaxUserSessions). Both answer 429
// overloaded, which the HTTP layer sends with Retry-After.

// userRateLimiter holds one token bucket per key (a user, a user name
// tried at login, a source address). Past maxBuckets keys, the buckets
// that are full again are forgotten.
type userRateLimiter struct {
	mu      sync.Mutex
	buckets map[string]*rateBucket
}

type rateBucket struct {
	tokens float64
	last   time.Time
}

// take spends one request of user's budget of rate per second (bursts up to
// burst) at now, or returns how long until one is available.
func (l *userRateLimiter) take(user string, rate, burst float64, now time.Time) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.buckets == nil {
		l.buckets = make(map[string]*rateBucket)
	}
	b, ok := l.buckets[user]
	if !ok && len(l.buckets) >= maxBuckets {
		l.forgetFullLocked(rate, burst, now)
	}
	if !ok {
		b = &rateBucket{tokens: burst, last: now}
		l.buckets[user] = b
	}
	if elapsed := now.Sub(b.last).Seconds(); elapsed > 0 {
		b.tokens = math.Min(burst, b.tokens+elapsed*rate)
		b.last = now
	}
	if b.tokens >= 1 {
		b.tokens--
		return 0, true
	}
	return time.Duration((1 - b.tokens) / rate * float64(time.Second)), false
}

// maxBuckets bounds the keys a limiter tracks before it forgets full ones.
const maxBuckets = 10000

// forgetFullLocked drops the buckets refilled to burst by now; l.mu must be
// held.
func (l *userRateLimiter) forgetFullLocked(rate, burst float64, now time.Time) {
	for key, b := range l.buckets {
		if b.tokens+now.Sub(b.last).Seconds()*rate >= burst {
			delete(l.buckets, key)
		}
	}
}

// limitLogin charges one password check to user and to source (see
// AuthConfig.LoginRate).
func (s *Server) limitLogin(user, source string) error {
	rate, burst := s.cfg.Auth.LoginRate, float64(s.cfg.Auth.LoginBurst)
	switch {
	case rate < 0:
		return nil
	case rate == 0:
		rate = defaultLoginRate
	}
	if burst <= 0 {
		burst = defaultLoginBurst
	}
	now := s.cfg.Clock.Now()
	if wait, ok := s.loginUsers.take(user, rate, burst, now); !ok {
		return api.Errorf(api.CodeOverloaded, "too many login attempts for user %q: retry in %v", user, wait.Round(time.Millisecond))
	}
	if source == "" {
		return nil
	}
	if wait, ok := s.loginSources.take(source, rate, burst, now); !ok {
		return api.Errorf(api.CodeOverloaded, "too many login attempts from %s: retry in %v", source, wait.Round(time.Millisecond))
	}
	return nil
}

// limitUser charges one request to user; "" (auth disabled) is free.
func (s *Server) limitUser(user string) error {
	rate := s.cfg.Auth.UserRate
	if user == "" || rate <= 0 {
		return nil
	}
	burst := math.Max(1, float64(s.cfg.Auth.UserBurst))
	if s.cfg.Auth.UserBurst <= 0 {
		burst = math.Max(1, rate)
	}
	wait, ok := s.userRates.take(user, rate, burst, s.cfg.Clock.Now())
	if ok {
		return nil
	}
	return api.Errorf(api.CodeOverloaded, "user %q is over its rate of %g requests per second: retry in %v", user, rate, wait.Round(time.Millisecond))
}

// limitUserSessions refuses a session beyond owner's cap.
func (s *Server) limitUserSessions(owner string) error {
	limit := s.cfg.Auth.MaxUserSessions
	if owner == "" || limit <= 0 {
		return nil
	}
	held := 0
	s.metaGroup().View(func(f *fsm.FSM) { held = f.SessionsOwnedBy(owner) })
	if held >= limit {
		return api.Errorf(api.CodeOverloaded, "user %q holds %d sessions, its limit: close one first", owner, held)
	}
	return nil
}
