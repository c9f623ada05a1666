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
	// Node has Index left 0: ReadManyResult.Index is its index. Its
	// ChildrenIndex is set as Get sets it, when its children count was
	// read in another shard.
	Node api.Node
	// Owner (the owning session's id, 0 for a persistent node) and
	// ChildrenModifiedIndex (ZooKeeper's pzxid, as in fsm.Node) complete
	// Node for the ZooKeeper listener's Stat (NodeView has both).
	Owner, ChildrenModifiedIndex uint64
	Children                     []string
	// Index and Shard are, for a children read, the applied index and the
	// shard of the view its Children were read from: ReadManyResult's,
	// or, in a sharded cluster, the shard of the path's children when
	// they live in another shard than its node.
	Index uint64
	Shard int
	Err   *api.Error
}

// ReadManyResult holds a result per read, all at one applied index.
type ReadManyResult struct {
	Results []ReadResult
	Index   uint64
	Shard   int // the shard whose log Index is of: every read's
}

// ReadMany reads several nodes or children lists at one index, as
// ZooKeeper's multiRead does: each read succeeds or fails on its own, and
// all see the same state. The reads' paths must be in one consensus group,
// as a transaction's operations are; opts applies to them all. In a
// sharded cluster the children of a path (a children read, a node's
// children count) may live in another group: those are read there after
// the main view, each group at its own index (readChildrenElsewhere), as
// Get and Children read them.
func (s *Server) ReadMany(ctx context.Context, reads []ReadOp, opts ReadOptions) (ReadManyResult, error) {
	denied, err := s.authorizeReads(ctx, reads)
	if err != nil {
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
			if denied != nil && denied[i] != nil {
				out.Results[i] = ReadResult{Err: denied[i]}
				continue
			}
			out.Results[i] = readOne(f, read)
		}
	})
	for i := range out.Results {
		out.Results[i].Index, out.Results[i].Shard = out.Index, g.shard
	}
	if s.cfg.Shards > 1 {
		if err := s.readChildrenElsewhere(ctx, reads, opts, &out); err != nil {
			return ReadManyResult{}, err
		}
	}
	return out, nil
}

// readChildrenElsewhere completes the reads of out whose path's children
// live in another shard than its node: a children read gets its names, a
// persistent node read its children count (with ChildrenIndex), from the
// children's shard. Each such shard is read once, after its own barrier at
// the read's consistency (an integer min_index names the node's shard only,
// as in Children). A read that failed in its node's shard (not_found) stays
// failed.
func (s *Server) readChildrenElsewhere(ctx context.Context, reads []ReadOp, opts ReadOptions, out *ReadManyResult) error {
	byShard := map[int][]int{} // children's shard -> positions in reads
	for i, read := range reads {
		r := out.Results[i]
		if r.Err != nil || !s.childrenElsewhere(read.Path) || (!read.Children && r.Node.Ephemeral) {
			continue
		}
		shard := s.shards.ChildShard(read.Path)
		byShard[shard] = append(byShard[shard], i)
	}
	for shard, positions := range byShard {
		g := s.groups[shard].Load()
		if err := g.Barrier(ctx, opts.Consistency, opts.vectorIndexIn(g)); err != nil {
			return err
		}
		index := g.View(func(f *fsm.FSM) {
			for _, i := range positions {
				readChildrenIn(f, reads[i], &out.Results[i])
			}
		})
		for _, i := range positions {
			out.Results[i].Index, out.Results[i].Shard = index, g.shard
			if !reads[i].Children && out.Results[i].Err == nil {
				out.Results[i].Node.ChildrenIndex = index
			}
		}
	}
	return nil
}

// readChildrenIn reads read's children (or, for a node read, its children
// count) into r from f, the state of the shard of read.Path's children,
// under the caller's View.
func readChildrenIn(f *fsm.FSM, read ReadOp, r *ReadResult) {
	if read.Children {
		names, err := f.Children(read.Path)
		if err != nil {
			*r = ReadResult{Err: asAPIError(err)}
			return
		}
		r.Children = names
		return
	}
	dir, err := f.Directory(read.Path)
	if err != nil {
		*r = ReadResult{Err: asAPIError(err)}
		return
	}
	r.Node.ChildrenCount = dir.ChildrenCount
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
	return ReadResult{Node: apiNode(node), Owner: node.Owner, ChildrenModifiedIndex: node.ChildrenModifiedIndex}
}
