package watch

import (
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/clock"
)

// A watch registered with a credential that expires (a login token:
// Spec.Expires, Spec.Credential) ends at that expiry by the registry's
// clock. One timer per credential, not per watch, ends every watch the
// credential registered: it drops them and ends the stream of each session
// that held one, reason ReasonTokenExpired. Until the timer has run, two
// checks keep an expired watch silent: PublishLocked fires no watch past
// its expiry, and Take drops, unsent, a queued event of a watch past its
// expiry. So no event of the watch is handed to a consumer after the
// expiry, but one Take is handing over at that very instant.

// credential is the set of registered watches of one expiring credential,
// with the timer that ends them. Guarded by Registry.mu.
type credential struct {
	key     string
	expires time.Time
	watches map[*watch]struct{}
	timer   clock.Timer
}

// expiredAt reports whether a credential expiring at expires (zero: never)
// has expired at now.
func expiredAt(expires, now time.Time) bool {
	return !expires.IsZero() && !now.Before(expires)
}

// expiredLocked reports whether w's credential has expired (false without
// one, reading no clock).
func (r *Registry) expiredLocked(w *watch) bool {
	return !w.expires.IsZero() && expiredAt(w.expires, r.opts.Clock.Now())
}

// checkExpiryLocked refuses a registration whose credential has expired
// already: its timer would end the session's stream at once.
func (r *Registry) checkExpiryLocked(spec Spec) error {
	if expiredAt(spec.Expires, r.opts.Clock.Now()) {
		return api.Errorf(api.CodeUnauthenticated, "the token expired: log in again")
	}
	return nil
}

// trackLocked adds w to its credential's set, arming the credential's
// timer with its first watch.
func (r *Registry) trackLocked(w *watch) {
	if w.expires.IsZero() {
		return
	}
	c := r.credentials[w.credential]
	if c == nil {
		c = &credential{key: w.credential, expires: w.expires, watches: make(map[*watch]struct{})}
		r.credentials[c.key] = c
		c.timer = r.opts.Clock.AfterFunc(r.opts.Clock.Until(c.expires), func() { r.expire(c) })
	}
	c.watches[w] = struct{}{}
}

// untrackLocked takes w out of its credential's set, stopping the timer
// with the last watch.
func (r *Registry) untrackLocked(w *watch) {
	c := r.credentials[w.credential]
	if w.expires.IsZero() || c == nil {
		return
	}
	delete(c.watches, w)
	if len(c.watches) == 0 {
		c.timer.Stop()
		delete(r.credentials, c.key)
	}
}

// expire is c's timer: it drops every watch of c and ends the stream of
// each session that held one (reason ReasonTokenExpired; kept for the next
// stream if none is attached). The sessions' other watches and their queued
// events stay for the next stream, as after a stream the client closed; the
// queued events of the dropped watches are never sent (the stream drops them).
func (r *Registry) expire(c *credential) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.credentials[c.key] != c {
		return // its last watch went meanwhile, and the timer's Stop came too late
	}
	if left := r.opts.Clock.Until(c.expires); left > 0 {
		// Early by the reading expiry is judged by (a token's expiry is
		// civil time, and the timer runs on elapsed time): wait on.
		c.timer = r.opts.Clock.AfterFunc(left, func() { r.expire(c) })
		return
	}
	delete(r.credentials, c.key)
	sessions := make(map[*session]struct{})
	for w := range c.watches {
		sessions[w.session] = struct{}{}
		r.removeLocked(w) // c is out of credentials: untrackLocked leaves it alone
		r.stats.WatchesExpired++
	}
	for s := range sessions {
		r.endStreamLocked(s, ReasonTokenExpired)
		r.forgetIfIdleLocked(s)
	}
}

// endStreamLocked ends s's stream with reason, or, with no stream
// attached, keeps reason for the next one; unlike disconnectLocked it
// leaves s's watches and queue alone.
func (r *Registry) endStreamLocked(s *session, reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stream != nil {
		s.stream.closeSessionLocked(reason)
	} else if s.lostReason == "" {
		s.lostReason = reason
	}
}
