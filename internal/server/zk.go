package server

import (
	"context"
	"math"
	"slices"
	"strings"
	"sync"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/fsm"
)

// The reads below serve the ZooKeeper listener (package zkserver): they
// read what a ZooKeeper reply needs from one consistent view of the state,
// which the node-at-a-time reads of kv.go cannot give (a Stat beside the
// children list, the owner of an ephemeral node, a subtree count).

// NodeView is one node as the ZooKeeper listener reads it. Owner is the
// owning session's id (0: persistent): the listener shows it only to that
// session itself, since an id is a bearer secret.
type NodeView struct {
	Path          string
	Value         []byte // shared with the state: do not modify
	Version       uint64 // 1 on create, as in docs/api.md
	CreatedIndex  uint64
	ModifiedIndex uint64
	Owner         uint64
	ChildrenCount int
	Children      []string // with NodeReadOptions.Children, sorted
	Index         uint64   // the applied index of the view
	// ChildrenIndex, when the node's children live in another shard than
	// the node (sharded clusters), is the applied index of the view of
	// that shard the children (and their count) were read from; else 0.
	ChildrenIndex uint64
	// CreatedAtMs, ModifiedAtMs, ChildrenVersion and ChildrenModifiedIndex
	// are as in fsm.Node: ZooKeeper's ctime, mtime, cversion and pzxid.
	CreatedAtMs, ModifiedAtMs              uint64
	ChildrenVersion, ChildrenModifiedIndex uint64
}

// NodeReadOptions says what a NodeView read returns beside the node.
type NodeReadOptions struct {
	ReadOptions
	Children bool
}

// ReadNode reads a node (and, if asked, its children) from one view, after
// the barrier opts ask for. A missing node is not_found.
func (s *Server) ReadNode(ctx context.Context, path string, opts NodeReadOptions) (NodeView, error) {
	if err := s.authorizeAs(ctx, permRead, path, 0); err != nil {
		return NodeView{}, err
	}
	if err := api.ValidatePath(path); err != nil {
		return NodeView{}, err
	}
	g := s.groupFor(path)
	if err := g.Barrier(ctx, opts.Consistency, opts.minIndexIn(g)); err != nil {
		return NodeView{}, err
	}
	var out NodeView
	var err error
	out.Index = g.View(func(f *fsm.FSM) {
		var n fsm.Node
		if n, err = f.Get(path); err != nil {
			return
		}
		out.Path, out.Value, out.Version = n.Path, n.Value, n.Version
		out.CreatedIndex, out.ModifiedIndex = n.CreatedIndex, n.ModifiedIndex
		out.Owner, out.ChildrenCount = n.Owner, n.ChildrenCount
		out.CreatedAtMs, out.ModifiedAtMs = n.CreatedAtMs, n.ModifiedAtMs
		out.ChildrenVersion, out.ChildrenModifiedIndex = n.ChildrenVersion, n.ChildrenModifiedIndex
		if opts.Children {
			out.Children, err = f.Children(path)
		}
	})
	if err != nil || out.Owner != 0 || !s.childrenElsewhere(path) {
		return out, err
	}
	return out, s.readForeignChildren(ctx, path, opts, &out)
}

// readForeignChildren fills out's children count (and, if asked, its
// children) from path's children's shard, when they live in another shard
// than its node: from its directory record, at the read's consistency.
// The node's cversion stays its own shard's (docs/zookeeper.md).
func (s *Server) readForeignChildren(ctx context.Context, path string, opts NodeReadOptions, out *NodeView) error {
	g := s.childGroup(path)
	if err := g.Barrier(ctx, opts.Consistency, 0); err != nil {
		return err
	}
	var err error
	out.ChildrenIndex = g.View(func(f *fsm.FSM) {
		var dir fsm.Directory
		if dir, err = f.Directory(path); err != nil {
			return
		}
		out.ChildrenCount = dir.ChildrenCount
		if opts.Children {
			out.Children, err = f.Children(path)
		}
	})
	return err
}

