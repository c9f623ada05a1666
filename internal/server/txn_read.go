package server

import (
	"context"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/fsm"
)

// ReadOp is one read of a multi-read: the node at Path, or with Children
// the names of its children.
type ReadOp struct {
	Path     string
	Children bool
}

// ReadResult is one read's outcome: Node (with Children, Children) or Err,
// the read's own refusal (not_found, invalid_argument), which does not
// fail the others.
type ReadResult struct {
	Node     api.Node // Index left 0: ReadManyResult.Index is the one index
	Children []string
	Err      *api.Error
}

// ReadManyResult holds a result per read, all at one applied index.
type ReadManyResult struct {
	Results []ReadResult
	Index   uint64
	Shard   int // the shard whose log Index is of: every read's
}

// ReadMany reads several nodes or children lists at one index, as
// ZooKeeper's multiRead does: each read succeeds or fails on its own, and
// all see the same state. The reads must be in one consensus group, as a
// transaction's operations are; opts applies to them all.
func (s *Server) ReadMany(ctx context.Context, reads []ReadOp, opts ReadOptions) (ReadManyResult, error) {
	if err := s.authorizeReads(ctx, reads); err != nil {
		return ReadManyResult{}, err
	}
	if len(reads) == 0 {
		return ReadManyResult{}, api.Errorf(api.CodeInvalidArgument, "a multi-read needs at least one read")
	}
	if len(reads) > api.MaxTxnOps {
		return ReadManyResult{}, api.Errorf(api.CodeTooLarge, "multi-read of %d reads, over the limit of %d", len(reads), api.MaxTxnOps)
	}
	paths := make([]string, len(reads))
	for i := range reads {
		paths[i] = reads[i].Path
	}
	if _, err := oneGroup(paths, func(path string) uint64 { return uint64(s.groupFor(path).shard) }); err != nil {
		return ReadManyResult{}, err
	}
	g := s.groupFor(paths[0])
	if err := g.Barrier(ctx, opts.Consistency, opts.minIndexIn(g)); err != nil {
		return ReadManyResult{}, err
	}
	out := ReadManyResult{Results: make([]ReadResult, len(reads)), Shard: g.shard}
	out.Index = g.View(func(f *fsm.FSM) {
		for i, read := range reads {
			out.Results[i] = readOne(f, read)
		}
	})
	return out, nil
}

// readOne reads one path of a multi-read from f.
func readOne(f *fsm.FSM, read ReadOp) ReadResult {
	if read.Children {
		names, err := f.Children(read.Path)
		if err != nil {
			return ReadResult{Err: asAPIError(err)}
		}
		if names == nil {
			names = []string{}
		}
		return ReadResult{Children: names}
	}
	node, err := f.Get(read.Path)
	if err != nil {
		return ReadResult{Err: asAPIError(err)}
	}
	return ReadResult{Node: apiNode(node)}
}
