package raftnode

import (
	"context"
	"encoding/binary"
	"time"

	"go.etcd.io/raft/v3/raftpb"
)

// proposalBatch is the normal entries proposed while the lock was busy.
// Each proposer adds its entry to the open batch, then takes the lock; the
// first of them to get it closes the batch and steps all its entries in
// one MsgProp, and the others find it stepped and share its outcome. Under
// load a leader then appends and broadcasts once per batch instead of once
// per proposal, and a follower forwards one message per batch, not one per
// proposal. Every entry of a batch has the same fate (raft takes or drops
// a MsgProp whole), so each proposer's answer is the batch's, and one that
// must propose again (no leader yet) does so alone, in a later batch. A
// batch holds at most maxBatchSize bytes of entry data (or one entry): a
// proposal that would pass it opens a new batch, and the full one's
// proposers step it themselves.
type proposalBatch struct {
	entries []raftpb.Entry // guarded by Node.batchMu while the batch is open
	size    int            // the entries' data, in bytes; guarded like entries
	// done is made by the first deferred proposer to join (guarded like
	// entries) and closed by the stepper once the batch is stepped: a
	// deferred proposer waits on it (ProposeDeferred). The stepper takes
	// it with the entries, when the batch can no longer be joined.
	done chan struct{}
	// Guarded by Node.mu: set by the proposer that steps the batch.
	stepped bool
	held    bool  // proposals were held (see Node.proposalsHeld)
	err     error // what raft's Step returned
}

// maxBatchSize bounds the entry data of one batch: raft's bound on a
// message (raft.Config.MaxSizePerMsg), so that a follower's forwarded
// batch stays a frame the transport sends, and a leader's stays far below
// its bound on uncommitted entries.
const maxBatchSize = 1 << 20

// stepBatched adds data to the open batch and returns the batch's outcome
// once it is stepped, by this proposer or by another.
func (n *Node) stepBatched(data []byte) (held bool, err error) {
	held, _, err = n.outcome(n.joinBatch(false, raftpb.Entry{Data: data}))
	return held, err
}

// stepDeferred proposes data deferred by delay (ProposeDeferred). On the
// leader it adds data to the open batch and waits up to delay for another
// proposer to step it before stepping it itself, at once if ctx ends. On a
// follower it forwards data at once in a MsgProp that carries the delay
// (deferralContext): the leader, where every proposal meets, holds it in
// its open batch instead (Step). It returns the outcome here.
func (n *Node) stepDeferred(ctx context.Context, data []byte, delay time.Duration) (held bool, err error) {
	if n.leader.Load() != n.cfg.ID {
		return n.stepProposal(raftpb.Message{Type: raftpb.MsgProp, From: n.cfg.ID,
			Entries: []raftpb.Entry{{Data: data}}, Context: deferralContext(delay)})
	}
	b := n.joinBatch(true, raftpb.Entry{Data: data})
	held, err = n.stepAfter(ctx, b, delay)
	return held, err
}

// stepAfter waits up to delay (until ctx ends) for another proposer to step
// the open batch b a deferred proposal joined, steps it if none did, and
// returns its outcome; it counts how the deferred proposal left.
func (n *Node) stepAfter(ctx context.Context, b *proposalBatch, delay time.Duration) (held bool, err error) {
	timer := n.cfg.Clock.NewTimer(delay)
	defer timer.Stop()
	select {
	case <-b.done: // stepped by another proposer, with its own entry
	case <-timer.C():
	case <-ctx.Done():
	case <-n.donec:
	}
	held, alone, err := n.outcome(b)
	if alone {
		n.deferredAlone.Add(1)
	} else {
		n.deferredJoined.Add(1)
	}
	return held, err
}

// holdForwarded holds the entries of a deferred proposal a follower
// forwarded (a MsgProp with a deferralContext) in the open batch, for the
// next proposal made or forwarded here to take along, stepping them after
// delay at the latest. Should raft drop them then (this node no longer
// leads and knows no leader), the forwarder's waiter ends at its deadline,
// as for any forwarded proposal lost on its way.
func (n *Node) holdForwarded(entries []raftpb.Entry, delay time.Duration) {
	b := n.joinBatch(true, entries...)
	go n.stepAfter(context.Background(), b, delay)
}

