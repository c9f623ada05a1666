package raftnode

import (
	"errors"
	"fmt"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/latch-io/latch/internal/wal"
)

// run is the Ready loop: the only goroutine that touches the node's
// Loop-owned fields, the raft storage writes, and the state machine.
func (n *Node) run() {
	defer close(n.donec)
	defer n.raft.Stop()
	// Exactly one of the two tick channels is set: the shared Ticks' or a
	// ticker of the node's own.
	var ownTicks <-chan time.Time
	var sharedTicks <-chan struct{}
	if n.cfg.Ticker != nil {
		ticks, unsubscribe := n.cfg.Ticker.subscribe()
		defer unsubscribe()
		sharedTicks = ticks
	} else {
		ticker := n.cfg.Clock.NewTicker(n.cfg.TickInterval)
		defer ticker.Stop()
		ownTicks = ticker.C()
	}
	for {
		select {
		case <-ownTicks:
			n.tick()
		case <-sharedTicks:
			n.tick()
		case rd := <-n.raft.Ready():
			if err := n.handleReady(rd); err != nil {
				if !errors.Is(err, errStopping) {
					n.fail(err)
				}
				n.drainSnapshot()
				return
			}
			if res := n.parkedSnapshot; res != nil {
				n.parkedSnapshot = nil
				if err := n.finishSnapshot(*res); err != nil {
					n.fail(err)
					return
				}
			}
		case res := <-n.snapDone:
			if err := n.finishSnapshot(res); err != nil {
				n.fail(err)
				return
			}
		case <-n.stopc:
			n.drainSnapshot()
			return
		}
	}
}

// tick advances raft's logical clock and, every walCheckElections
// election timeouts, snapshots the group if it holds back the WAL.
func (n *Node) tick() {
	n.raft.Tick()
	n.lastTick.Store(int64(n.cfg.Clock.Since(n.started)))
	n.ticks++
	if n.ticks%uint64(walCheckElections*n.cfg.ElectionTicks) == 0 {
		n.snapshotIfPinning()
	}
	if n.snapshotFull {
		n.maybeSnapshot() // retried on time, even if no Ready comes
	}
}

// walCheckElections is how many election timeouts pass between two checks
// of whether the group pins the WAL's oldest segment.
const walCheckElections = 5

// snapshotIfPinning snapshots a group whose entries in the WAL's oldest
// segment no snapshot covers while later segments exist: a group that
// takes few writes (an idle shard) would otherwise never reach
// SnapshotEvery, and the WAL, which drops segments only from the front,
// would keep every segment written since.
func (n *Node) snapshotIfPinning() {
	if n.snapshotting || n.appliedIndex <= n.snapshotIndex || !n.cfg.WAL.PinsOldest(n.cfg.Group) {
		return
	}
	n.snapshotDue = true
	n.maybeSnapshot()
}

// handleReady processes one Ready in the order the package comment gives.
func (n *Node) handleReady(rd raft.Ready) error {
	n.observe(rd)
	early, late := splitMessages(rd.Messages, n.leader.Load() == n.cfg.ID)
	n.send(early)
	if err := n.persistWhenSpace(rd); err != nil {
		return err
	}
	if !raft.IsEmptySnap(rd.Snapshot) {
		if err := n.installSnapshot(rd.Snapshot); err != nil {
			return err
		}
	}
	if err := n.storage.Append(rd.Entries); err != nil {
		return fmt.Errorf("raftnode: group %d: append to raft log: %w", n.cfg.Group, err)
	}
	n.send(late)
	if err := n.apply(rd.CommittedEntries); err != nil {
		return err
	}
	n.maybeSnapshot()
	n.raft.Advance()
	return nil
}

// observe passes leader changes and read states to the observer.
func (n *Node) observe(rd raft.Ready) {
	if !raft.IsEmptyHardState(rd.HardState) {
		n.term = rd.HardState.Term
	}
	if rd.SoftState != nil && rd.SoftState.Lead != n.leader.Load() {
		n.leader.Store(rd.SoftState.Lead)
		if n.cfg.Observer != nil {
			n.cfg.Observer.LeaderChanged(rd.SoftState.Lead, n.term)
		}
	}
	if len(rd.ReadStates) > 0 && n.cfg.Observer != nil {
		n.cfg.Observer.ReadStates(rd.ReadStates)
	}
}

// splitMessages returns the messages a leader may send before its own fsync
// (appends and heartbeats to followers) and those that must wait for it.
func splitMessages(msgs []raftpb.Message, leading bool) (early, late []raftpb.Message) {
	if !leading {
		return nil, msgs
	}
	for _, m := range msgs {
		switch m.Type {
		case raftpb.MsgApp, raftpb.MsgHeartbeat:
			early = append(early, m)
		default:
			late = append(late, m)
		}
	}
	return early, late
}

