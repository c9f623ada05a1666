// Package queues is latch's lock and election queues over one group's
// replicated tree: a lock or an election is a queue of ephemeral sequential
// nodes under one directory (locks.go), its holder or leader the first node,
// and each waiter waits on the deletion of the node just ahead of it only
// (deletionWaiters), so a release wakes exactly one waiter. The fencing
// token is the raft index at which the node was created. Paths:
// /locks/{name}/lock-NNNNNNNNNN, /elections/{role}/candidate-NNNNNNNNNN.
//
// Only queue nodes count: ephemeral nodes (so owned by a live session) named
// prefix plus a sequence number. Anything else in the directory (which only
// data written before plain writes there were refused can hold, see
// server.refusePlainQueueWrite) is ignored, so it can neither hold nor block.
//
// ListLocks and ListElections (list.go) read every queue of a kind from one
// view of the state, a page of names at a time. In a sharded cluster the
// queues of one page live in several groups: the server pages the names
// with PageNames in the group of their directory's children and reads each
// group's queues with LockEntries or ElectionEntries.
//
// Queues is a replica.Listener: the apply path hands it the deleted nodes
// once the state that lacks them is visible, and a restore wakes every
// waiter to look again.
package queues

import (
	"context"

	"github.com/latch-io/latch/internal/command"
	"github.com/latch-io/latch/internal/fsm"
	"github.com/latch-io/latch/internal/replica"
)

// Replica is what Queues uses of its group's runtime (*replica.Replica).
type Replica interface {
	Propose(ctx context.Context, cmd *command.Command) (fsm.Result, uint64, error)
	Barrier(ctx context.Context, consistency string, minIndex uint64) error
	View(fn func(f *fsm.FSM)) uint64
	Unavailable(format string, args ...any) error
}

// Config is what Queues needs from the server.
type Config struct {
	Replica      Replica
	MaxValueSize int // bytes of an election candidate's value
}

// Queues serves the lock and election queues of one group.
type Queues struct {
	replica.NopListener
	cfg       Config
	deletions *deletionWaiters
}

// New returns the Queues of one group; register it as a listener of the
// group's replica.
func New(cfg Config) *Queues {
	return &Queues{cfg: cfg, deletions: newDeletionWaiters()}
}

// Applied wakes the waiters behind the nodes the applied entries deleted.
func (q *Queues) Applied(events []fsm.Event) { q.deletions.deleted(events) }

// Restored wakes every waiter: deletions a snapshot covered raised no
// events, so each waiter must look again.
func (q *Queues) Restored(uint64) { q.deletions.wakeAll() }

// Wakeups counts the waiters woken by the deletion of the node ahead of
// them (one per lock release when there is no herd).
func (q *Queues) Wakeups() uint64 { return q.deletions.wakeups.Load() }
