package raftnode

import (
	"errors"
	"fmt"
	"time"

	"go.etcd.io/raft/v3"

	"github.com/latch-io/latch/internal/snap"
	"github.com/latch-io/latch/internal/wal"
)

type snapshotResult struct {
	meta     snap.Meta
	err      error
	duration time.Duration
}

// Defaults of Config.SnapshotEvery and Config.SnapshotBytes.
const (
	DefaultSnapshotEvery = 100_000
	DefaultSnapshotBytes = 64 << 20
)

// maybeSnapshot starts a background snapshot when enough entries were applied
// since the last one and none is in flight.
func (n *Node) maybeSnapshot() {
	if n.snapshotting || !n.snapshotWanted() {
		return
	}
	if !n.snapshotRetryAt.IsZero() && n.cfg.Clock.Now().Before(n.snapshotRetryAt) {
		return // the last one found the disk full
	}
	n.snapshotDue = false
	term, err := n.storage.Term(n.appliedIndex)
	if err != nil {
		n.log.Warn("cannot snapshot: term of applied index unknown", "index", n.appliedIndex, "err", err)
		return
	}
	meta := snap.Meta{Group: n.cfg.Group, Index: n.appliedIndex, Term: term, ConfState: n.confState}
	write := n.cfg.Machine.Snapshot()
	n.snapshotting = true
	n.appliedBytes = 0
	go func() {
		start := n.cfg.Clock.Now()
		err := n.cfg.Snapshots.Save(meta, write)
		n.snapDone <- snapshotResult{meta: meta, err: err, duration: n.cfg.Clock.Since(start)}
	}()
}

// snapshotWanted reports whether a snapshot is due: after a conf change, or
// once SnapshotEvery entries or SnapshotBytes of entry data were applied
// since the last one.
func (n *Node) snapshotWanted() bool {
	if n.appliedIndex <= n.snapshotIndex {
		return false
	}
	return n.snapshotDue || n.appliedIndex >= n.snapshotIndex+n.cfg.SnapshotEvery ||
		n.appliedBytes >= n.cfg.SnapshotBytes
}

// finishSnapshot records a durable snapshot in the WAL, compacts the raft log
// behind it and lets the WAL drop the segments it covers.
func (n *Node) finishSnapshot(res snapshotResult) error {
	n.snapshotting = false
	if h := n.cfg.Hooks.SnapshotSave; h != nil {
		h(res.duration, res.err)
	}
	if errors.Is(res.err, snap.ErrNoSpace) {
		n.snapshotNoSpace(res.meta.Index, res.err)
		return nil
	}
	if res.err != nil {
		return fmt.Errorf("raftnode: group %d: save snapshot %d: %w", n.cfg.Group, res.meta.Index, res.err)
	}
	index := res.meta.Index
	if index <= n.snapshotIndex {
		n.snapshotWritten() // its file was written; the leader's covers it
		return nil          // a snapshot from the leader overtook this one
	}
	marker := &wal.SnapshotMarker{Index: index, Term: res.meta.Term}
	if err := n.cfg.WAL.Save(wal.Batch{Group: n.cfg.Group, Snapshot: marker}); errors.Is(err, wal.ErrNoSpace) {
		n.snapshotNoSpace(index, err) // the file stays unreferenced; a later snapshot supersedes it
		return nil
	} else if err != nil {
		return fmt.Errorf("raftnode: group %d: record snapshot %d in WAL: %w", n.cfg.Group, index, err)
	}
	n.snapshotWritten()
	cs := res.meta.ConfState
	if _, err := n.storage.CreateSnapshot(index, &cs, nil); err != nil && err != raft.ErrSnapOutOfDate {
		return fmt.Errorf("raftnode: group %d: create raft snapshot %d: %w", n.cfg.Group, index, err)
	}
	n.snapshotIndex = index
	if index > n.cfg.CompactionLag {
		first, _ := n.storage.FirstIndex()
		if compact := index - n.cfg.CompactionLag; compact > first {
			if err := n.storage.Compact(compact); err != nil && err != raft.ErrCompacted {
				return fmt.Errorf("raftnode: group %d: compact raft log to %d: %w", n.cfg.Group, compact, err)
			}
		}
	}
	if err := n.cfg.WAL.Release(n.cfg.Group, index); err != nil {
		return fmt.Errorf("raftnode: group %d: release WAL to %d: %w", n.cfg.Group, index, err)
	}
	n.log.Info("snapshot saved", "index", index, "took", res.duration)
	return nil
}

// drainSnapshot waits for a snapshot in flight so that no goroutine outlives
// the node.
func (n *Node) drainSnapshot() {
	if n.snapshotting && n.parkedSnapshot == nil {
		<-n.snapDone
	}
	n.snapshotting = false
	n.parkedSnapshot = nil
}
