package server

import (
	"context"
	"strings"

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
// path itself), from one view after the barrier opts ask for.
func (s *Server) CountDescendants(ctx context.Context, path string, opts ReadOptions) (int, uint64, error) {
	if err := s.authorizeAs(ctx, permRead, path, 0); err != nil {
		return 0, 0, err
	}
	if err := api.ValidatePath(path); err != nil {
		return 0, 0, err
	}
	g := s.groupFor(path)
	if err := g.Barrier(ctx, opts.Consistency, opts.minIndexIn(g)); err != nil {
		return 0, 0, err
	}
	count := 0
	var err error
	index := g.View(func(f *fsm.FSM) {
		if _, err = f.Get(path); err != nil {
			return
		}
		walkBelow(f, path, func(string, fsm.Node) { count++ })
	})
	return count, index, err
}

// SessionEphemerals returns the paths of session's ephemeral nodes at or
// below prefix (a path prefix, not only a whole node name, as ZooKeeper's
// getEphemerals takes it), sorted. It walks the tree: O(nodes).
func (s *Server) SessionEphemerals(ctx context.Context, session uint64, prefix string, opts ReadOptions) ([]string, uint64, error) {
	if err := s.authorizeSessions(ctx, session); err != nil {
		return nil, 0, err
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

// walkBelow calls fn for every node below path, in pre-order.
func walkBelow(f *fsm.FSM, path string, fn func(string, fsm.Node)) {
	names, err := f.Children(path)
	if err != nil {
		return
	}
	for _, name := range names {
		child := api.Join(path, name)
		n, err := f.Get(child)
		if err != nil {
			continue
		}
		fn(child, n)
		if n.ChildrenCount > 0 {
			walkBelow(f, child, fn)
		}
	}
}

// Counts is the size of this server's applied state, for the ZooKeeper
// listener's four-letter words.
type Counts struct {
	Nodes, Sessions int
	Index           uint64
}

// StateCounts returns the node and session counts of the applied state.
func (s *Server) StateCounts() Counts {
	var c Counts
	c.Index = s.metaGroup().View(func(f *fsm.FSM) { c.Nodes, c.Sessions = f.NodeCount(), f.SessionCount() })
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
