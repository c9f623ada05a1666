package server

import (
	"context"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/watch"
)

// Watch registers a watch for a live session on this server. It fires at
// apply time here, whatever this server's role; with KnownIndex it fires at
// once if what it watches changed after that index.
func (s *Server) Watch(ctx context.Context, session uint64, spec watch.Spec) (api.Watch, error) {
	if err := api.ValidatePath(spec.Path); err != nil {
		return api.Watch{}, err
	}
	g := s.main.Load()
	if err := g.requireSession(ctx, session); err != nil {
		return api.Watch{}, err
	}
	g.mu.RLock()
	defer g.mu.RUnlock()
	// Checked again under the lock that session expiry takes, so a watch is
	// never added for a session whose end the registry has already seen.
	if _, err := g.fsm.Session(session); err != nil {
		return api.Watch{}, errSessionGone(session)
	}
	var current watch.Current
	if n, err := g.fsm.Get(spec.Path); err == nil {
		current = watch.Current{Exists: true, Version: n.Version, CreatedIndex: n.CreatedIndex, ModifiedIndex: n.ModifiedIndex}
	}
	at := g.fsm.Applied()
	id, err := g.watches.Add(session, spec, at, current)
	if err != nil {
		return api.Watch{}, err
	}
	return api.Watch{WatchID: api.FormatID(id), CurrentVersion: current.Version, Index: at}, nil
}

// CancelWatch removes one of the session's watches.
func (s *Server) CancelWatch(session, id uint64) error {
	return s.main.Load().watches.Cancel(session, id)
}

// Events attaches the session's event stream (replacing an older one).
func (s *Server) Events(ctx context.Context, session uint64) (*watch.Stream, uint64, error) {
	g := s.main.Load()
	if err := g.requireSession(ctx, session); err != nil {
		return nil, 0, err
	}
	g.mu.RLock()
	defer g.mu.RUnlock()
	if _, err := g.fsm.Session(session); err != nil {
		return nil, 0, errSessionGone(session)
	}
	return g.watches.Stream(session), g.applied.Load(), nil
}

func errSessionGone(session uint64) error {
	return api.Errorf(api.CodeSessionExpired, "session %s has expired or was closed", api.FormatID(session))
}

// requireSession returns session_expired unless the session is alive, looked
// up again after a linearizable barrier if this server does not know it.
func (g *group) requireSession(ctx context.Context, session uint64) error {
	if session == 0 {
		return api.Errorf(api.CodeInvalidArgument, "session_id is required")
	}
	if _, dead := g.liveSessions([]uint64{session}); len(dead) == 0 {
		return nil
	}
	if err := g.barrier(ctx, api.Linearizable, 0); err != nil {
		return err
	}
	if _, dead := g.liveSessions([]uint64{session}); len(dead) > 0 {
		return errSessionGone(session)
	}
	return nil
}
