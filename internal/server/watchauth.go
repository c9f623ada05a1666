package server

import (
	"context"
	"time"

	"github.com/latch-io/latch/internal/fsm"
	"github.com/latch-io/latch/internal/replica"

	"github.com/latch-io/latch/internal/command"
)

// A watch is authorized when it is registered (read on its path, the
// session the user's), and again for every event it would deliver: at the
// event's index, its user must still be able to read the event's path
// with the credential that registered it. So a recursive watch delivers
// only what its user may read, and a revoked grant, a deleted user or a
// revoked token (logout, password change) stops it at the index of the
// change, on every member alike.

// authorizeWatch is authorizeAs for a watch registration, returning the
// user ("" with auth disabled).
func (s *Server) authorizeWatch(ctx context.Context, path string, session uint64) (string, error) {
	user, err := s.authorize(ctx, command.PermRead, path)
	if err != nil || user == "" {
		return user, err
	}
	return user, s.checkOwner(user, session)
}

// watchAllow returns the per-event check of a watch registered by user
// with ctx's credentials (user "": registered with auth disabled, so it
// stops once auth is enabled). The registry calls it under the write lock
// of the event's shard. An event of the meta group (shard 0), which holds
// the auth state, is checked at its own index; an event of another shard
// against the latest auth state this member applied (authView): the two
// logs' indexes do not order an auth change against another shard's
// event, so there a revocation stops the watch once this member applied it.
func (s *Server) watchAllow(ctx context.Context, user string) func(shard int, path string, index uint64) bool {
	var digest []byte
	if token := CredentialsFrom(ctx).Token; token != "" {
		digest = tokenDigest(token)
	}
	g := s.metaGroup()
	return func(shard int, path string, index uint64) bool {
		if shard == 0 {
			return g.StateLocked().ReadableAt(user, digest, path, index)
		}
		view := s.authView.Load()
		return view == nil || view.Readable(user, digest, path)
	}
}

// watchExpiry returns when the bearer token of ctx, which registers a
// watch for user, expires by this member's clock, the instant from which
// authorize refuses it, and the token's digest, which groups the watches of
// one token under one timer (watch.Spec.Expires). A watch registered with
// no token (a certificate's user, or auth disabled: user "") has no expiry.
// The expiry is read as authorize reads it: Unix milliseconds of the
// issuing member's clock, compared with this member's.
func (s *Server) watchExpiry(ctx context.Context, user string) (time.Time, string) {
	token := CredentialsFrom(ctx).Token
	if token == "" || user == "" {
		return time.Time{}, ""
	}
	digest := tokenDigest(token)
	var expiresMs uint64
	var known bool
	s.metaGroup().View(func(f *fsm.FSM) { expiresMs, known = f.TokenExpires(digest) })
	if !known {
		// Revoked since authorize: the per-event check stops the watch;
		// expire it at once as well.
		return s.cfg.Clock.Now(), string(digest)
	}
	return time.UnixMilli(int64(expiresMs)), string(digest)
}

// authViewListener keeps Server.authView current: a copy of the meta
// group's auth state after every auth change and every restore. Only with
// several shards (with one, every event is checked at its index).
type authViewListener struct {
	replica.NopListener
	s    *Server
	meta *group
}

func (l authViewListener) AppliedLocked(cmd *command.Command, _ fsm.Result) {
	if cmd.Op == command.OpAuth {
		l.s.authView.Store(l.meta.StateLocked().AuthView())
	}
}

func (l authViewListener) RestoredLocked(f *fsm.FSM, _ uint64) {
	l.s.authView.Store(f.AuthView())
}
