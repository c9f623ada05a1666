package server

import (
	"context"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/command"
	"github.com/latch-io/latch/internal/fsm"
)

// Deletes in a sharded cluster (docs/design.md, "Commands and server steps",
// steps 3 to 5): a persistent node whose children live in another shard is
// deleted by the close protocol (mark in its shard, close its directory
// record in the children's shard, delete under the mark); a recursive
// delete removes the subtree bottom-up, one node at a time, each by step 3.

// deleteSharded deletes r.Path (step 3, or step 5 if recursive) in a
// cluster of several shards.
func (s *Server) deleteSharded(ctx context.Context, r DeleteRequest, precondition command.Precondition) (fsm.Result, uint64, error) {
	if r.Recursive {
		if err := s.deleteChildren(ctx, r.Path, r.SessionID, 0); err != nil {
			return fsm.Result{Err: err}, 0, nil
		}
	}
	cmd := &command.Command{
		Op: command.OpDelete, Path: r.Path, Precondition: precondition, Version: r.Version,
		SessionID: r.SessionID, RequestSeq: r.RequestSeq,
	}
	res, index, err := s.groupFor(r.Path).Propose(ctx, cmd)
	if err != nil || res.Redo != fsm.RedoCloseDirectory {
		return res, index, err
	}
	return s.closeAndDelete(ctx, r.Path, precondition, r.Version)
}

// deleteChildren deletes every node under dir, bottom-up (step 5): the
// children listed in dir's children shard, each after its own subtree.
func (s *Server) deleteChildren(ctx context.Context, dir string, session uint64, depth int) error {
	if depth > maxDirectoryDepth {
		return api.Errorf(api.CodeInternal, "the recursive delete went %d levels deep under %s", depth, dir)
	}
	names, err := s.childNames(ctx, dir)
	if err != nil {
		if api.CodeOf(err) == api.CodeNotFound {
			return nil // the final delete answers 404
		}
		return err
	}
	for _, name := range names {
		child := childPath(dir, name)
		if err := s.deleteChildren(ctx, child, session, depth+1); err != nil {
			return err
		}
		res, _, err := s.deleteSharded(ctx, DeleteRequest{Path: child, SessionID: session}, command.PrecondAny)
		if err != nil {
			return err
		}
		if res.Err != nil && api.CodeOf(res.Err) != api.CodeNotFound {
			return res.Err
		}
	}
	return nil
}

func childPath(dir, name string) string {
	if dir == "/" {
		return "/" + name
	}
	return dir + "/" + name
}

// closeAndDelete is the close protocol of step 3 for the persistent node
// path: mark it closing (with the client's precondition), close its
// directory record in its children's shard, delete it under the mark. If
// the close is refused (children), the mark is removed and the refusal is
// the answer. A failure after the mark leaves it for the shard's leader to
// finish (finishMarks).
func (s *Server) closeAndDelete(ctx context.Context, path string, precondition command.Precondition, version uint64) (fsm.Result, uint64, error) {
	nodeGroup := s.groupFor(path)
	marked, _, err := nodeGroup.Propose(ctx, &command.Command{Op: command.OpDirMark, Path: path, Precondition: precondition, Version: version})
	if err != nil || marked.Err != nil {
		return marked, 0, err
	}
	return s.finishClose(ctx, path, marked.Mark, marked.Node.CreatedIndex)
}

// finishClose runs steps 3.2 and 3.3 for path, marked closing under mark,
// of incarnation incarnation: the close, then the delete, or the unmark if
// the close is refused. Each step may run twice (a leader finishing a mark
// a server left): a second close only raises the fence again, and of a
// delete and an unmark under one mark only the first applies.
func (s *Server) finishClose(ctx context.Context, path string, mark, incarnation uint64) (fsm.Result, uint64, error) {
	nodeGroup := s.groupFor(path)
	closed, _, err := s.childGroup(path).Propose(ctx, &command.Command{Op: command.OpDirClose, Path: path, Incarnation: incarnation})
	if err != nil {
		return fsm.Result{}, 0, err
	}
	if closed.Err != nil {
		unmarked, _, err := nodeGroup.Propose(ctx, &command.Command{Op: command.OpDirUnmark, Path: path, Mark: mark})
		if err != nil {
			return fsm.Result{}, 0, err
		}
		if unmarked.Err != nil && api.CodeOf(unmarked.Err) != api.CodePreconditionFailed {
			return unmarked, 0, nil
		}
		return closed, 0, nil
	}
	return nodeGroup.Propose(ctx, &command.Command{Op: command.OpDirDelete, Path: path, Mark: mark})
}

// childNames lists dir's children linearizably (step 6): dir's existence
// in its own shard, then the names in its children's shard.
func (s *Server) childNames(ctx context.Context, dir string) ([]string, error) {
	out, err := s.Children(ctx, dir, ReadOptions{Consistency: api.Linearizable})
	return out.Children, err
}
