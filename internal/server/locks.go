package server

import (
	"context"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/queues"
)

// The lock and election calls find the group of the queue's directory and
// hand over to its queues feature (package queues); each reply names that
// group's shard (its Shard field), whose log its index and fencing token
// are of.

// AcquireLock queues the session on lock name (or keeps its place) and waits
// up to wait to hold it (queues.Queues.AcquireLock). A lock not held in time
// is a reply with Held false and a nil error.
func (s *Server) AcquireLock(ctx context.Context, name string, session uint64, wait time.Duration) (api.Lock, error) {
	if err := s.authorizeAs(ctx, permWrite, queues.LocksRoot+"/"+name, session); err != nil {
		return api.Lock{}, err
	}
	g := s.childGroup(queues.LocksRoot + "/" + name)
	lock, err := g.queues.AcquireLock(ctx, name, session, wait)
	lock.Shard = g.shard
	return lock, err
}

// ReleaseLock deletes the session's queue node of lock name
// (queues.Queues.ReleaseLock).
func (s *Server) ReleaseLock(ctx context.Context, name string, session, token uint64) (api.Released, error) {
	if err := s.authorizeAs(ctx, permWrite, queues.LocksRoot+"/"+name, session); err != nil {
		return api.Released{}, err
	}
	g := s.childGroup(queues.LocksRoot + "/" + name)
	out, err := g.queues.ReleaseLock(ctx, name, session, token)
	out.Shard = g.shard
	return out, err
}

// LockState reports a lock's holder and how many wait (queues.Queues.LockState).
func (s *Server) LockState(ctx context.Context, name string, opts ReadOptions) (api.LockState, error) {
	if err := s.authorizeAs(ctx, permRead, queues.LocksRoot+"/"+name, 0); err != nil {
		return api.LockState{}, err
	}
	g := s.childGroup(queues.LocksRoot + "/" + name)
	out, err := g.queues.LockState(ctx, name, opts.Consistency, opts.minIndexIn(g))
	out.Shard = g.shard
	return out, err
}

// JoinElection enters the session as a candidate for role
// (queues.Queues.JoinElection).
func (s *Server) JoinElection(ctx context.Context, role string, session uint64, value []byte) (api.Candidacy, error) {
	if err := s.authorizeAs(ctx, permWrite, queues.ElectionsRoot+"/"+role, session); err != nil {
		return api.Candidacy{}, err
	}
	g := s.childGroup(queues.ElectionsRoot + "/" + role)
	out, err := g.queues.JoinElection(ctx, role, session, value)
	out.Shard = g.shard
	return out, err
}

// ResignElection withdraws the session's candidacy for role
// (queues.Queues.ResignElection).
func (s *Server) ResignElection(ctx context.Context, role string, session uint64) (api.Resigned, error) {
	if err := s.authorizeAs(ctx, permWrite, queues.ElectionsRoot+"/"+role, session); err != nil {
		return api.Resigned{}, err
	}
	g := s.childGroup(queues.ElectionsRoot + "/" + role)
	out, err := g.queues.ResignElection(ctx, role, session)
	out.Shard = g.shard
	return out, err
}

// ElectionState reports the leader of role and how many candidates there
// are (queues.Queues.ElectionState).
func (s *Server) ElectionState(ctx context.Context, role string, opts ReadOptions) (api.ElectionState, error) {
	if err := s.authorizeAs(ctx, permRead, queues.ElectionsRoot+"/"+role, 0); err != nil {
		return api.ElectionState{}, err
	}
	g := s.childGroup(queues.ElectionsRoot + "/" + role)
	out, err := g.queues.ElectionState(ctx, role, opts.Consistency, opts.minIndexIn(g))
	out.Shard = g.shard
	return out, err
}
