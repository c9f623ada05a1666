package raftnode

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/latch-io/latch/internal/timeline"
	"github.com/latch-io/latch/internal/wal"
)

// run is the Ready loop: the only goroutine that touches the node's
// Loop-owned fields and the state machine, and the only one that takes
// Readys from raft. Entries are made durable by the append goroutine
// (append.go), which it starts and outlives.
func (n *Node) run() {
	defer close(n.donec)
	defer n.markStopped()
	go n.appender.run()
	defer n.stopAppender()
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
		// Every turn takes a Ready if raft has one and the pipeline allows
		// it; whatever wakes the loop below (a notice, a tick, a save's
		// progress) is then followed by a look at raft.
		if err := n.handleNextReady(); err != nil {
			n.stopOn(err)
			return
		}
		select {
		case <-n.notifyc:
		case <-ownTicks:
			n.tick()
		case <-sharedTicks:
			n.tick()
		case <-n.progress:
			if n.tickPending && !n.storageStalled() {
				n.tick()
			}
		case <-n.appender.done:
			n.stopOn(n.appender.err)
			return
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

// handleNextReady takes raft's Ready, if it has one and neither a stalled
// disk nor appends waiting behind the save under way hold it back (see
// "Pipeline" in the package comment), and handles it outside the lock.
// Having handled one, it signals notifyc again: the loop comes back for the
// next Ready after a turn through its select, so that a stream of Readys
// does not starve ticks or Stop.
func (n *Node) handleNextReady() error {
	if n.storageStalled() || n.appender.waitsForSave() {
		return nil
	}
	rd, ok := n.takeReady()
	if !ok {
		return nil
	}
	if err := n.handleReady(rd); err != nil {
		return err
	}
	if res := n.parkedSnapshot; res != nil {
		n.parkedSnapshot = nil
		if err := n.finishSnapshot(*res); err != nil {
			return err
		}
	}
	n.notify()
	return nil
}

// takeReady returns raft's next Ready under the lock; false if it has none.
// raft.RawNode.Ready also accepts it: with asynchronous storage writes
// there is no Advance, the responses of its local messages are stepped back.
func (n *Node) takeReady() (raft.Ready, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.stopped || !n.raft.HasReady() {
		return raft.Ready{}, false
	}
	n.readys.Add(1)
	return n.raft.Ready(), true
}

// hasReady reports whether raft has a Ready for the loop to take.
func (n *Node) hasReady() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return !n.stopped && n.raft.HasReady()
}

// markStopped makes every later call into raft return ErrStopped; the
// Ready loop calls it as it returns, once the append goroutine is stopped.
func (n *Node) markStopped() {
	n.mu.Lock()
	n.stopped = true
	n.mu.Unlock()
}

// stopOn ends the loop on err: a failure unless Stop was called.
func (n *Node) stopOn(err error) {
	if !errors.Is(err, errStopping) {
		n.fail(err)
	}
	n.drainSnapshot()
}

// stopAppender stops the append goroutine and waits for it: a save under
// way finishes first, and its responses are still stepped into raft.
func (n *Node) stopAppender() {
	close(n.appendStop)
	<-n.appender.done
}

// storageStalled reports whether the WAL cannot get space or a save has
// been under way for longer than a tick interval. The loop then neither
// ticks raft nor takes Readys, as a loop that fsyncs itself would not.
func (n *Node) storageStalled() bool {
	return n.walFull.Load() || n.appender.busyFor() > n.cfg.TickInterval
}

// storageProgressed is called by whoever saved to the WAL, after each save:
// it wakes the loop if it is waiting for storage.
func (n *Node) storageProgressed() {
	select {
	case n.progress <- struct{}{}:
	default:
	}
}

// tick advances raft's logical clock, unless the group is quiesced or
// quiesces now (quiesce.go), and, every walCheckElections election
// timeouts, snapshots the group if it holds back the WAL (a quiesced group
// too: an idle group is the one that pins it).
// Each tick first sends the acknowledgements held back since the last
// (acks.go). While storage is stalled the tick is kept for when it
// resumes, as a ticker's one buffered tick waits for a loop stuck in an
// fsync.
func (n *Node) tick() {
	n.send(n.acks.release())
	if n.storageStalled() {
		n.tickPending = true
		return
	}
	n.tickPending = false
	if n.quiet.state.Load() == nil && !n.maybeQuiesce() {
		n.tickRaft()
	}
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
// raft's Advance is not called: with asynchronous storage writes, raft
// learns of durable entries and applied ones from the responses that
// deliver steps back into it.
func (n *Node) handleReady(rd raft.Ready) error {
	if len(rd.Entries) > 0 {
		timeline.Mark(timeline.ReadyTaken)
	}
	n.observe(rd)
	peers, local := splitLocal(rd.Messages)
	// The append is queued before the messages are sent: of the two
	// goroutines this readies, Go's scheduler runs the last one first on
	// this processor, and the peer writer, whose message starts a
	// follower's fsync, must not wait behind the append goroutine's own:
	// a commit needs a follower's.
	if len(local) > 0 && plainAppend(&local[0]) {
		n.appender.enqueue(appendWork{message: local[0]})
		local = local[1:]
	}
	n.send(coalesceMessages(peers))
	if len(rd.Entries) > 0 {
		timeline.Mark(timeline.Sent)
	}
	for i := range local {
		m := &local[i]
		switch m.To {
		case raft.LocalAppendThread:
			if err := n.queueAppend(*m); err != nil {
				return err
			}
		case raft.LocalApplyThread:
			timeline.Mark(timeline.ApplyStart)
			if err := n.apply(m.Entries); err != nil {
				return err
			}
			timeline.Mark(timeline.ApplyEnd)
			if err := n.deliver(m.Responses); err != nil {
				return err
			}
		default:
			n.send(local[i : i+1])
		}
	}
	n.maybeSnapshot()
	return nil
}

// splitLocal cuts a Ready's messages before the first one to a local
// storage thread: raft appends MsgStorageAppend and MsgStorageApply after
// every message to peers, so peers can be sent as they are, without a copy.
// (handleReady still sends any peer message found among local.)
func splitLocal(msgs []raftpb.Message) (peers, local []raftpb.Message) {
	for i := range msgs {
		if to := msgs[i].To; to == raft.LocalAppendThread || to == raft.LocalApplyThread {
			return msgs[:i], msgs[i:]
		}
	}
	return msgs, nil
}

// plainAppend reports whether m is a MsgStorageAppend the append goroutine
// takes (one without a snapshot).
func plainAppend(m *raftpb.Message) bool {
	return m.To == raft.LocalAppendThread && (m.Snapshot == nil || raft.IsEmptySnap(*m.Snapshot))
}

// queueAppend hands m to the append goroutine, except a message carrying a
// snapshot: the loop waits until every earlier append is done and stores
// that one itself, since installing it replaces the state machine.
func (n *Node) queueAppend(m raftpb.Message) error {
	if plainAppend(&m) {
		n.appender.enqueue(appendWork{message: m})
		return nil
	}
	if err := n.appender.flush(); err != nil {
		return err
	}
	return n.storeAppends([]raftpb.Message{m}, n.snapDone)
}

// observe passes leader changes and read states to the observer.
func (n *Node) observe(rd raft.Ready) {
	if !raft.IsEmptyHardState(rd.HardState) {
		n.term = rd.HardState.Term
	}
	if rd.SoftState != nil && rd.SoftState.Lead != n.leader.Load() {
		n.leader.Store(rd.SoftState.Lead)
		if rd.SoftState.Lead != raft.None {
			n.leaderSeen()
		}
		if n.cfg.Observer != nil {
			n.cfg.Observer.LeaderChanged(rd.SoftState.Lead, n.term)
		}
	}
	if len(rd.ReadStates) > 0 && n.cfg.Observer != nil {
		n.cfg.Observer.ReadStates(rd.ReadStates)
	}
}

func (n *Node) send(msgs []raftpb.Message) {
	if len(msgs) > 0 {
		n.cfg.Transport.Send(n.cfg.Group, msgs)
	}
}

// walBatches returns the WAL batches of msgs (MsgStorageAppend, in order):
// hard state, entries and snapshot marker of each. A message that only
// moves the commit index, or carries nothing, writes nothing: raft needs
// term, vote and entries durable (raft.MustSync), not the commit index,
// which a restarted node learns again from the leader.
func (n *Node) walBatches(msgs []raftpb.Message) []wal.Batch {
	var batches []wal.Batch
	for i := range msgs {
		m := &msgs[i]
		batch := wal.Batch{Group: n.cfg.Group, HardState: hardStateOf(m), Entries: m.Entries}
		if m.Snapshot != nil && !raft.IsEmptySnap(*m.Snapshot) {
			md := m.Snapshot.Metadata
			batch.Snapshot = &wal.SnapshotMarker{Index: md.Index, Term: md.Term, Installed: true}
		}
		// raft.MustSync reads an empty hard state as term 0 and vote 0, a change.
		hardStateChanged := !raft.IsEmptyHardState(batch.HardState) && raft.MustSync(batch.HardState, n.persistedHardState, 0)
		if len(batch.Entries) == 0 && !hardStateChanged && batch.Snapshot == nil {
			continue
		}
		if !raft.IsEmptyHardState(batch.HardState) {
			n.persistedHardState = batch.HardState
		}
		batches = append(batches, batch)
	}
	return batches
}

// save writes batches to the WAL with one fsync.
func (n *Node) save(batches []wal.Batch) error {
	start := n.cfg.Clock.Now()
	if err := n.cfg.WAL.Save(batches...); err != nil {
		return fmt.Errorf("raftnode: group %d: persist: %w", n.cfg.Group, err)
	}
	if h := n.cfg.Hooks.Persisted; h != nil {
		entries := 0
		for i := range batches {
			entries += len(batches[i].Entries)
		}
		h(n.cfg.Clock.Since(start), entries)
	}
	return nil
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
	// The leader's snapshot was written here and recorded in the WAL, and
	// it covers everything applied: nothing is left for a retry of a
	// snapshot refused for want of space, which would never come.
	n.snapshotWritten()
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
		n.appliedBytes += uint64(len(e.Data))
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
	cs := n.applyToRaft(cc)
	n.confState = *cs
	n.snapshotDue = true
	return n.cfg.Machine.ApplyConfChange(e.Index, cc, *cs)
}

// applyToRaft applies a committed conf change to raft's configuration. If
// it removes this node, proposals are held until a leader is seen again,
// as raft.Node held them (a member catching up on a log that does not yet
// name it is not held: it was no member before either).
func (n *Node) applyToRaft(cc raftpb.ConfChangeV2) *raftpb.ConfState {
	memberBefore := inConf(n.confState, n.cfg.ID)
	n.mu.Lock()
	defer n.mu.Unlock()
	cs := n.raft.ApplyConfChange(cc)
	if memberBefore && !inConf(*cs, n.cfg.ID) {
		n.proposalsHeld = true
	}
	return cs
}

// inConf reports whether id is a voter or learner of cs, in either half of
// a joint configuration.
func inConf(cs raftpb.ConfState, id uint64) bool {
	for _, ids := range [][]uint64{cs.Voters, cs.VotersOutgoing, cs.Learners, cs.LearnersNext} {
		if slices.Contains(ids, id) {
			return true
		}
	}
	return false
}
