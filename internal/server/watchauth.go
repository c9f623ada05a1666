package server

import (
	"context"

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
// stops once auth is enabled). It runs in the meta group's apply path
// under its write lock, where the watch registry publishes.
func (s *Server) watchAllow(ctx context.Context, user string) func(path string, index uint64) bool {
	var digest []byte
	if token := CredentialsFrom(ctx).Token; token != "" {
		digest = tokenDigest(token)
	}
	g := s.metaGroup()
	return func(path string, index uint64) bool {
		return g.StateLocked().ReadableAt(user, digest, path, index)
	}
}