// CountDescendants returns how many nodes lie below path (not counting
// path itself), after the barrier opts ask for, and the applied index of
// the view of path's shard. With several shards the nodes below path lie
// in every shard: each shard's count is read from one view of it after
// its own barrier (all at once; the integer min_index is path's shard's),
// and the counts are summed, so the total is no one snapshot of the
// cluster (docs/zookeeper.md). A shard counts by a scan of its part of
// the subtree (fsm.FSM.UsageUnder), or in O(1) if a quota sits at path.
func (s *Server) CountDescendants(ctx context.Context, path string, opts ReadOptions) (int, uint64, error) {
	if err := s.authorizeAs(ctx, permRead, path, 0); err != nil {
		return 0, 0, err
	}
	if err := api.ValidatePath(path); err != nil {
		return 0, 0, err
	}
	own := s.shards.Shard(path)
	groups, err := s.barrierEvery(ctx, opts, own)
	if err != nil {
		return 0, 0, err
	}
	var total, index uint64
	for shard, g := range groups {
		var nodes uint64
		viewIndex := g.View(func(f *fsm.FSM) {
			if shard == own {
				if _, err = f.Get(path); err != nil {
					return
				}
			}
			nodes, _ = f.UsageUnder(path)
		})
		if shard == own {
			if index = viewIndex; err != nil {
				return 0, index, err
			}
			nodes = max(nodes, 1) - 1 // path itself
		}
		total += nodes
	}
	return int(min(total, math.MaxInt)), index, nil
}

// barrierEvery waits, in every shard at once, for the barrier opts ask
// for, own being the read's own shard (ReadOptions.minIndexIn; the others
// take their min_index vector entry), and returns the groups in shard
// order. A cross-shard read then reads each shard's part from its group,
// as the children listing reads the children's shard (Children).
func (s *Server) barrierEvery(ctx context.Context, opts ReadOptions, own int) ([]*group, error) {
	groups := make([]*group, s.cfg.Shards)
	errs := make([]error, s.cfg.Shards)
	barrier := func(shard int) {
		g, err := s.shardGroup(shard)
		if err == nil {
			minIndex := opts.vectorIndexIn(g)
			if shard == own {
				minIndex = opts.minIndexIn(g)
			}
			err = g.Barrier(ctx, opts.Consistency, minIndex)
		}
		groups[shard], errs[shard] = g, err
	}
	if s.cfg.Shards == 1 {
		barrier(0)
	} else {
		var wg sync.WaitGroup
		for shard := range s.cfg.Shards {
			wg.Go(func() { barrier(shard) })
		}
		wg.Wait()
	}
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return groups, nil
}

// SessionEphemerals returns the paths of session's ephemeral nodes at or
// below prefix (a path prefix, not only a whole node name, as ZooKeeper's
// getEphemerals takes it), sorted, and the applied index of the meta
// group's view. It walks the tree: O(nodes). With several shards it walks
// every shard's part of the tree (walkShards) after a barrier in each;
// the answer is then no one snapshot of the cluster (docs/zookeeper.md).
func (s *Server) SessionEphemerals(ctx context.Context, session uint64, prefix string, opts ReadOptions) ([]string, uint64, error) {
	if err := s.authorizeSessions(ctx, session); err != nil {
		return nil, 0, err
	}
	if s.cfg.Shards > 1 {
		return s.shardedEphemerals(ctx, session, prefix, opts)
	}
	g := s.metaGroup()
	if err := g.Barrier(ctx, opts.Consistency, opts.minIndexIn(g)); err != nil {
		return nil, 0, err
	}
	paths := []string{}
	index := g.View(func(f *fsm.FSM) {
		walkBelow(f, "/", func(p string, n fsm.Node) {
			if n.Owner == session && strings.HasPrefix(p, prefix) {
				paths = append(paths, p)
			}
		})
	})
	return paths, index, nil
}

// shardedEphemerals is SessionEphemerals with several shards: every shard
// is read after its barrier (the integer min_index is the meta group's).
// A session's ephemeral nodes are counted in each shard's record of it
// (shard 0's session, the others' local records): if no shard counts one,
// the answer is empty without a walk.
func (s *Server) shardedEphemerals(ctx context.Context, session uint64, prefix string, opts ReadOptions) ([]string, uint64, error) {
	groups, err := s.barrierEvery(ctx, opts, MetaShard)
	if err != nil {
		return nil, 0, err
	}
	owned := 0
	var index uint64
	for shard, g := range groups {
		viewIndex := g.View(func(f *fsm.FSM) {
			owned += ephemeralsIn(f, session)
		})
		if shard == MetaShard {
			index = viewIndex
		}
	}
	paths := []string{}
	if owned == 0 {
		return paths, index, nil
	}
	err = s.walkShards(ctx, groups, func(p string) bool { return mayHoldPrefix(p, prefix) }, func(p string, n fsm.Node) {
		if n.Owner == session && strings.HasPrefix(p, prefix) {
			paths = append(paths, p)
		}
	})
	if err != nil {
		return nil, 0, err
	}
	slices.Sort(paths)
	return paths, index, nil
}