func (n *Node) send(msgs []raftpb.Message) {
	if len(msgs) > 0 {
		n.cfg.Transport.Send(n.cfg.Group, msgs)
	}
}

// persist writes the Ready's hard state, entries and snapshot marker to the
// WAL with one fsync. A Ready that only moves the commit index writes
// nothing: raft needs term, vote and entries durable (raft.MustSync), not
// the commit index, which a restarted node learns again from the leader.
// Nor does a Ready whose hard state is empty (unchanged) and that carries no
// entries and no snapshot, such as one of messages alone.
func (n *Node) persist(rd raft.Ready) error {
	batch := wal.Batch{Group: n.cfg.Group, HardState: rd.HardState, Entries: rd.Entries}
	if !raft.IsEmptySnap(rd.Snapshot) {
		md := rd.Snapshot.Metadata
		batch.Snapshot = &wal.SnapshotMarker{Index: md.Index, Term: md.Term, Installed: true}
	}
	// raft.MustSync reads an empty hard state as term 0 and vote 0, a change.
	hardStateChanged := !raft.IsEmptyHardState(rd.HardState) && raft.MustSync(rd.HardState, n.persistedHardState, 0)
	if len(rd.Entries) == 0 && !hardStateChanged && batch.Snapshot == nil {
		return n.setHardState(rd.HardState)
	}
	start := n.cfg.Clock.Now()
	if err := n.cfg.WAL.Save(batch); err != nil {
		return fmt.Errorf("raftnode: group %d: persist ready: %w", n.cfg.Group, err)
	}
	if h := n.cfg.Hooks.Persisted; h != nil {
		h(n.cfg.Clock.Since(start), len(rd.Entries))
	}
	if !raft.IsEmptyHardState(rd.HardState) {
		n.persistedHardState = rd.HardState
	}
	return n.setHardState(rd.HardState)
}

// setHardState records a non-empty hard state in the in-memory raft log.
func (n *Node) setHardState(hs raftpb.HardState) error {
	if raft.IsEmptyHardState(hs) {
		return nil
	}
	if err := n.storage.SetHardState(hs); err != nil {
		return fmt.Errorf("raftnode: group %d: set hard state: %w", n.cfg.Group, err)
	}
	return nil
}

// installSnapshot applies a snapshot received from the leader; its file was
// stored by the transport before raft saw the message.
func (n *Node) installSnapshot(s raftpb.Snapshot) error {
	if err := n.restoreSnapshot(s.Metadata.Index); err != nil {
		return err
	}
	if err := n.cfg.WAL.Release(n.cfg.Group, s.Metadata.Index); err != nil {
		return fmt.Errorf("raftnode: group %d: release WAL after snapshot: %w", n.cfg.Group, err)
	}
	n.log.Info("installed snapshot from leader", "index", s.Metadata.Index, "term", s.Metadata.Term)
	return nil
}

// apply hands committed entries to the state machine in order, runs of normal
// entries in one call, conf changes one by one.
func (n *Node) apply(entries []raftpb.Entry) error {
	if len(entries) == 0 {
		return nil
	}
	start := n.cfg.Clock.Now()
	run := 0
	for i, e := range entries {
		if e.Index <= n.appliedIndex {
			run = i + 1 // already covered by a snapshot
			continue
		}
		if e.Type == raftpb.EntryNormal {
			continue
		}
		if err := n.cfg.Machine.Apply(entries[run:i]); err != nil {
			return err
		}
		if err := n.applyConfChange(e); err != nil {
			return err
		}
		run = i + 1
	}
	if err := n.cfg.Machine.Apply(entries[run:]); err != nil {
		return err
	}
	if last := entries[len(entries)-1].Index; last > n.appliedIndex {
		n.appliedIndex = last
	}
	if h := n.cfg.Hooks.Applied; h != nil {
		h(n.cfg.Clock.Since(start), len(entries))
	}
	return nil
}

func (n *Node) applyConfChange(e raftpb.Entry) error {
	var cc raftpb.ConfChangeV2
	switch e.Type {
	case raftpb.EntryConfChange:
		var v1 raftpb.ConfChange
		if err := v1.Unmarshal(e.Data); err != nil {
			return fmt.Errorf("raftnode: group %d: decode conf change at %d: %w", n.cfg.Group, e.Index, err)
		}
		cc = v1.AsV2()
	case raftpb.EntryConfChangeV2:
		if err := cc.Unmarshal(e.Data); err != nil {
			return fmt.Errorf("raftnode: group %d: decode conf change at %d: %w", n.cfg.Group, e.Index, err)
		}
	}
	cs := n.raft.ApplyConfChange(cc)
	n.confState = *cs
	n.snapshotDue = true
	return n.cfg.Machine.ApplyConfChange(e.Index, cc, *cs)
}
