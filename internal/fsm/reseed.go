package fsm

import (
	"fmt"
	"slices"

	"github.com/latch-io/latch/internal/command"
)

// Reseed turns a state read from a backup into the first state of a new
// cluster, at index (the new log starts above it) with members as its member
// table. It ends every session and deletes their ephemeral nodes (sessions
// do not outlive their cluster), forgets the removed members (ids of another
// cluster), and raises every node's sequence counter to at least index, so
// a sequential name made above index sorts after every name the old cluster
// could have made below it (a counter advances by at most one per entry).
// In a shard of a sharded cluster the counters of the directory records are
// raised alike, and only shard 0 gets the member table (the others hold
// none). Fencing tokens are creation indexes, above index too. index must exceed
// Applied(); the state must not be shared with a running replica.
func (f *FSM) Reseed(index uint64, members []command.Member) error {
	if index <= f.applied {
		return fmt.Errorf("fsm: reseed at index %d, not above the applied index %d", index, f.applied)
	}
	var sessions []uint64
	f.sessions.Scan(func(s session) bool {
		sessions = append(sessions, s.id)
		return true
	})
	for _, id := range sessions {
		f.endSession(index, id, nil)
	}
	var raised []entry
	f.nodes.Scan(func(e entry) bool {
		if e.sequence < index {
			raised = append(raised, e)
		}
		return true
	})
	for _, e := range raised {
		f.edit(&e).sequence = index
		f.storeNode(e)
	}
	f.raiseDirectoryCounters(index)
	f.resetLedger()
	if !f.shard.meta() {
		// Another shard holds no member table (shard 0 does).
		f.removed = nil
		f.applied = index
		return nil
	}
	f.members = slices.Clone(members)
	slices.SortFunc(f.members, func(a, b command.Member) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	f.removed = nil
	f.applied = index
	return nil
}

// raiseDirectoryCounters raises the sequence counter of every directory
// record (a directory whose node lives in another shard) to at least index.
func (f *FSM) raiseDirectoryCounters(index uint64) {
	var raised []dirRecord
	f.dirs.Scan(func(r dirRecord) bool {
		if r.sequence < index {
			raised = append(raised, r)
		}
		return true
	})
	for _, r := range raised {
		r.sequence = index
		f.dirs.Set(r)
	}
}
