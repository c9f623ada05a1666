package raftnode

import (
	"fmt"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// recover rebuilds the in-memory raft log and the state machine from the
// snapshot the WAL names and the entries after it. It reports whether the
// group had state (so raft restarts rather than bootstraps).
func (n *Node) recover() (bool, error) {
	rec := n.cfg.Recovered
	if rec == nil {
		return false, nil
	}
	if rec.Snapshot.Index > 0 {
		if err := n.restoreSnapshot(rec.Snapshot.Index); err != nil {
			return false, err
		}
	}
	if err := n.storage.Append(rec.Entries); err != nil {
		return false, fmt.Errorf("raftnode: group %d: rebuild raft log: %w", n.cfg.Group, err)
	}
	hs := rec.HardState
	n.persistedHardState = hs
	last, _ := n.storage.LastIndex()
	// The commit index is a hint that may run ahead of a log whose torn tail was
	// cut, or lag a snapshot installed just before a crash; raft refuses both.
	hs.Commit = min(max(hs.Commit, n.snapshotIndex), last)
	if err := n.storage.SetHardState(hs); err != nil {
		return false, fmt.Errorf("raftnode: group %d: set hard state: %w", n.cfg.Group, err)
	}
	return !raft.IsEmptyHardState(hs) || last > 0, nil
}

// restoreSnapshot loads snapshot index of this group into the state machine
// and the raft log.
func (n *Node) restoreSnapshot(index uint64) error {
	meta, body, err := n.cfg.Snapshots.Open(n.cfg.Group, index)
	if err != nil {
		return fmt.Errorf("raftnode: group %d: open snapshot %d: %w", n.cfg.Group, index, err)
	}
	defer body.Close()
	if err := n.cfg.Machine.Restore(meta, body); err != nil {
		return fmt.Errorf("raftnode: group %d: restore snapshot %d: %w", n.cfg.Group, index, err)
	}
	s := raftpb.Snapshot{Metadata: raftpb.SnapshotMetadata{
		Index: meta.Index, Term: meta.Term, ConfState: meta.ConfState,
	}}
	if err := n.storage.ApplySnapshot(s); err != nil && err != raft.ErrSnapOutOfDate {
		return fmt.Errorf("raftnode: group %d: install snapshot %d in raft log: %w", n.cfg.Group, index, err)
	}
	n.confState = meta.ConfState
	n.appliedIndex = meta.Index
	n.snapshotIndex = meta.Index
	n.appliedBytes = 0
	return nil
}
