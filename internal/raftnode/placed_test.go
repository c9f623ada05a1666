package raftnode

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
)

// streamWrite is one write of a client connection's stream: told that its
// entry has its place, it starts the stream's next write, as the replica
// ends a write's turn, and returns once that one (and so every later one)
// has its place and was told so: no write of the stream steps its batch
// before the last one joined it.
type streamWrite struct {
	n              *Node
	i, k           int
	placed, passed chan struct{} // closed when Placed is first told, and when that call returns
	errs           chan error
}

func newStreamWrite(n *Node, i, k int, errs chan error) *streamWrite {
	return &streamWrite{n: n, i: i, k: k, placed: make(chan struct{}), passed: make(chan struct{}), errs: errs}
}

func (w *streamWrite) Placed() {
	select {
	case <-w.placed:
		return // a second attempt
	default:
	}
	close(w.placed)
	defer close(w.passed)
	if w.i+1 == w.k {
		return
	}
	next := newStreamWrite(w.n, w.i+1, w.k, w.errs)
	go next.propose()
	select {
	case <-next.passed:
	case <-time.After(10 * time.Second):
		w.errs <- fmt.Errorf("stream-%d was not placed within 10s of stream-%d", w.i+1, w.i)
	}
}

func (w *streamWrite) propose() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w.errs <- w.n.ProposePlaced(ctx, fmt.Appendf(nil, "stream-%d", w.i), w)
}

// TestPlacedProposalsLeaveInOneMsgProp: each write of a stream proposed
// once the one before was placed (as a client connection's pipelined
// writes are) joins the batch of the one before, which no one steps until
// the write after it joined: all leave the leader in one MsgApp to each
// follower, and apply in order.
func TestPlacedProposalsLeaveInOneMsgProp(t *testing.T) {
	const writes = 8
	g, logs := startLoggedGroup(t, 3, fakeOptions{})
	leader := g.elect(t)
	g.propose(t, leader, "warm-up")

	errs := make(chan error, 2*writes)
	go newStreamWrite(leader, 0, writes, errs).propose()
	for range writes {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("the stream's writes were not all proposed within 20s")
		}
	}
	last := fmt.Sprintf("stream-%d", writes-1)
	g.waitApplied(t, last)
	for i, m := range g.machines {
		for j := 1; j < writes; j++ {
			if !m.appliedBefore(fmt.Sprintf("stream-%d", j-1), fmt.Sprintf("stream-%d", j)) {
				t.Fatalf("node %d applied stream-%d before stream-%d", i+1, j, j-1)
			}
		}
	}
	wantOneAppend(t, g, logs, leader, "stream-", writes)
}

// TestBatchesStepInTheOrderTheyOpened: a proposal that finds the open
// batch full opens the next one; stepping that one first steps the full
// one, so its entries reach raft after those placed before them.
func TestBatchesStepInTheOrderTheyOpened(t *testing.T) {
	g, leader, _ := startWarmGroup(t)

	big := make([]byte, maxBatchSize)
	copy(big, "full")
	full := leader.joinBatch(false, raftpb.Entry{Data: big})
	next := leader.joinBatch(false, raftpb.Entry{Data: []byte("next")})
	if full == next {
		t.Fatal("a proposal past maxBatchSize joined the full batch")
	}
	stepBatch(t, leader, next, "the later batch")
	stepBatch(t, leader, full, "the full batch")
	g.wantAppliedInOrder(t, string(big), "next")
}

// TestForwardedProposalStepsTheOpenBatchFirst: a proposal a follower
// forwards to the leader takes along, ahead of it, the leader's batch of
// proposals not yet stepped: the entries placed here first apply first.
func TestForwardedProposalStepsTheOpenBatchFirst(t *testing.T) {
	g, leader, follower := startWarmGroup(t)

	open := leader.joinBatch(false, raftpb.Entry{Data: []byte("placed-here")})
	forwarded := raftpb.Message{Type: raftpb.MsgProp, From: follower.cfg.ID, To: leader.cfg.ID,
		Entries: []raftpb.Entry{{Data: []byte("forwarded")}}}
	if err := leader.Step(context.Background(), forwarded); err != nil {
		t.Fatalf("step the forwarded proposal: %v", err)
	}
	stepBatch(t, leader, open, "the open batch")
	g.wantAppliedInOrder(t, "placed-here", "forwarded")
}

// TestFollowersDeferredProposalStepsBehindItsOpenBatch: a follower's
// deferred proposal (forwarded alone, its delay in the Context) reaches the
// leader after the follower's batch of proposals placed before it.
func TestFollowersDeferredProposalStepsBehindItsOpenBatch(t *testing.T) {
	g, leader, follower := startWarmGroup(t)

	open := follower.joinBatch(false, raftpb.Entry{Data: []byte("placed-first")})
	deferred := proposeDeferredAsync(t, follower, leader, "deferred-after", time.Hour) // held at the leader
	if err := deferredOutcome(t, deferred); err != nil {
		t.Fatalf("the deferred proposal: %v", err)
	}
	stepBatch(t, follower, open, "the open batch") // stepped already, or now
	g.propose(t, leader, "company")                // steps what the leader holds
	g.wantAppliedInOrder(t, "placed-first", "deferred-after")
}

// startWarmGroup starts a group of three, elects a leader, has every member
// apply an entry, and returns the group, its leader and a follower.
func startWarmGroup(t *testing.T) (g *fakeGroup, leader, follower *Node) {
	t.Helper()
	g = startFakeGroup(t, 3)
	leader = g.elect(t)
	g.propose(t, leader, "warm-up")
	return g, leader, g.followerOf(t, leader)
}

// stepBatch steps b through n (a no-op if it was stepped), failing t if
// raft held or refused it.
func stepBatch(t *testing.T, n *Node, b *proposalBatch, what string) {
	t.Helper()
	if held, err := n.stepOnce(b, false); held || err != nil {
		t.Fatalf("%s: held %v, %v", what, held, err)
	}
}

// wantAppliedInOrder waits until every member applied earlier and later,
// and fails t unless each applied earlier first.
func (g *fakeGroup) wantAppliedInOrder(t *testing.T, earlier, later string) {
	t.Helper()
	g.waitApplied(t, earlier)
	g.waitApplied(t, later)
	for i, m := range g.machines {
		if !m.appliedBefore(earlier, later) {
			t.Fatalf("node %d applied %.24q before %.24q", i+1, later, earlier)
		}
	}
}
