package server

import (
	"context"
	"strings"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/command"
	"github.com/latch-io/latch/internal/fsm"
	"github.com/latch-io/latch/internal/queues"
)

// Precondition is the compare part of a compare-and-set write, read from
// prev_version: the wire layer names it without knowing how a command
// encodes it.
type Precondition uint8

// The preconditions of a write.
const (
	AnyVersion Precondition = iota // no condition (prev_version=any)
	NoNode                         // the node must not exist (prev_version=none or 0)
	AtVersion                      // the node's version must equal the request's Version
)

// command returns the precondition as a command carries it; an unknown one
// is refused rather than read as no condition.
func (p Precondition) command() (command.Precondition, error) {
	switch p {
	case AnyVersion:
		return command.PrecondAny, nil
	case NoNode:
		return command.PrecondNone, nil
	case AtVersion:
		return command.PrecondVersion, nil
	}
	return 0, api.Errorf(api.CodeInvalidArgument, "unknown precondition %d", p)
}

// PutRequest is a validated-at-the-edge PUT of docs/api.md.
type PutRequest struct {
	Path         string
	Value        []byte
	Precondition Precondition
	Version      uint64 // with AtVersion
	Ephemeral    bool
	Sequential   bool
	SessionID    uint64
	RequestSeq   uint64
	// TimeMs, if not 0, is the wall-clock time (ms since the Unix epoch)
	// the write records as the node's mtime (and ctime, if it creates it);
	// 0: this member's clock when it proposes (replica.Replica.Propose).
	TimeMs uint64
	// ExactParent, with more than one shard, makes a missing parent a
	// not_found refusal instead of creating it (mkdir -p, the HTTP API's
	// rule): ZooKeeper's create. With one shard it is refused: there a
	// transaction (a check of the parent and the create) does the same in
	// one entry.
	ExactParent bool
}

// DeleteRequest is a DELETE of docs/api.md.
type DeleteRequest struct {
	Path         string
	Precondition Precondition
	Version      uint64 // with AtVersion
	Recursive    bool
	SessionID    uint64
	RequestSeq   uint64
}

// ReadOptions says how fresh a read must be.
type ReadOptions struct {
	Consistency string // api.Linearizable (default) or api.Stale
	// MinIndex is min_index as an integer: an index of the log of the
	// read's own shard (the path's; shard 0's for sessions and status).
	MinIndex uint64
	// MinIndexes is min_index as a vector, shard number to index: each
	// shard a read touches waits for its own entry (none: no wait). At
	// most one of MinIndex and MinIndexes is set.
	MinIndexes map[int]uint64
}

// minIndexIn is the min_index of the read's barrier in g, the group of the
// read's own shard: the vector's entry for g's shard, or the integer.
func (o ReadOptions) minIndexIn(g *group) uint64 {
	if o.MinIndexes != nil {
		return o.MinIndexes[g.shard]
	}
	return o.MinIndex
}

// vectorIndexIn is the min_index of a barrier in g, another shard than the
// read's own (a directory's children): the vector's entry for g's shard,
// and nothing for an integer, which names the read's own shard.
func (o ReadOptions) vectorIndexIn(g *group) uint64 { return o.MinIndexes[g.shard] }

// Put creates or updates a node once a quorum has it and this server applied it.
func (s *Server) Put(ctx context.Context, r PutRequest) (api.Node, error) {
	if err := s.authorizeAs(ctx, permWrite, r.Path, r.SessionID); err != nil {
		return api.Node{}, err
	}
	if err := api.ValidatePath(r.Path); err != nil {
		return api.Node{}, err
	}
	if len(r.Value) > s.cfg.MaxValueSize {
		return api.Node{}, api.Errorf(api.CodeTooLarge, "value is %d bytes, over the limit of %d", len(r.Value), s.cfg.MaxValueSize)
	}
	if r.Ephemeral && r.SessionID == 0 {
		return api.Node{}, api.Errorf(api.CodeInvalidArgument, "an ephemeral node needs a session_id")
	}
	if err := refusePlainQueueWrite(r.Path); err != nil {
		return api.Node{}, err
	}
	precondition, err := r.Precondition.command()
	if err != nil {
		return api.Node{}, err
	}
	if r.ExactParent {
		if s.cfg.Shards == 1 {
			return api.Node{}, api.Errorf(api.CodeInvalidArgument, "exact_parent is for a cluster of several shards; use a transaction")
		}
		ctx = withExactParent(ctx)
	}
	cmd := &command.Command{
		Op: command.OpPut, Path: r.Path, Value: r.Value,
		Precondition: precondition, Version: r.Version,
		Ephemeral: r.Ephemeral, Sequential: r.Sequential,
		SessionID: r.SessionID, RequestSeq: r.RequestSeq, TimeMs: r.TimeMs,
	}
	res, index, err := s.groupFor(r.Path).Propose(ctx, cmd)
	if err != nil {
		return api.Node{}, err
	}
	if res.Err != nil {
		return api.Node{}, res.Err
	}
	n := res.Node
	return api.Node{
		Path: n.Path, Version: n.Version, CreatedIndex: n.CreatedIndex,
		ModifiedIndex: n.ModifiedIndex, Index: index,
	}, nil
}

