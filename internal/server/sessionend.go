package server

import (
	"context"
	"fmt"
	"sync"

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

// cleanedIndexes returns, for the close at closeIndex of session id whose
// cleanup every shard applied (waitCleaned), an index of each shard at
// which that shard's cleanup is applied on this member: closeIndex for
// shard 0, and for every other shard its applied index after a
// linearizable barrier. The cleanup was committed in each shard before it
// left shard 0's ending list, but this member may not have applied it yet,
// and its applied index alone would be no position a read elsewhere can
// wait for. The barriers run at once, one quorum round in all. Nil with
// one shard.
func (s *Server) cleanedIndexes(ctx context.Context, id, closeIndex uint64) (map[int]uint64, error) {
	if s.cfg.Shards == 1 {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	indexes := make([]uint64, len(s.groups))
	errs := make([]error, len(s.groups))
	var wg sync.WaitGroup
	for shard := 1; shard < len(s.groups); shard++ {
		wg.Go(func() { indexes[shard], errs[shard] = s.shardPosition(ctx, shard) })
	}
	wg.Wait()
	out := map[int]uint64{0: closeIndex}
	for shard := 1; shard < len(s.groups); shard++ {
		if errs[shard] != nil {
			return nil, s.metaGroup().Unavailable("session %s is closed and its ephemeral nodes deleted in every shard, but shard %d's index could not be read in time: %v",
				api.FormatID(id), shard, errs[shard])
		}
		out[shard] = indexes[shard]
	}
	return out, nil
}

// shardPosition is shard's applied index on this member after a
// linearizable barrier: at least every entry committed before the call.
func (s *Server) shardPosition(ctx context.Context, shard int) (uint64, error) {
	g := s.groups[shard].Load()
	if g == nil {
		return 0, fmt.Errorf("shard %d is not running yet", shard)
	}
	if err := g.Barrier(ctx, api.Linearizable, 0); err != nil {
		return 0, err
	}
	return g.Applied(), nil
}
