package server

import (
	"context"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/command"
	"github.com/latch-io/latch/internal/fsm"
)

// The server steps of writes in a sharded cluster (docs/design.md, "Commands
// and server steps"): every proposal of a group goes through group.Propose,
// which, with more than one shard, gives a session's write outside shard 0
// an Observed index and a liveness check (step 1.1, 1.2), takes the open
// path of a create under a directory whose node lives in another shard
// (1.3), makes missing ancestors top-down (step 2), and retries the
// refusals that ask for it (1.5), a bounded number of times before a 503.

// maxShardAttempts bounds the protocol rounds of one write in one shard.
const maxShardAttempts = 5

// maxDirectoryDepth bounds the ancestors one create makes (and so the
// recursion of makeDirectory): a valid path has fewer segments.
const maxDirectoryDepth = api.MaxPathLen / 2

// proposeRouted proposes cmd in the group and waits for its outcome, taking
// the sharded protocol steps when the cluster has more than one shard. With
// one shard it is the replica's Propose.
func (g *group) proposeRouted(ctx context.Context, cmd *command.Command) (fsm.Result, uint64, error) {
	if g.srv == nil || g.srv.cfg.Shards == 1 {
		return g.Replica.Propose(ctx, cmd)
	}
	return g.srv.proposeInShard(ctx, g, cmd, 0)
}

// proposeInShard runs step 1 of the wiring for cmd in group g; depth counts
// the ancestors being made by the caller (mkdir -p).
func (s *Server) proposeInShard(ctx context.Context, g *group, cmd *command.Command, depth int) (fsm.Result, uint64, error) {
	if !isTreeWrite(cmd.Op) {
		// The directory and session protocol commands carry their own
		// fields and need no step here.
		return g.Replica.Propose(ctx, cmd)
	}
	openPath := false
	quotaRounds := 0
	for attempt := 1; attempt <= maxShardAttempts; attempt++ {
		cmd.Observed, cmd.Incarnation = 0, 0
		checkSession := cmd.SessionID != 0 && g.shard != 0
		if checkSession || openPath {
			observed, err := s.observe(ctx, g)
			if err != nil {
				return fsm.Result{}, 0, err
			}
			cmd.Observed = observed
		}
		if checkSession {
			if err := s.checkSessionLive(ctx, cmd.SessionID); err != nil {
				return fsm.Result{Err: err}, 0, nil
			}
		}
		if openPath {
			incarnation, again, err := s.readParentForOpen(ctx, api.Parent(cmd.Path), depth)
			if err != nil {
				return fsm.Result{Err: err}, 0, nil
			}
			if again {
				// The parent was made, or its delete is in flight (it ends
				// within a few round trips): back off, longer each time.
				if !s.pauseCtx(ctx, min(s.cfg.TickInterval<<attempt, s.electionTimeout())) {
					break
				}
				continue
			}
			cmd.Incarnation = incarnation
		}
		res, index, err := g.Replica.Propose(ctx, cmd)
		if err != nil || res.Redo == fsm.RedoNone {
			return res, index, err
		}
		if cmd.Op == command.OpTxn && (res.Redo == fsm.RedoOpenDirectory || res.Redo == fsm.RedoCreateParent) {
			return fsm.Result{Err: api.Errorf(api.CodeInvalidArgument,
				"with several shards a transaction creates nodes only under directories that exist and already hold a child in the transaction's shard (%v); create the first child outside the transaction", res.Err)}, 0, nil
		}
		switch res.Redo {
		case fsm.RedoQuotaRoom:
			if quotaRounds == maxQuotaRounds {
				return res, index, nil
			}
			quotaRounds++
			attempt-- // bounded by maxQuotaRounds instead
			moved, err := s.makeQuotaRoom(ctx, g.shard, res.QuotaShort)
			if err != nil {
				return fsm.Result{}, 0, err
			}
			if !moved {
				return res, index, nil // no shard has room: 507
			}
		case fsm.RedoOpenDirectory:
			openPath = true
		case fsm.RedoDirectoryFenced, fsm.RedoSessionFenced:
			// Again from the barrier: a close or a session end applied
			// since this attempt observed the shard.
		case fsm.RedoCreateParent:
			if exactParent(ctx) {
				return fsm.Result{Err: missingParent(api.Parent(cmd.Path))}, 0, nil
			}
			if err := s.makeDirectory(ctx, api.Parent(cmd.Path), depth+1); err != nil {
				return fsm.Result{Err: err}, 0, nil
			}
		default:
			// RedoCloseDirectory: the caller (Delete) takes the close
			// protocol.
			return res, index, nil
		}
	}
	return fsm.Result{}, 0, g.Unavailable("shard %d: the write was refused %d times by concurrent directory closes or session ends; retry", g.shard, maxShardAttempts)
}

