package server

import (
	"context"
	"errors"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/fsm"
	"github.com/latch-io/latch/internal/watch"
)

// WatchRequest is a watch registration of docs/api.md: what to watch, and
// from which index a change counts.
type WatchRequest struct {
	Path       string
	Recursive  bool   // also the nodes below Path
	Persistent bool   // fire on every change until cancelled, not once
	KnownIndex uint64 // fire at once if the watched state changed after this index (0: no such check)
}

// EventStream is a session's stream of watch events as the wire layer reads
// it: Events yields them in order and is closed when the stream ends, Reason
// then says why, and Close ends it from the reader's side.
type EventStream interface {
	Events() <-chan api.Event
	Reason() string
	Close()
}

// The registry's stream is what Events hands out.
var _ EventStream = (*watch.Stream)(nil)

// Watch registers a watch for a live session on this server. It fires at
// apply time here, whatever this server's role; with KnownIndex it fires at
// once if what it watches changed after that index. Watches are local to
// the server that registers them and their events go only to the session's
// event stream on it, so the session must have its stream attached here:
// otherwise the registration is refused with precondition_failed (it would
// be accepted silently and its events never reach a stream open elsewhere).
func (s *Server) Watch(ctx context.Context, session uint64, req WatchRequest) (api.Watch, error) {
	user, err := s.authorizeWatch(ctx, req.Path, session)
	if err != nil {
		return api.Watch{}, err
	}
	spec := watch.Spec{Path: req.Path, Recursive: req.Recursive, Persistent: req.Persistent, KnownIndex: req.KnownIndex}
	spec.Allow, spec.Owner = s.watchAllow(ctx, user), user
	if err := api.ValidatePath(spec.Path); err != nil {
		return api.Watch{}, err
	}
	if err := s.checkWatchShard(spec); err != nil {
		return api.Watch{}, err
	}
	g := s.metaGroup()
	if err := g.requireSession(ctx, session); err != nil {
		return api.Watch{}, err
	}
	var (
		current watch.Current
		id      uint64
	)
	// Under the read lock: checked again under the lock that session expiry
	// takes, so a watch is never added for a session whose end the registry
	// has already seen; and added at the state's applied index, which no
	// event published under the write lock can pass meanwhile.
	at := g.View(func(f *fsm.FSM) {
		if _, err = f.Session(session); err != nil {
			err = api.SessionGone(session)
			return
		}
		if n, gerr := f.Get(spec.Path); gerr == nil {
			current = watch.Current{Exists: true, Version: n.Version, CreatedIndex: n.CreatedIndex, ModifiedIndex: n.ModifiedIndex}
		}
		id, err = g.watches.AddLocked(session, spec, f.Applied(), current)
	})
	if errors.Is(err, watch.ErrNoStream) {
		return api.Watch{}, s.errNoStream(session)
	}
	if err != nil {
		return api.Watch{}, err
	}
	return api.Watch{WatchID: api.FormatID(id), CurrentVersion: current.Version, Index: at}, nil
}

// checkWatchShard refuses, with more than one shard, the watches this
// version cannot serve: watches fire from the meta group's registry (shard
// 0) until watches across shards are wired, so a watch on a path in another
// shard, or a recursive watch (whose subtree spans shards), would be
// accepted and never fire.
func (s *Server) checkWatchShard(spec watch.Spec) error {
	if s.cfg.Shards == 1 {
		return nil
	}
	if spec.Recursive {
		return api.Errorf(api.CodeInvalidArgument,
			"recursive watches are not served with --shards %d yet: a subtree spans shards", s.cfg.Shards)
	}
	if shard := s.shards.Shard(spec.Path); shard != 0 {
		return api.Errorf(api.CodeInvalidArgument,
			"%s is in shard %d, and watches are served only on shard 0's paths with --shards %d yet", spec.Path, shard, s.cfg.Shards)
	}
	return nil
}

// CancelWatch removes one of the session's watches.
func (s *Server) CancelWatch(session, id uint64) error {
	return s.metaGroup().watches.Cancel(session, id)
}

// Events attaches the session's event stream (replacing an older one) and
// returns it with the applied index it starts after.
func (s *Server) Events(ctx context.Context, session uint64) (EventStream, uint64, error) {
	if err := s.authorizeSessions(ctx, session); err != nil {
		return nil, 0, err
	}
	g := s.metaGroup()
	if err := g.requireSession(ctx, session); err != nil {
		return nil, 0, err
	}
	var (
		stream *watch.Stream
		err    error
	)
	g.View(func(f *fsm.FSM) {
		if _, err = f.Session(session); err != nil {
			err = api.SessionGone(session)
			return
		}
		stream = g.watches.Stream(session)
	})
	if err != nil {
		return nil, 0, err
	}
	return stream, g.Applied(), nil
}

// errNoStream refuses a watch for a session without an event stream here.
func (s *Server) errNoStream(session uint64) error {
	id := api.FormatID(session)
	return api.Errorf(api.CodePreconditionFailed,
		"session %s has no event stream open on member %s, and a watch fires only into the stream on the member that registered it: "+
			"open GET /v1/session/%s/events on this member first, or register the watch on the member where the stream is open",
		id, s.cfg.Name, id)
}

// requireSession returns session_expired unless the session is alive, looked
// up again after a linearizable barrier if this server does not know it.
func (g *group) requireSession(ctx context.Context, session uint64) error {
	if session == 0 {
		return api.Errorf(api.CodeInvalidArgument, "session_id is required")
	}
	if _, dead := g.sessions.NotAlive([]uint64{session}); len(dead) == 0 {
		return nil
	}
	if err := g.Barrier(ctx, api.Linearizable, 0); err != nil {
		return err
	}
	if _, dead := g.sessions.NotAlive([]uint64{session}); len(dead) > 0 {
		return api.SessionGone(session)
	}
	return nil
}
