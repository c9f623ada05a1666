package fsm

import (
	"fmt"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/placement"
)

// shardID says which shard of the cluster a state machine is: shard index
// of placement.Shards() shards. Shard 0 is the meta shard: it holds the
// members and the session table.
type shardID struct {
	index     int
	placement placement.Map
}

// unsharded is the only shard of a cluster with one shard.
var unsharded = mustShardID(0, 1)

func mustShardID(shard, shards int) shardID {
	id, err := newShardID(shard, shards)
	if err != nil {
		panic(err)
	}
	return id
}

func newShardID(shard, shards int) (shardID, error) {
	m, err := placement.New(shards)
	if err != nil {
		return shardID{}, fmt.Errorf("fsm: %w", err)
	}
	if shard < 0 || shard >= shards {
		return shardID{}, fmt.Errorf("fsm: shard %d of %d: a shard is from 0 to %d", shard, shards, shards-1)
	}
	return shardID{index: shard, placement: m}, nil
}

func (s shardID) count() int { return s.placement.Shards() }

// sharded reports whether the cluster has more than one shard: only then
// do directory records, fences and the ending list exist.
func (s shardID) sharded() bool { return s.count() > 1 }

// meta reports whether this is shard 0, the one holding sessions and
// members.
func (s shardID) meta() bool { return s.index == 0 }

func (s shardID) String() string { return fmt.Sprintf("shard %d of %d", s.index, s.count()) }

// Shard returns which shard of how many this state machine is.
func (f *FSM) Shard() (shard, shards int) { return f.shard.index, f.shard.count() }

// Redo says which protocol step a sharded command's refusal asks the server
// to take before it proposes again (docs/design.md, "Sharding"). A refusal
// with a Redo is never remembered in an exactly-once window, so the retry
// with the same request_seq applies once.
type Redo uint8

// The redo reasons.
const (
	RedoNone Redo = iota
	// RedoSessionFenced: a session's write in a shard other than 0 carried
	// an Observed index below the shard's session fence (a session end
	// applied since the server checked liveness). Read a new Observed
	// through a barrier, check the session in shard 0 again, propose again.
	RedoSessionFenced
	// RedoDirectoryFenced: a create that opens a directory record carried
	// an Observed index below the shard's directory fence (a directory
	// close applied since), or an Incarnation that is not the open
	// record's. Read a new Observed, read the parent in its shard again,
	// propose again.
	RedoDirectoryFenced
	// RedoOpenDirectory: a create under a parent whose record lives in
	// another shard found no open directory record and carried no
	// Incarnation. Take the open path: Observed, read the parent, propose
	// with Incarnation and Observed.
	RedoOpenDirectory
	// RedoCreateParent: a create's parent lives in this shard and is
	// missing. Create the parent first (mkdir -p, one write per shard,
	// top-down), then propose again.
	RedoCreateParent
	// RedoCloseDirectory: a plain delete of a persistent node whose
	// children live in another shard. Delete it with the close protocol:
	// OpDirMark, OpDirClose, OpDirDelete.
	RedoCloseDirectory
	// RedoQuotaRoom: a write would take this shard's usage under a quota
	// past its allotment (Result.QuotaShort says which and how much). Move
	// room from shards with free allotment (give, take), then propose
	// again; if none has room, the refusal (quota_exceeded) is the answer.
	RedoQuotaRoom
	redoCount
)

var redoNames = [...]string{"none", "session_fenced", "directory_fenced", "open_directory", "create_parent", "close_directory", "quota_room"}

func (r Redo) String() string {
	if r < redoCount {
		return redoNames[r]
	}
	return fmt.Sprintf("Redo(%d)", uint8(r))
}

// redo returns a refusal asking the server to take step r.
func redo(r Redo, format string, args ...any) Result {
	return Result{Err: api.Errorf(api.CodeUnavailable, format, args...), Redo: r}
}

// wrongShard refuses a command proposed to a shard that does not hold what
// it changes: a bug of the proposer, never of the client.
func (f *FSM) wrongShard(format string, args ...any) (Result, []Event) {
	return refuse(api.Errorf(api.CodeInternal, "%s: %s", f.shard, fmt.Sprintf(format, args...)))
}

// holdsChildrenOf reports whether dir's children live in this shard.
func (f *FSM) holdsChildrenOf(dir string) bool {
	return f.placementMap().ChildShard(dir) == f.shard.index
}

// holdsNode reports whether the node at path lives in this shard.
func (f *FSM) holdsNode(path string) bool {
	return f.placementMap().Shard(path) == f.shard.index
}

// foreignDirectory reports whether dir's children live in this shard while
// its own node lives in another: then its children are counted in a
// directory record. Never true with one shard.
func (f *FSM) foreignDirectory(dir string) bool {
	return f.shard.sharded() && f.holdsChildrenOf(dir) && !f.holdsNode(dir)
}