// Delete removes a node (or, recursive, a subtree): in one entry with one
// shard, by the steps of sharddelete.go with several.
func (s *Server) Delete(ctx context.Context, r DeleteRequest) (api.Deleted, error) {
	if err := s.authorizeAs(ctx, permWrite, r.Path, r.SessionID); err != nil {
		return api.Deleted{}, err
	}
	if err := api.ValidatePath(r.Path); err != nil {
		return api.Deleted{}, err
	}
	precondition, err := r.Precondition.command()
	if err != nil {
		return api.Deleted{}, err
	}
	var (
		res   fsm.Result
		index uint64
	)
	if s.cfg.Shards > 1 {
		res, index, err = s.deleteSharded(ctx, r, precondition)
	} else {
		cmd := &command.Command{
			Op: command.OpDelete, Path: r.Path,
			Precondition: precondition, Version: r.Version, Recursive: r.Recursive,
			SessionID: r.SessionID, RequestSeq: r.RequestSeq,
		}
		res, index, err = s.groupFor(r.Path).Propose(ctx, cmd)
	}
	if err != nil {
		return api.Deleted{}, err
	}
	if res.Err != nil {
		return api.Deleted{}, res.Err
	}
	return api.Deleted{Deleted: true, Index: index}, nil
}

// Get reads a node at the requested consistency.
func (s *Server) Get(ctx context.Context, path string, opts ReadOptions) (api.Node, error) {
	if err := s.authorizeAs(ctx, permRead, path, 0); err != nil {
		return api.Node{}, err
	}
	if err := api.ValidatePath(path); err != nil {
		return api.Node{}, err
	}
	g := s.groupFor(path)
	if err := g.Barrier(ctx, opts.Consistency, opts.minIndexIn(g)); err != nil {
		return api.Node{}, err
	}
	var node fsm.Node
	var err error
	index := g.View(func(f *fsm.FSM) { node, err = f.Get(path) })
	if err != nil {
		return api.Node{}, err
	}
	out := apiNode(node)
	out.Index = index
	if s.childrenElsewhere(path) && node.Owner == 0 {
		if out.ChildrenCount, out.ChildrenIndex, err = s.childrenCount(ctx, path, opts); err != nil {
			return api.Node{}, err
		}
	}
	return out, nil
}

// apiNode is node as the API shows it, without the read's index. The
// owner's id is its bearer secret: a read shows its handle.
func apiNode(node fsm.Node) api.Node {
	out := api.Node{
		Path: node.Path, Value: string(node.Value), Version: node.Version,
		CreatedIndex: node.CreatedIndex, ModifiedIndex: node.ModifiedIndex,
		Ephemeral: node.Owner != 0, ChildrenCount: node.ChildrenCount,
		CreatedAtMs: node.CreatedAtMs, ModifiedAtMs: node.ModifiedAtMs, ChildrenVersion: node.ChildrenVersion,
	}
	if node.Owner != 0 {
		out.OwnerHandle = api.FormatSessionHandle(node.Owner)
	}
	return out
}

// Children lists a node's children, sorted by name.
func (s *Server) Children(ctx context.Context, path string, opts ReadOptions) (api.Children, error) {
	if err := s.authorizeAs(ctx, permRead, path, 0); err != nil {
		return api.Children{}, err
	}
	if err := api.ValidatePath(path); err != nil {
		return api.Children{}, err
	}
	g := s.groupFor(path)
	if err := g.Barrier(ctx, opts.Consistency, opts.minIndexIn(g)); err != nil {
		return api.Children{}, err
	}
	var names []string
	var err error
	index := g.View(func(f *fsm.FSM) { names, err = f.Children(path) })
	if err != nil {
		return api.Children{}, err
	}
	if s.childrenElsewhere(path) {
		// path exists (read above in its shard); its children are in
		// another shard, whose index the listing carries.
		g = s.childGroup(path)
		if err := g.Barrier(ctx, opts.Consistency, opts.vectorIndexIn(g)); err != nil {
			return api.Children{}, err
		}
		index = g.View(func(f *fsm.FSM) { names, err = f.Children(path) })
		if err != nil {
			return api.Children{}, err
		}
	}
	if names == nil {
		names = []string{}
	}
	return api.Children{Path: path, Children: names, Index: index}, nil
}

// childrenElsewhere reports whether path's children live in another shard
// than its node (never with one shard).
func (s *Server) childrenElsewhere(path string) bool {
	return s.shards.ChildShard(path) != s.shards.Shard(path)
}

// childrenCount reads path's children count from its directory record in
// its children's shard (step 6), at the read's consistency, and that
// shard's applied index.
func (s *Server) childrenCount(ctx context.Context, path string, opts ReadOptions) (int, uint64, error) {
	g := s.childGroup(path)
	if err := g.Barrier(ctx, opts.Consistency, opts.vectorIndexIn(g)); err != nil {
		return 0, 0, err
	}
	var dir fsm.Directory
	var err error
	index := g.View(func(f *fsm.FSM) { dir, err = f.Directory(path) })
	return dir.ChildrenCount, index, err
}

// refusePlainQueueWrite refuses a PUT at or under /locks or /elections:
// those trees belong to the lock and election endpoints, and a node written
// there by hand could otherwise hold a lock, jump a queue or make the
// directory unusable (an ephemeral directory cannot have children). DELETE
// stays allowed, but the state machine refuses to delete another session's
// ephemeral node: a queue node's own session deleting it ends that place, as
// its session's end would.
func refusePlainQueueWrite(path string) error {
	for _, root := range []string{queues.LocksRoot, queues.ElectionsRoot} {
		if path == root || strings.HasPrefix(path, root+"/") {
			return api.Errorf(api.CodeInvalidArgument,
				"%s is reserved for locks and elections: write there through /v1/lock and /v1/election, not /v1/kv", path)
		}
	}
	return nil
}
