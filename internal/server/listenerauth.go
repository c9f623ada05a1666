package server

import (
	"context"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/command"
	"github.com/latch-io/latch/internal/fsm"
)

// The calls below serve the listeners' operations that have no server
// method of their own (the ZooKeeper port's sync, getACL and setACL): each
// passes the one choke point, authorize, like every other operation.

// Access is what the request's user may do on a path.
type Access struct {
	// User is the authenticated user ("" with auth disabled).
	User               string
	Read, Write, Admin bool
}

// AccessOn returns what the request's user may do on path: everything
// with auth disabled; else the grants of its roles (root: everything). A
// request that proves no user is unauthenticated.
func (s *Server) AccessOn(ctx context.Context, path string) (Access, error) {
	user, err := s.authorize(ctx, permNone, path)
	if err != nil {
		return Access{}, err
	}
	if user == "" {
		return Access{Read: true, Write: true, Admin: true}, nil
	}
	a := Access{User: user}
	s.metaGroup().View(func(f *fsm.FSM) {
		a.Read = f.Permitted(user, command.PermRead, path)
		a.Write = f.Permitted(user, command.PermWrite, path)
		a.Admin = f.Permitted(user, command.PermAdmin, path)
	})
	return a, nil
}

// AuthorizeAdmin checks that the request's user holds admin on path, for
// an operation that changes access itself (the ZooKeeper port's setACL).
func (s *Server) AuthorizeAdmin(ctx context.Context, path string) error {
	_, err := s.authorize(ctx, permAdmin, path)
	return err
}

// Sync waits for a linearizable barrier on the meta group (whose indexes
// the ZooKeeper port's zxids are), for a user who may read path, and
// returns the applied index it reached.
func (s *Server) Sync(ctx context.Context, path string) (uint64, error) {
	if _, err := s.authorize(ctx, permRead, path); err != nil {
		return 0, err
	}
	if err := api.ValidatePath(path); err != nil {
		return 0, err
	}
	g := s.metaGroup()
	if err := g.Barrier(ctx, api.Linearizable, 0); err != nil {
		return 0, err
	}
	return g.Applied(), nil
}

// WaitApplied waits until the meta group has applied index, or ctx ends.
// It reads nothing, so it asks for no credentials: the ZooKeeper handshake
// waits for a client's lastZxidSeen before the client authenticates.
func (s *Server) WaitApplied(ctx context.Context, index uint64) error {
	return s.metaGroup().Barrier(ctx, api.Stale, index)
}
