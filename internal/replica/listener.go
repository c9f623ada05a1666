package replica

import (
	"github.com/latch-io/latch/internal/command"
	"github.com/latch-io/latch/internal/fsm"
)

// Listener is told what the Replica applied. Listeners are registered at
// construction (Config.Listeners) and called on the raft Ready loop, in
// registration order, at the points the package comment lists ("Apply
// order"); the methods whose names end in Locked run with the state's write
// lock held and must not call View or anything that takes the lock.
type Listener interface {
	// AppliedLocked sees one applied command and its result.
	AppliedLocked(cmd *command.Command, res fsm.Result)
	// PublishLocked sees the events of a batch of applied entries. The
	// slice is the replica's, reused by the next batch: a listener keeps
	// copies of the events, never the slice.
	PublishLocked(events []fsm.Event)
	// Applied sees the events of a batch once the lock is released (the
	// same slice, under the same rule).
	Applied(events []fsm.Event)
	// RestoredLocked sees the state a snapshot at index replaced the old one with.
	RestoredLocked(f *fsm.FSM, index uint64)
	// Restored runs once the restored state and its index are published.
	Restored(index uint64)
	// LeaderChanging runs before the new leader is published.
	LeaderChanging(leader, term uint64)
	// LeaderChanged runs once it is published.
	LeaderChanged(leader, term uint64)
}

// NopListener implements every Listener method as a no-op, for embedding by
// listeners that need only some of them.
type NopListener struct{}

func (NopListener) AppliedLocked(*command.Command, fsm.Result) {}
func (NopListener) PublishLocked([]fsm.Event)                  {}
func (NopListener) Applied([]fsm.Event)                        {}
func (NopListener) RestoredLocked(*fsm.FSM, uint64)            {}
func (NopListener) Restored(uint64)                            {}
func (NopListener) LeaderChanging(uint64, uint64)              {}
func (NopListener) LeaderChanged(uint64, uint64)               {}

// Metrics receives the Replica's figures.
type Metrics interface {
	Applied(index uint64)
	LeaderChanged(leader, term uint64)
	ProposalStarted()
	ProposalEnded()
	ProposalFailed()
}

// Membership is told of the member changes the Replica applies.
type Membership interface {
	// PeerAdded: another member has (or may now have) this peer address.
	PeerAdded(id uint64, peerURL string)
	// PeerRemoved: another member was removed from the group.
	PeerRemoved(id uint64)
	// SelfRemoved: this member was removed; called on its own goroutine.
	SelfRemoved()
}

type nopMetrics struct{}

func (nopMetrics) Applied(uint64)               {}
func (nopMetrics) LeaderChanged(uint64, uint64) {}
func (nopMetrics) ProposalStarted()             {}
func (nopMetrics) ProposalEnded()               {}
func (nopMetrics) ProposalFailed()              {}

type nopMembership struct{}

func (nopMembership) PeerAdded(uint64, string) {}
func (nopMembership) PeerRemoved(uint64)       {}
func (nopMembership) SelfRemoved()             {}
