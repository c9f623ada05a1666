package wal

import (
	"fmt"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// groupLog is one consensus group's log as the records so far describe it.
// The reader keeps entries; the writer only tracks indexes (trackOnly), with
// the same rules, so that it refuses a batch the reader would refuse later.
//
// Invariant: snapshot.Index < first. Entries (snapshot.Index, first) are a
// hole: they exist in released segments that were deleted and must be
// covered by a later snapshot marker before the log ends, or the log is
// missing a segment.
type groupLog struct {
	trackOnly bool
	snapshot  SnapshotMarker
	hardState raftpb.HardState
	first     uint64         // index of entries[0] (or of the next entry when empty)
	entries   []raftpb.Entry // contiguous from first; unused when trackOnly
	count     uint64         // len(entries), also kept when trackOnly
}

func newGroupLog(trackOnly bool) *groupLog { return &groupLog{trackOnly: trackOnly, first: 1} }

// fromCheckpoint starts a group at a segment boundary.
func fromCheckpoint(checkpoint groupCheckpoint, trackOnly bool) *groupLog {
	return &groupLog{
		trackOnly: trackOnly,
		snapshot:  checkpoint.snapshot,
		hardState: checkpoint.hardState,
		first:     max(checkpoint.lastIndex, checkpoint.snapshot.Index) + 1,
	}
}

func (g *groupLog) lastIndex() uint64 { return g.first - 1 + g.count }

func (g *groupLog) checkpoint(group uint64) groupCheckpoint {
	return groupCheckpoint{group: group, snapshot: g.snapshot, lastIndex: g.lastIndex(), hardState: g.hardState}
}

// appendEntry applies raft's rule: an entry at index i replaces every entry
// at i or above. Entries at or below the snapshot are ignored; an index past
// lastIndex()+1 is a gap and refused.
func (g *groupLog) appendEntry(entry raftpb.Entry) error {
	if entry.Index <= g.snapshot.Index {
		return nil
	}
	if last := g.lastIndex(); entry.Index > last+1 {
		return fmt.Errorf("entry %d does not follow last index %d", entry.Index, last)
	}
	if entry.Index < g.first {
		g.first, g.count = entry.Index, 0
		g.entries = g.entries[:0]
	} else {
		g.count = entry.Index - g.first
		if !g.trackOnly {
			g.entries = g.entries[:g.count]
		}
	}
	g.count++
	if !g.trackOnly {
		g.entries = append(g.entries, entry)
	}
	return nil
}

// applySnapshot drops entries at or below the marker. Older markers are ignored.
func (g *groupLog) applySnapshot(marker SnapshotMarker) {
	if marker.Index <= g.snapshot.Index {
		return
	}
	// Installed matters only as the marker is applied; the log keeps where
	// its snapshot is, as segment checkpoints record it.
	g.snapshot = SnapshotMarker{Index: marker.Index, Term: marker.Term}
	switch {
	case marker.Installed || marker.Index >= g.lastIndex():
		g.first, g.count = marker.Index+1, 0
		g.entries = nil
	case marker.Index >= g.first:
		drop := marker.Index + 1 - g.first
		g.first, g.count = marker.Index+1, g.count-drop
		if !g.trackOnly {
			g.entries = g.entries[drop:]
		}
	}
}

func (g *groupLog) applyHardState(state raftpb.HardState) {
	if !raft.IsEmptyHardState(state) {
		g.hardState = state
	}
}

// applyBatch applies a batch in the order it is written: marker, entries,
// hard state.
func (g *groupLog) applyBatch(batch *Batch) error {
	if batch.Snapshot != nil {
		g.applySnapshot(*batch.Snapshot)
	}
	for i := range batch.Entries {
		if err := g.appendEntry(batch.Entries[i]); err != nil {
			return err
		}
	}
	g.applyHardState(batch.HardState)
	return nil
}

// hole reports entries the log should hold but does not.
func (g *groupLog) hole() (from, to uint64, ok bool) {
	if g.first > g.snapshot.Index+1 {
		return g.snapshot.Index + 1, g.first - 1, true
	}
	return 0, 0, false
}

func (g *groupLog) clone(trackOnly bool) *groupLog {
	return &groupLog{trackOnly: trackOnly, snapshot: g.snapshot, hardState: g.hardState, first: g.first, count: g.count}
}