// mayHoldPrefix reports whether a node below dir may have a path starting
// with prefix.
func mayHoldPrefix(dir, prefix string) bool {
	below := dir + "/"
	return strings.HasPrefix(below, prefix) || strings.HasPrefix(prefix, below)
}

// walkShards calls fn for every node below the root in a sharded cluster,
// a level of the tree at a time, going below a persistent node only if
// descend accepts its path: each directory's children (and their nodes)
// are read in the shard holding them (placement ChildShard), one view of
// each shard per level, from groups (in shard order, their barriers
// passed). Every view is at or after its shard's barrier, so a node that
// exists throughout the walk is seen and one that exists at no time of it
// is not; one created or deleted meanwhile may be either. A directory
// deleted between two levels has no children left (its children go
// first), so skipping it loses nothing.
func (s *Server) walkShards(ctx context.Context, groups []*group, descend func(string) bool, fn func(string, fsm.Node)) error {
	dirs := []string{"/"}
	for depth := 0; len(dirs) > 0; depth++ {
		if depth > maxDirectoryDepth {
			return api.Errorf(api.CodeInternal, "the tree walk went %d levels deep", depth)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		byShard := make([][]string, len(groups))
		for _, dir := range dirs {
			shard := s.shards.ChildShard(dir)
			byShard[shard] = append(byShard[shard], dir)
		}
		var next []string
		for shard, level := range byShard {
			if len(level) == 0 {
				continue
			}
			groups[shard].View(func(f *fsm.FSM) {
				for _, dir := range level { // one deleted since the level above has none
					eachChild(f, dir, func(child string, n fsm.Node) {
						fn(child, n)
						// An ephemeral node has no children; a node whose
						// children live with it says how many it has.
						local := s.shards.ChildShard(child) == shard
						if n.Owner == 0 && !(local && n.ChildrenCount == 0) && descend(child) {
							next = append(next, child)
						}
					})
				}
			})
		}
		dirs = next
	}
	return nil
}

// walkBelow calls fn for every node below path, in pre-order.
func walkBelow(f *fsm.FSM, path string, fn func(string, fsm.Node)) {
	eachChild(f, path, func(child string, n fsm.Node) {
		fn(child, n)
		if n.ChildrenCount > 0 {
			walkBelow(f, child, fn)
		}
	})
}

// eachChild calls fn for each child of dir in f, in name order; a dir
// that does not exist has none.
func eachChild(f *fsm.FSM, dir string, fn func(string, fsm.Node)) {
	names, err := f.Children(dir)
	if err != nil {
		return
	}
	for _, name := range names {
		child := api.Join(dir, name)
		if n, err := f.Get(child); err == nil {
			fn(child, n)
		}
	}
}

// Counts is the size of this server's applied state, for the ZooKeeper
// listener's four-letter words.
type Counts struct {
	Nodes, Sessions int
	Index           uint64
}

// StateCounts returns the node and session counts of this member's
// applied state, and the meta group's applied index: a local view without
// a barrier, as ZooKeeper answers its four-letter words from its own
// state, cheap enough for every monitoring poll. With several shards
// Nodes sums every running shard's local count without a barrier (each
// shard at its own applied index, so no one snapshot, and a shard behind
// on this member counts what it applied), the root once although every
// shard keeps one; Sessions is the meta group's (the other shards' local
// records of sessions are no sessions).
func (s *Server) StateCounts() Counts {
	var c Counts
	c.Index = s.metaGroup().View(func(f *fsm.FSM) { c.Nodes, c.Sessions = f.NodeCount(), f.SessionCount() })
	for shard, g := range s.allGroups() {
		if shard == MetaShard || g == nil {
			continue
		}
		g.View(func(f *fsm.FSM) { c.Nodes += f.NodeCount() - 1 }) // its copy of the root
	}
	return c
}

// SessionTimeouts returns the range a session timeout is clamped to.
func (s *Server) SessionTimeouts() (minMs, maxMs int64) {
	return s.cfg.MinSessionTTL.Milliseconds(), s.cfg.MaxSessionTTL.Milliseconds()
}

// Name is this member's name.
func (s *Server) Name() string { return s.cfg.Name }

// WallTimeMs is this member's wall clock (Config.Clock's Wall) in
// milliseconds since the Unix epoch, as replica.Replica.Propose stamps it:
// the ZooKeeper listener chooses a write's TimeMs with it (PutRequest,
// TxnRequest), so that it can report the ctime and mtime the write records
// without reading the node again.
func (s *Server) WallTimeMs() uint64 {
	return uint64(max(s.cfg.Clock.Wall().UnixMilli(), 1)) // as replica's wallMs
}
