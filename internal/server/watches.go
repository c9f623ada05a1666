package server

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/fsm"
	"github.com/latch-io/latch/internal/placement"
	"github.com/latch-io/latch/internal/watch"
)

// WatchRequest is a watch registration of docs/api.md: what to watch, and
// from which index a change counts.
type WatchRequest struct {
	Path       string
	Recursive  bool   // also the nodes below Path
	Persistent bool   // fire on every change until cancelled, not once
	KnownIndex uint64 // fire at once if the watched state changed after this index (0: no such check)
	// KnownIndexes is KnownIndex per shard, for a watch covering several
	// shards; at most one of KnownIndex and KnownIndexes is set.
	KnownIndexes map[int]uint64
}

// EventStream is a session's stream of watch events as the wire layer reads
// it: Take moves every queued event, up to its slice's length, at once,
// Ready says when more were queued, and Take reports the end (Done is
// closed then). Reason then says why, and Close ends it from the reader's
// side. Take serves a stream without a goroutine between the registry and
// the writer, and lets a writer send a burst with one write; it is called
// from one goroutine at a time.
type EventStream interface {
	Take(into []Delivery) (n int, ended bool)
	Ready() <-chan struct{}
	Done() <-chan struct{}
	Reason() string
	Close()
}

// Delivery is one event as EventStream.Take hands it over: Event gives it,
// AppendJSON appends its api.Event JSON, encoded once per event for all
// the watches it fired.
type Delivery = watch.Delivery

// The registry's stream is what Server.Events hands out.
var _ EventStream = (*watch.Stream)(nil)

// Watch registers a watch for a live session on this server. It fires at
// apply time here, whatever this server's role; with a known index it fires
// at once if what it watches changed after that index. Watches are local to
// the server that registers them and their events go only to the session's
// event stream on it, so the session must have its stream attached here:
// otherwise the registration is refused with precondition_failed (it would
// be accepted silently and its events never reach a stream open elsewhere).
//
// With several shards a watch gets a record in every shard its events come
// from (watchShards), registered one shard at a time, each under its own
// group's read lock at that group's applied index: first in the path's
// shard, whose index and node version the reply gives, then in the others
// (watch.Shard.ExtendLocked). The reply's Indexes give every shard's start.
func (s *Server) Watch(ctx context.Context, session uint64, req WatchRequest) (api.Watch, error) {
	user, err := s.authorizeWatch(ctx, req.Path, session)
	if err != nil {
		return api.Watch{}, err
	}
	if err := api.ValidatePath(req.Path); err != nil {
		return api.Watch{}, err
	}
	shards := s.watchShards(req.Path, req.Recursive)
	known, err := s.knownIndexes(req, shards)
	if err != nil {
		return api.Watch{}, err
	}
	if err := s.metaGroup().requireSession(ctx, session); err != nil {
		return api.Watch{}, err
	}
	spec := watch.Spec{Path: req.Path, Recursive: req.Recursive, Persistent: req.Persistent, KnownIndex: known[shards[0]]}
	spec.Allow, spec.Owner = s.watchAllow(ctx, user), user
	spec.Expires, spec.Credential = s.watchExpiry(ctx, user)
	out, id, err := s.addWatch(session, spec, shards[0])
	if err != nil {
		return api.Watch{}, err
	}
	if len(shards) == 1 && s.cfg.Shards == 1 {
		return out, nil
	}
	out.Shard, out.Indexes = shards[0], map[int]uint64{shards[0]: out.Index}
	for _, shard := range shards[1:] {
		spec.KnownIndex = known[shard]
		at, alive := s.extendWatch(session, id, spec, shard)
		out.Indexes[shard] = at
		if !alive {
			break // a one-shot watch fired, or the session lost its watches: its stream says so
		}
	}
	return out, nil
}

// addWatch registers spec's first record, in shard, the shard of its path.
func (s *Server) addWatch(session uint64, spec watch.Spec, shard int) (api.Watch, uint64, error) {
	g := s.groups[shard].Load()
	var (
		current watch.Current
		id      uint64
		err     error
	)
	// Under the read lock: checked again under the lock that session expiry
	// takes, so a watch is never added for a session whose end the registry
	// has already seen; and added at the state's applied index, which no
	// event published under the write lock can pass meanwhile. The session
	// lives in shard 0: in another shard a session end not yet applied
	// there is seen by the registry from shard 0's apply, which drops the
	// watch with every other of the session.
	at := g.View(func(f *fsm.FSM) {
		if err = s.sessionLiveIn(f, shard, session); err != nil {
			return
		}
		if n, gerr := f.Get(spec.Path); gerr == nil {
			current = watch.Current{Exists: true, Version: n.Version, CreatedIndex: n.CreatedIndex, ModifiedIndex: n.ModifiedIndex}
		}
		id, err = g.watches.AddLocked(session, spec, f.Applied(), current)
	})
	if errors.Is(err, watch.ErrNoStream) {
		return api.Watch{}, 0, s.errNoStream(session)
	}
	if err != nil {
		return api.Watch{}, 0, err
	}
	return api.Watch{WatchID: api.FormatID(id), CurrentVersion: current.Version, Index: at}, id, nil
}