// deferralTag starts the Context of a MsgProp that carries a deferred
// proposal from a follower to the leader; the delay follows, in
// microseconds, as a uvarint.
const deferralTag = 0xde

// deferralContext is the Context of a forwarded deferred proposal.
func deferralContext(delay time.Duration) []byte {
	return binary.AppendUvarint([]byte{deferralTag}, uint64(delay.Microseconds()))
}

// forwardedDeferral returns the delay a forwarded MsgProp's Context carries,
// at most maxForwardedDeferral, and false if it carries none (a plain
// proposal, or a Context not made by deferralContext: it is stepped as it
// is).
func forwardedDeferral(m *raftpb.Message) (time.Duration, bool) {
	if len(m.Context) < 2 || m.Context[0] != deferralTag {
		return 0, false
	}
	us, k := binary.Uvarint(m.Context[1:])
	if k != len(m.Context)-1 {
		return 0, false
	}
	return time.Duration(min(us, uint64(maxForwardedDeferral.Microseconds()))) * time.Microsecond, true
}

// maxForwardedDeferral bounds the delay a forwarded deferred proposal may
// ask of the leader.
const maxForwardedDeferral = time.Second

// outcome steps b unless a proposer already did, and returns what raft
// made of it and whether this call stepped it.
func (n *Node) outcome(b *proposalBatch) (held, stepper bool, err error) {
	held, err = n.stepLocked(func() (bool, error) {
		stepper = n.stepBatchLocked(b)
		return b.held, b.err
	})
	if stepper && err == nil && !held {
		n.stepped.Add(1) // one message, however many entries
		n.notify()
	}
	return held, stepper, err
}

// stepBatchLocked steps b in one MsgProp unless a proposer already did, and
// reports whether this call stepped it; n.mu must be held. Should raft panic
// here (a broken invariant), the batch's other proposers find no error: raft
// may have appended the entries before it panicked, so they wait for the
// apply, and their deadline reports the outcome unknown.
func (n *Node) stepBatchLocked(b *proposalBatch) bool {
	if b.stepped {
		return false
	}
	b.stepped = true
	entries, done := n.closeBatch(b)
	b.held, b.err = n.stepProposalLocked(raftpb.Message{Type: raftpb.MsgProp, From: n.cfg.ID, Entries: entries})
	if done != nil {
		close(done)
	}
	return true
}

// stepDeferredAlongLocked steps the open batch if a deferred proposal waits
// in it, so that it leaves in the same Ready as the proposal just stepped
// (one a follower forwarded); n.mu must be held.
func (n *Node) stepDeferredAlongLocked() {
	n.batchMu.Lock()
	b := n.openBatch
	deferred := b != nil && b.done != nil
	n.batchMu.Unlock()
	if deferred {
		n.stepBatchLocked(b)
	}
}

// joinBatch adds entries to the open batch, or to a new one if there is
// none or they would take it past maxBatchSize, and returns that batch. A
// deferred proposer makes the batch's done channel, if it has none.
func (n *Node) joinBatch(deferred bool, entries ...raftpb.Entry) *proposalBatch {
	size := 0
	for _, e := range entries {
		size += len(e.Data)
	}
	n.batchMu.Lock()
	defer n.batchMu.Unlock()
	b := n.openBatch
	if b == nil || b.size+size > maxBatchSize {
		b = &proposalBatch{}
		n.openBatch = b
	}
	b.entries = append(b.entries, entries...)
	b.size += size
	if deferred && b.done == nil {
		b.done = make(chan struct{})
	}
	return b
}

// closeBatch takes b out of reach of new proposals, if it is still open,
// and returns its entries and done channel.
func (n *Node) closeBatch(b *proposalBatch) ([]raftpb.Entry, chan struct{}) {
	n.batchMu.Lock()
	defer n.batchMu.Unlock()
	if n.openBatch == b {
		n.openBatch = nil
	}
	return b.entries, b.done
}
