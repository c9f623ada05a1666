package raftnode

import (
	"errors"
	"time"

	"github.com/latch-io/latch/internal/snap"
	"github.com/latch-io/latch/internal/wal"
)

// While the filesystem is full, persisting a Ready is retried every
// noSpaceRetry, and a snapshot is tried again after snapshotRetry.
const (
	noSpaceRetry  = 250 * time.Millisecond
	snapshotRetry = 2 * time.Second
)

// errStopping ends the Ready loop when Stop is called while it waits for
// space: not a failure.
var errStopping = errors.New("raftnode: stopping")

// saveWhenSpace saves batches, retrying while the WAL refuses them for want
// of space (wal.ErrNoSpace: nothing was written, the WAL did not fail). The
// node stops acknowledging meanwhile: nothing that waits for these batches
// is sent or applied, and the Ready loop, seeing walFull, neither ticks raft
// nor takes Readys. It returns once the batches are durable, on any other
// error, or with errStopping on Stop. The Ready loop passes its snapDone
// channel to park snapshot results meanwhile; the append goroutine, nil.
func (n *Node) saveWhenSpace(batches []wal.Batch, snapDone <-chan snapshotResult) error {
	for {
		err := n.save(batches)
		if !errors.Is(err, wal.ErrNoSpace) {
			if err == nil && n.walFull.Load() {
				n.walFull.Store(false)
				n.log.Warn("WAL writes again: space was freed")
				n.storageFull("wal", nil)
			}
			return err
		}
		if !n.walFull.Load() {
			n.walFull.Store(true)
			n.log.Error("WAL cannot get space: this member stops acknowledging until space is freed", "err", err)
			n.storageFull("wal", err)
		}
		timer := n.cfg.Clock.NewTimer(noSpaceRetry)
		select {
		case <-n.stopc:
			timer.Stop()
			return errStopping
		case <-n.appendStop:
			timer.Stop()
			return errStopping
		case res := <-snapDone:
			timer.Stop()
			n.parkSnapshot(res)
		case <-timer.C():
		}
	}
}

// parkSnapshot takes a snapshot's result while a Ready waits for space: a
// snapshot refused for want of space is recorded at once (flags only);
// any other result is kept for the loop to finish once the Ready is done,
// since finishing one changes the raft log.
func (n *Node) parkSnapshot(res snapshotResult) {
	if errors.Is(res.err, snap.ErrNoSpace) {
		_ = n.finishSnapshot(res) // records the refusal; returns nil for it
		return
	}
	n.parkedSnapshot = &res
}

// snapshotNoSpace records that a snapshot could not be written or recorded
// for want of space: the WAL keeps every entry it would have released, and
// the next snapshot is tried after snapshotRetry.
func (n *Node) snapshotNoSpace(index uint64, err error) {
	n.snapshotRetryAt = n.cfg.Clock.Now().Add(snapshotRetry)
	// The retry is due whatever started the attempt: a snapshot asked for
	// out of turn (the group pins the WAL's oldest segment) is not asked
	// for again, and without this the no-space state would never clear.
	n.snapshotDue = true
	if !n.snapshotFull {
		n.snapshotFull = true
		n.log.Error("snapshot cannot be written: no space; the WAL keeps its entries, retrying", "index", index, "err", err)
		n.storageFull("snapshot", err)
	}
}

// snapshotWritten clears a snapshot's no-space state.
func (n *Node) snapshotWritten() {
	if n.snapshotFull {
		n.snapshotFull = false
		n.log.Warn("snapshots are written again: space was freed")
		n.storageFull("snapshot", nil)
	}
}

func (n *Node) storageFull(part string, err error) {
	if h := n.cfg.Hooks.StorageFull; h != nil {
		h(part, err)
	}
}
