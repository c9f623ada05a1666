package raftnode

import (
	"encoding/binary"
	"runtime"
	"slices"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/latch-io/latch/internal/clock"
)

// proposalBatch is the normal entries proposed while the lock was busy or
// while their first proposer let other goroutines run (stepOnce), and the
// deferred ones waiting for company (ProposeDeferred, holdForwarded).
// Each proposer adds its entry to the open batch, then takes the lock; the
// first of them to get it closes the batch and steps all its entries in
// one MsgProp, and the others find it stepped and share its outcome.
// Batches are stepped in the order they were opened (Node.waiting), so a
// proposal's place is fixed once it joined one (ProposePlaced). Under
// load a leader then appends and broadcasts once per batch instead of once
// per proposal, and a follower forwards one message per batch, not one per
// proposal. Every entry of a batch has the same fate (raft takes or drops
// a MsgProp whole), so each proposer's answer is the batch's, and one that
// must propose again (no leader yet) does so on its own, in whatever batch
// is open then. A batch holds at most maxBatchSize bytes of entry data (or
// one entry): a proposal that would pass it opens a new batch, and the full
// one's proposers step it themselves.
type proposalBatch struct {
	entries []raftpb.Entry // guarded by Node.batchMu while the batch is open
	size    int            // the entries' data, in bytes; guarded like entries
	// done is made by the first deferred entries to join (guarded like
	// entries) and closed once the batch is stepped: a deferred proposer
	// waits on it (ProposeDeferred).
	// The stepper takes it with the entries, when the batch can no longer
	// be joined. deferred counts the deferred entries (guarded like
	// entries).
	done     chan struct{}
	deferred int
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
func (n *Node) stepBatched(data []byte, p Placement) (held bool, err error) {
	b := n.joinBatch(false, raftpb.Entry{Data: data})
	if p != nil {
		p.Placed()
	}
	return n.stepOnce(b, false)
}

// stepDeferred proposes data deferred by delay (ProposeDeferred). On the
// leader it adds data to the open batch and waits up to delay for another
// proposal to step it, stepping it itself after that. On a follower it
// forwards data at once in a MsgProp that carries the delay
// (deferralContext), and the leader, where every proposal meets, holds it
// so (holdForwarded). It returns the outcome here.
func (n *Node) stepDeferred(data []byte, delay time.Duration, p Placement) (held bool, err error) {
	if n.leader.Load() != n.cfg.ID {
		// Stepped alone, after the batches placed before it: its place is
		// taken when it returns, and p is told then.
		held, err = n.stepBehindWaiting(raftpb.Message{Type: raftpb.MsgProp, From: n.cfg.ID,
			Entries: []raftpb.Entry{{Data: data}}, Context: deferralContext(delay)})
		if p != nil {
			p.Placed()
		}
		return held, err
	}
	timer := n.cfg.Clock.NewTimer(delay) // before joining: a test's clock may move once it has
	b := n.joinBatch(true, raftpb.Entry{Data: data})
	if p != nil {
		p.Placed()
	}
	return n.stepAfter(b, timer)
}

// holdForwarded holds the entries of a deferred proposal a follower
// forwarded (a MsgProp with a deferralContext) in the open batch, for the
// next proposal made or forwarded here to take along, stepping them after
// delay at the latest. Nobody here waits for them: should raft drop them
// (this node no longer leads and knows no leader) the forwarder's waiter
// ends at its deadline, as for any forwarded proposal lost on its way.
func (n *Node) holdForwarded(entries []raftpb.Entry, delay time.Duration) {
	timer := n.cfg.Clock.NewTimer(delay)
	b := n.joinBatch(true, entries...)
	go n.stepAfter(b, timer)
}

// stepBehindWaiting steps the proposal m alone, after every batch waiting
// to be stepped (proposals placed before it), unless proposals are held.
func (n *Node) stepBehindWaiting(m raftpb.Message) (held bool, err error) {
	var dones []chan struct{}
	stepped := 0
	held, err = n.stepLocked(func() (bool, error) {
		if n.proposalsHeld {
			return true, nil
		}
		dones, stepped = n.stepThroughLocked(nil, false)
		return false, n.raft.Step(m)
	})
	for _, done := range dones {
		close(done)
	}
	if err == nil && !held {
		stepped++
	}
	if stepped > 0 {
		n.stepped.Add(uint64(stepped))
		n.notify()
	}
	return held, err
}

// stepAfter waits until another proposal stepped b, which deferred entries
// joined, or timer fires, then steps b if it is not yet, and returns its
// outcome.
func (n *Node) stepAfter(b *proposalBatch, timer clock.Timer) (held bool, err error) {
	defer timer.Stop()
	select {
	case <-b.done: // stepped with another proposal
	case <-timer.C():
	case <-n.donec:
	}
	return n.stepOnce(b, true)
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

// stepOnce steps b, after the older batches deferred entries wait in,
// unless a proposal already did, and returns what raft made of it. byTimer
// says a deferred proposal's delay ended the wait (for Deferrals).
func (n *Node) stepOnce(b *proposalBatch, byTimer bool) (held bool, err error) {
	if !byTimer {
		// Let the goroutines ready to run here first join the batch: with
		// one processor a member, proposers never meet at the lock, and a
		// client connection's next write, placed after this one, is among
		// them. Where nothing else is ready it costs a trip through the
		// scheduler.
		runtime.Gosched()
	}
	var dones []chan struct{}
	stepped := 0
	held, err = n.stepLocked(func() (bool, error) {
		dones, stepped = n.stepThroughLocked(b, byTimer)
		return b.held, b.err
	})
	for _, done := range dones {
		close(done)
	}
	if stepped > 0 {
		// Older batches may have left though b was refused: the loop
		// must look either way.
		if err == nil && !held {
			n.stepped.Add(uint64(stepped))
		}
		n.notify()
	}
	return held, err
}

// stepThroughLocked steps, oldest first, the batches waiting to be stepped
// up to b, then b (nil: all of them), skipping those already stepped,
// so that the entries reach raft in the order they joined: the writes of
// one client connection must. It returns the batches' done channels, to be
// closed once n.mu is released, and how many MsgProps it stepped; n.mu
// must be held.
func (n *Node) stepThroughLocked(b *proposalBatch, byTimer bool) (dones []chan struct{}, stepped int) {
	if b == nil {
		// All of them: those waiting now. A batch opened meanwhile (a
		// stream's next write, placed once this steps the one before)
		// is its own proposers' to step, not this call's, which holds the
		// lock.
		if b = n.lastWaiting(); b == nil {
			return nil, 0
		}
	}
	if b.stepped {
		return nil, 0 // and so were the batches before it
	}
	for {
		n.batchMu.Lock()
		var next *proposalBatch
		if len(n.waiting) > 0 && (b == nil || n.waiting[0] != b) {
			next = n.waiting[0]
		}
		n.batchMu.Unlock()
		if next == nil {
			break
		}
		if done, ok := n.stepBatchLocked(next, false); ok {
			if done != nil {
				dones = append(dones, done)
			}
			stepped++
		}
	}
	if b != nil {
		if done, ok := n.stepBatchLocked(b, byTimer); ok {
			if done != nil {
				dones = append(dones, done)
			}
			stepped++
		}
	}
	return dones, stepped
}

// lastWaiting returns the batch opened last of those waiting to be
// stepped, or nil.
func (n *Node) lastWaiting() *proposalBatch {
	n.batchMu.Lock()
	defer n.batchMu.Unlock()
	if len(n.waiting) == 0 {
		return nil
	}
	return n.waiting[len(n.waiting)-1]
}

// stepBatchLocked steps b in one MsgProp unless a proposer already did, and
// reports whether this call stepped it, with b's done channel (nil if no
// deferred entries joined b); n.mu must be held. It counts b's deferred
// entries as left alone when byTimer and b holds nothing else. Should raft
// panic here (a broken invariant), the batch's other proposers find no
// error: raft may have appended the entries before it panicked, so they
// wait for the apply, and their deadline reports the outcome unknown.
func (n *Node) stepBatchLocked(b *proposalBatch, byTimer bool) (chan struct{}, bool) {
	if b.stepped {
		return nil, false
	}
	b.stepped = true
	entries, done, deferred := n.closeBatch(b)
	b.held, b.err = n.stepProposalLocked(raftpb.Message{Type: raftpb.MsgProp, From: n.cfg.ID, Entries: entries})
	switch {
	case deferred == 0:
	case byTimer && deferred == len(entries):
		n.deferredAlone.Add(uint64(deferred))
	default:
		n.deferredJoined.Add(uint64(deferred))
	}
	return done, true
}

// joinBatch adds entries to the open batch, or to a new one (put last on
// the waiting list) if there is none or they would take it past
// maxBatchSize, and returns that batch. Deferred entries make the batch's
// done channel, if it has none yet.
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
		n.waiting = append(n.waiting, b)
	}
	b.entries = append(b.entries, entries...)
	b.size += size
	if deferred {
		if b.done == nil {
			b.done = make(chan struct{})
		}
		b.deferred += len(entries)
	}
	return b
}

// closeBatch takes b out of reach of new proposals, if it is still open,
// and off the waiting list, and returns its entries, its done channel and
// how many of them are deferred.
func (n *Node) closeBatch(b *proposalBatch) ([]raftpb.Entry, chan struct{}, int) {
	n.batchMu.Lock()
	defer n.batchMu.Unlock()
	if n.openBatch == b {
		n.openBatch = nil
	}
	n.waiting = slices.DeleteFunc(n.waiting, func(w *proposalBatch) bool { return w == b })
	return b.entries, b.done, b.deferred
}
