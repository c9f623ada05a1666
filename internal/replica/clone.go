package replica

import "github.com/latch-io/latch/internal/fsm"

// CloneState returns an O(1) copy-on-write copy of the state machine, with
// the raft term at the moment it was taken, for a backup: the copy may be
// read and serialised on another goroutine while apply goes on. Cloning
// marks the original's tree nodes shared, so it takes the write lock like
// Apply, for as long as the clone takes (not the serialisation).
func (r *Replica) CloneState() (*fsm.FSM, uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fsm.Clone(), r.term.Load()
}
