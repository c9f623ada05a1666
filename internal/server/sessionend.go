package server

import (
	"context"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/command"
	"github.com/latch-io/latch/internal/fsm"
	"github.com/latch-io/latch/internal/replica"
)

// Step 7 of the wiring (docs/design.md, "Sessions stay cluster-wide"): a
// session ends in shard 0 (close or expiry), which puts it on the ending
// list; shard 0's leader then proposes OpSessionsEnded for a batch of the
// list in every other shard, each until it applied, and OpSessionsCleaned in
// shard 0. The list is replicated, so a new leader resumes what its
// predecessor left; both commands are idempotent. A close is answered once
// its session left the list.

// cleanupBatch bounds the sessions one OpSessionsEnded names.
const cleanupBatch = 256

// endingListener wakes the cleanup loop of shard 0 when a session ends and
// when this member becomes shard 0's leader.
type endingListener struct {
	replica.NopListener
	s *Server
}

// AppliedLocked nudges the cleanup on every session end.
func (l endingListener) AppliedLocked(cmd *command.Command, _ fsm.Result) {
	if cmd.Op == command.OpSessionClose || cmd.Op == command.OpSessionExpire {
		l.s.nudgeCleanup()
	}
}

// LeaderChanged nudges the cleanup when this member takes office.
func (l endingListener) LeaderChanged(leader, _ uint64) {
	if leader == l.s.id {
		l.s.nudgeCleanup()
	}
}

// nudgeCleanup wakes the cleanup loop without blocking.
func (s *Server) nudgeCleanup() {
	select {
	case s.cleanupWake <- struct{}{}:
	default:
	}
}

// runSessionCleanup runs the cleanups of ended sessions while this member
// leads shard 0: at every nudge and once an election timeout (a cleanup
// that failed midway is retried then).
func (s *Server) runSessionCleanup() {
	ticker := s.cfg.Clock.NewTicker(s.electionTimeout())
	defer ticker.Stop()
	for {
		select {
		case <-s.cleanupWake:
		case <-ticker.C():
		case <-s.stop:
			return
		}
		s.cleanEndedSessions()
	}
}

// cleanEndedSessions cleans batches of the ending list until it is empty, a
// proposal fails (retried at the next round), or this member no longer
// leads shard 0.
func (s *Server) cleanEndedSessions() {
	meta := s.metaGroup()
	for meta != nil && meta.Leader() == s.id {
		ids := s.endingBatch(meta)
		if len(ids) == 0 {
			return
		}
		if err := s.cleanSessions(meta, ids); err != nil {
			s.log.Info("session cleanup in the other shards not done; retrying", "sessions", len(ids), "err", err)
			return
		}
	}
}

// endingBatch returns the ids of up to cleanupBatch sessions of the list.
func (s *Server) endingBatch(meta *group) []uint64 {
	var ids []uint64
	meta.View(func(f *fsm.FSM) {
		for _, e := range f.EndingSessions() {
			if len(ids) == cleanupBatch {
				break
			}
			ids = append(ids, e.ID)
		}
	})
	return ids
}

// cleanSessions proposes OpSessionsEnded for ids in every shard but 0, then
// OpSessionsCleaned in shard 0.
func (s *Server) cleanSessions(meta *group, ids []uint64) error {
	for shard := 1; shard < len(s.groups); shard++ {
		g := s.groups[shard].Load()
		if g == nil {
			return api.Errorf(api.CodeUnavailable, "shard %d is not running yet", shard)
		}
		if err := s.proposeCleanup(g, &command.Command{Op: command.OpSessionsEnded, Sessions: ids}); err != nil {
			return err
		}
	}
	return s.proposeCleanup(meta, &command.Command{Op: command.OpSessionsCleaned, Sessions: ids})
}

func (s *Server) proposeCleanup(g *group, cmd *command.Command) error {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.RequestTimeout)
	defer cancel()
	res, _, err := g.Replica.Propose(ctx, cmd)
	if err != nil {
		return err
	}
	if res.Err != nil {
		s.log.Error("a session cleanup was refused: a routing bug", "shard", g.shard, "op", cmd.Op, "err", res.Err)
		return res.Err
	}
	return nil
}

// waitCleaned waits until session id left shard 0's ending list: every
// other shard applied its cleanup. With one shard there is no list.
func (s *Server) waitCleaned(ctx context.Context, id uint64) error {
	if s.cfg.Shards == 1 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	meta := s.metaGroup()
	for {
		ending := false
		applied := meta.View(func(f *fsm.FSM) {
			for _, e := range f.EndingSessions() {
				ending = ending || e.ID == id
			}
		})
		if !ending {
			return nil
		}
		s.nudgeCleanup()
		if err := meta.WaitApplied(ctx, applied+1); err != nil {
			return meta.Unavailable("session %s is closed, but the deletion of its ephemeral nodes in every shard was not confirmed in time (it completes on its own)", api.FormatID(id))
		}
	}
}
