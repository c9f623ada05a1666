package server

import (
	"context"
	"fmt"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/command"
	"github.com/latch-io/latch/internal/fsm"
	"github.com/latch-io/latch/internal/queues"
	"github.com/latch-io/latch/internal/replica"
	"github.com/latch-io/latch/internal/sessions"
	"github.com/latch-io/latch/internal/watch"
)

// group is one consensus group on this server: its replica runtime and the
// features that run over it. groupFor picks the group of a path.
type group struct {
	*replica.Replica
	sessions *sessions.Liveness
	queues   *queues.Queues
	// watches fires clients' watches at apply time, on this server only.
	watches *watch.Registry
	// admit, if set, may refuse a proposal before it is made (Propose).
	admit func() error
	// srv runs the sharded protocol steps of the group's proposals
	// (group.Propose); shard is the group's shard.
	srv   *Server
	shard int
}

// Barrier is replica.Replica.Barrier with a shortcut for the commonest
// read: a stale one whose min_index is applied here already waits for
// nothing, so it only checks that the replica still serves, without the
// deadline context (a timer) that Barrier sets up for its waits.
func (g *group) Barrier(ctx context.Context, consistency string, minIndex uint64) error {
	if consistency == api.Stale && minIndex <= g.Applied() {
		return g.Halted()
	}
	return g.Replica.Barrier(ctx, consistency, minIndex)
}

// newGroup builds group id's runtime and features. The apply listeners are
// registered in the order the replica package comment gives: the session
// tracker and the watch registry see each applied command under the write
// lock (sessions first: its metrics count what it tracks), the registry
// publishes the batch's events under it, and the lock queues wake their
// waiters once it is released.
func (s *Server) newGroup(id uint64) (*group, error) {
	g := &group{
		admit: s.admit, srv: s, shard: shardOfGroup(id),
		watches: watch.New(watch.Options{
			MaxPerSession: s.cfg.MaxWatchesPerSession, QueueLen: s.cfg.WatchQueueLen, RequireStream: true,
			MaxPerOwner: s.cfg.Auth.MaxUserWatches,
		}),
	}
	// The features reach the runtime through g, whose Replica is set below:
	// they are its listeners, registered at its construction.
	g.sessions = sessions.New(sessions.Config{
		Self: s.id, Replica: g, Peers: s.transport, Metrics: s.metrics, Clock: s.cfg.Clock,
		Logger: s.log, MinSessionTTL: s.cfg.MinSessionTTL, ElectionTimeout: s.electionTimeout(), RequestTimeout: s.cfg.RequestTimeout,
	})
	g.queues = queues.New(queues.Config{Replica: g, MaxValueSize: s.cfg.MaxValueSize})
	r, err := replica.New(replica.Config{
		Self: s.id, Group: id, Shard: shardOfGroup(id), Shards: s.cfg.Shards, RequestTimeout: s.cfg.RequestTimeout, ElectionTimeout: s.electionTimeout(),
		MaxPending: s.cfg.MaxPending, UnsafeLocalReads: s.cfg.UnsafeLocalReads,
		Listeners:  s.groupListeners(g),
		Membership: (*membership)(s), Metrics: s.metrics.forShard(shardOfGroup(id)), Clock: s.cfg.Clock, Logger: s.log, Stop: s.stop,
	})
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	g.Replica = r
	return g, nil
}

// groupListeners are the apply listeners of g, in the order newGroup's
// comment gives; shard 0 of a sharded cluster adds the one that wakes the
// session cleanup.
func (s *Server) groupListeners(g *group) []replica.Listener {
	listeners := []replica.Listener{g.sessions, watchListener{w: g.watches}, g.queues}
	if g.shard == 0 && s.cfg.Shards > 1 {
		listeners = append(listeners, endingListener{s: s})
	}
	return listeners
}

// watchListener feeds the watch registry from the apply path.
type watchListener struct {
	replica.NopListener
	w *watch.Registry
}

// AppliedLocked drops the watches of the sessions cmd ended.
func (l watchListener) AppliedLocked(cmd *command.Command, _ fsm.Result) {
	switch cmd.Op {
	case command.OpSessionClose:
		l.w.SessionEnded(cmd.SessionID)
	case command.OpSessionExpire, command.OpSessionsEnded:
		for _, id := range cmd.Sessions {
			l.w.SessionEnded(id)
		}
	}
}

// PublishLocked fires the watches of a batch's events, under the write lock
// (a watch is registered under the read lock at the applied index).
func (l watchListener) PublishLocked(events []fsm.Event) { l.w.PublishLocked(events) }

// RestoredLocked drops every watch: the events between the old state and
// the snapshot's are unknown.
func (l watchListener) RestoredLocked(_ *fsm.FSM, index uint64) { l.w.RestoredLocked(index) }

// UndecodableEntryError is the fatal error of a replica that met a committed
// entry it cannot decode; ErrUndecodableEntry matches every one (errors.Is).
type UndecodableEntryError = replica.UndecodableEntryError

// ErrUndecodableEntry matches (errors.Is) every *UndecodableEntryError.
var ErrUndecodableEntry = replica.ErrUndecodableEntry