// isTreeWrite reports whether op is a write of the tree a client makes: the
// writes that may carry a session and create nodes.
func isTreeWrite(op command.Op) bool {
	switch op {
	case command.OpPut, command.OpDelete, command.OpEnqueue, command.OpTxn:
		return true
	}
	return false
}

// observe is barrier(k): a linearizable read barrier on g, whose applied
// index (at or past the quorum's commit index when it was taken) is then
// the Observed index of a proposal.
func (s *Server) observe(ctx context.Context, g *group) (uint64, error) {
	if err := g.Barrier(ctx, api.Linearizable, 0); err != nil {
		return 0, err
	}
	return g.Applied(), nil
}

// checkSessionLive is read(0) of the session: a linearizable read of the
// meta group; an ended session is 410 session_expired.
func (s *Server) checkSessionLive(ctx context.Context, id uint64) error {
	meta := s.metaGroup()
	if err := meta.Barrier(ctx, api.Linearizable, 0); err != nil {
		return err
	}
	var err error
	meta.View(func(f *fsm.FSM) { _, err = f.Session(id) })
	if err != nil {
		return api.Errorf(api.CodeSessionExpired, "session %s is expired or unknown", api.FormatID(id))
	}
	return nil
}

// readParentForOpen is step 1.3: a linearizable read of dir in its own
// shard. It returns dir's incarnation (created_index), or again if dir was
// missing (and is now made) or is being deleted (the delete ends within a
// round trip).
func (s *Server) readParentForOpen(ctx context.Context, dir string, depth int) (incarnation uint64, again bool, err error) {
	g := s.groupFor(dir)
	if err := g.Barrier(ctx, api.Linearizable, 0); err != nil {
		return 0, false, err
	}
	var node fsm.Node
	var mark uint64
	g.View(func(f *fsm.FSM) {
		node, err = f.Get(dir)
		mark = f.ClosingMark(dir)
	})
	switch {
	case api.CodeOf(err) == api.CodeNotFound && exactParent(ctx):
		return 0, false, missingParent(dir)
	case api.CodeOf(err) == api.CodeNotFound:
		return 0, true, s.makeDirectory(ctx, dir, depth+1)
	case err != nil:
		return 0, false, err
	case node.Owner != 0:
		return 0, false, api.Errorf(api.CodeInvalidArgument, "%s is an ephemeral node, which cannot have children", dir)
	case mark != 0:
		return 0, true, nil
	}
	return node.CreatedIndex, false, nil
}

// makeDirectory is step 2 for dir: it creates dir as an empty persistent
// node if it is missing, its own missing ancestors first (each in its own
// shard, top-down, by the same steps). Another request making it first is
// success.
func (s *Server) makeDirectory(ctx context.Context, dir string, depth int) error {
	if dir == "/" {
		return nil
	}
	if depth > maxDirectoryDepth {
		return api.Errorf(api.CodeInternal, "making the ancestors of %s went %d levels deep", dir, depth)
	}
	cmd := &command.Command{Op: command.OpPut, Path: dir, Precondition: command.PrecondNone}
	res, _, err := s.proposeInShard(ctx, s.groupFor(dir), cmd, depth)
	if err != nil {
		return err
	}
	if res.Err != nil && api.CodeOf(res.Err) != api.CodePreconditionFailed {
		return res.Err
	}
	return nil
}

// exactParentKey marks the context of a write whose missing parent is
// refused rather than made (PutRequest.ExactParent).
type exactParentKey struct{}

// withExactParent returns ctx marked with exactParentKey.
func withExactParent(ctx context.Context) context.Context {
	return context.WithValue(ctx, exactParentKey{}, true)
}

// exactParent reports whether ctx carries exactParentKey.
func exactParent(ctx context.Context) bool {
	v, _ := ctx.Value(exactParentKey{}).(bool)
	return v
}

// missingParent is the refusal of an exact-parent create whose parent is
// missing.
func missingParent(dir string) error {
	return api.Errorf(api.CodeNotFound, "parent %s does not exist", dir)
}

// pauseCtx waits d on the server's clock; false if ctx ended or the server
// stopped first.
func (s *Server) pauseCtx(ctx context.Context, d time.Duration) bool {
	timer := s.cfg.Clock.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C():
		return true
	case <-ctx.Done():
		return false
	case <-s.stop:
		return false
	}
}