// sessionLiveIn checks, in shard 0's state (the session table), that
// session is live; other shards' states hold no session table to check.
func (s *Server) sessionLiveIn(f *fsm.FSM, shard int, session uint64) error {
	if shard != 0 {
		return nil
	}
	if _, err := f.Session(session); err != nil {
		return api.SessionGone(session)
	}
	return nil
}

// extendWatch adds watch id's record in shard, at that shard's applied
// index, which it returns; alive is false when the watch is gone.
func (s *Server) extendWatch(session, id uint64, spec watch.Spec, shard int) (at uint64, alive bool) {
	g := s.groups[shard].Load()
	at = g.View(func(f *fsm.FSM) {
		alive = g.watches.ExtendLocked(session, id, spec, f.Applied(), watch.Current{Elsewhere: true})
	})
	return at, alive
}

// watchShards returns the shards whose events a watch on path may be fired
// by, the path's own shard first: every shard for a recursive watch (a
// subtree spans shards), and for an exact one the shard of the node and the
// shard of its children (whose creates and deletes fire CHILDREN_CHANGED on
// it there, docs/design.md "Commands and server steps").
func (s *Server) watchShards(path string, recursive bool) []int {
	home := s.shards.Shard(path)
	out := []int{home}
	if recursive {
		for k := range s.cfg.Shards {
			if k != home {
				out = append(out, k)
			}
		}
		return out
	}
	if children := s.shards.ChildShard(path); children != home {
		out = append(out, children)
	}
	return out
}

// knownIndexes returns the known index of each of shards: KnownIndexes as
// given (every shard it names must be a shard of the cluster), or
// KnownIndex for the path's shard, shards[0]. An integer KnownIndex is an
// index of one log, the path's shard's (the index of a read of the node):
// an exact watch takes it for its node's shard, and its record in the
// children's shard starts at the registration; a recursive watch over
// several shards refuses it, since most of what it covers is elsewhere.
func (s *Server) knownIndexes(req WatchRequest, shards []int) (map[int]uint64, error) {
	if req.KnownIndexes == nil {
		if req.KnownIndex != 0 && req.Recursive && len(shards) > 1 {
			return nil, api.Errorf(api.CodeInvalidArgument,
				"known_index is an index of one shard's log, and a recursive watch on %s covers shards %s: give known_indexes, each shard's index", req.Path, shardList(shards))
		}
		return map[int]uint64{shards[0]: req.KnownIndex}, nil
	}
	if req.KnownIndex != 0 {
		return nil, api.Errorf(api.CodeInvalidArgument, "give known_index or known_indexes, not both")
	}
	for shard := range req.KnownIndexes {
		if shard < 0 || shard >= s.cfg.Shards {
			return nil, api.Errorf(api.CodeInvalidArgument,
				"known_indexes names shard %d, and the cluster's shards are 0 to %d", shard, s.cfg.Shards-1)
		}
	}
	return req.KnownIndexes, nil
}

// shardList writes shards as "0, 2 and 3".
func shardList(shards []int) string {
	sorted := slices.Clone(shards)
	slices.Sort(sorted)
	words := make([]string, len(sorted))
	for i, k := range sorted {
		words[i] = strconv.Itoa(k)
	}
	if len(words) == 1 {
		return words[0]
	}
	return strings.Join(words[:len(words)-1], ", ") + " and " + words[len(words)-1]
}

// CancelWatch removes one of the session's watches.
func (s *Server) CancelWatch(session, id uint64) error {
	return s.watches.Cancel(session, id)
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
		stream = s.watches.Stream(session)
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

// Shards returns the cluster's shard count (--shards).
func (s *Server) Shards() int { return s.cfg.Shards }

// ShardOf returns the shard holding path's node (placement's Shard).
func (s *Server) ShardOf(path string) int { return s.shards.Shard(path) }

// ChildShardOf returns the shard holding dir's children (placement's
// ChildShard).
func (s *Server) ChildShardOf(dir string) int { return s.shards.ChildShard(dir) }

// MaxShards is the most shards a cluster may have (placement.MaxShards).
const MaxShards = placement.MaxShards
