package raftnode

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// holdBatch holds n's lock while proposers proposals of data prefix+i are
// made on n, until all of them wait in the open batch; it then releases
// the lock and returns each proposer's answer, in order.
func holdBatch(t *testing.T, ctx context.Context, n *Node, prefix string, proposers int) []error {
	t.Helper()
	n.mu.Lock()
	errs := make([]chan error, proposers)
	for i := range errs {
		errs[i] = make(chan error, 1)
		go func() { errs[i] <- n.Propose(ctx, fmt.Appendf(nil, "%s%d", prefix, i)) }()
	}
	waitFor(t, "every proposal to join the open batch", func() bool {
		n.batchMu.Lock()
		defer n.batchMu.Unlock()
		return n.openBatch != nil && len(n.openBatch.entries) == proposers
	})
	n.mu.Unlock()
	out := make([]error, proposers)
	for i, ch := range errs {
		select {
		case out[i] = <-ch:
		case <-ctx.Done():
			t.Fatalf("proposal %d unanswered: %v", i, ctx.Err())
		}
	}
	return out
}

// appliedCount returns how many times m applied data.
func appliedCount(m *recordingMachine, data string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	count := 0
	for _, d := range m.applied {
		if string(d) == data {
			count++
		}
	}
	return count
}

// follower returns a member of g other than leader.
func (g *fakeGroup) follower(leader *Node) *Node {
	for _, n := range g.nodes {
		if n != leader {
			return n
		}
	}
	return nil
}

// startStalledTransfer has leader transfer leadership to a follower it is
// cut off from, after an entry "before" that follower misses, so that the
// transfer waits for it to catch up; it returns the transferee and the
// leader's last index once "before" is saved.
func startStalledTransfer(t *testing.T, ctx context.Context, g *fakeGroup, leader *Node) (transferee *Node, lastBefore uint64) {
	t.Helper()
	transferee = g.follower(leader)
	g.network.Cut(leader.cfg.ID, transferee.cfg.ID)
	if err := leader.Propose(ctx, []byte("before")); err != nil {
		t.Fatalf("propose: %v", err)
	}
	// Saved, so that the storage's last index counts it.
	waitFor(t, "the leader to apply the entry before", func() bool { return g.machines[leader.cfg.ID-1].has("before") })
	leader.TransferLeadership(ctx, transferee.cfg.ID)
	waitFor(t, "the transfer to start", func() bool { return leader.Status().LeadTransferee == transferee.cfg.ID })
	lastBefore, err := leader.storage.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	return transferee, lastBefore
}

// TestProposalsMadeWhileLockedLeaveInOneMsgProp: proposals made on a
// follower while its lock is taken are stepped together by the first
// proposer to get it: the follower forwards them to the leader in one
// MsgProp, and each is applied once on every member.
func TestProposalsMadeWhileLockedLeaveInOneMsgProp(t *testing.T) {
	const proposers = 8
	g, logs := startLoggedGroup(t, 3, fakeOptions{})
	leader := g.elect(t)
	g.propose(t, leader, "warm-up")
	follower := g.follower(leader)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i, err := range holdBatch(t, ctx, follower, "fwd-", proposers) {
		if err != nil {
			t.Fatalf("proposal %d: %v", i, err)
		}
	}
	for i, m := range g.machines {
		waitFor(t, fmt.Sprintf("node %d to apply the batch", i+1), func() bool {
			for p := range proposers {
				if !m.has(fmt.Sprintf("fwd-%d", p)) {
					return false
				}
			}
			return true
		})
	}
	log := logs[follower.cfg.ID]
	log.mu.Lock()
	var carried []int // per MsgProp to the leader carrying the batch: its entries
	for _, msgs := range log.sends {
		for _, m := range msgs {
			if m.Type != raftpb.MsgProp || m.To != leader.cfg.ID {
				continue
			}
			n := 0
			for _, e := range m.Entries {
				if strings.HasPrefix(string(e.Data), "fwd-") {
					n++
				}
			}
			if n > 0 {
				carried = append(carried, n)
			}
		}
	}
	log.mu.Unlock()
	if len(carried) != 1 || carried[0] != proposers {
		t.Errorf("the follower forwarded the %d proposals in MsgProps carrying %v of them, want one with all", proposers, carried)
	}
	g.propose(t, leader, "after") // every member has applied all it will
	for i, m := range g.machines {
		waitFor(t, fmt.Sprintf("node %d to apply the entry after", i+1), func() bool { return m.has("after") })
		for p := range proposers {
			if c := appliedCount(m, fmt.Sprintf("fwd-%d", p)); c != 1 {
				t.Errorf("node %d applied fwd-%d %d times, want once", i+1, p, c)
			}
		}
	}
}

// TestDroppedBatchAnswersEveryProposer: a batch raft drops (the leader is
// transferring leadership) is answered raft.ErrProposalDropped for each of
// its proposals, and none of them reaches the log.
func TestDroppedBatchAnswersEveryProposer(t *testing.T) {
	const proposers = 4
	g := startFakeGroup(t, 3)
	leader := g.elect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, lastBefore := startStalledTransfer(t, ctx, g, leader)
	for i, err := range holdBatch(t, ctx, leader, "dropped-", proposers) {
		if !errors.Is(err, raft.ErrProposalDropped) {
			t.Errorf("proposal %d of a dropped batch: %v, want raft.ErrProposalDropped", i, err)
		}
	}
	if last, _ := leader.storage.LastIndex(); last != lastBefore {
		t.Fatalf("a dropped batch reached the log: last index %d, was %d", last, lastBefore)
	}
}

// cutOffFollower starts a group and returns a follower that has applied
// everything so far and is then cut off from the leader: nothing is
// stepped into it but what the test proposes on it (the fake group's
// clock only ticks when told), so Batching counts the test's steps.
func cutOffFollower(t *testing.T) *Node {
	t.Helper()
	g := startFakeGroup(t, 3)
	leader := g.elect(t)
	g.propose(t, leader, "warm-up")
	follower := g.follower(leader)
	waitFor(t, "the follower to apply the warm-up", func() bool { return g.machines[follower.cfg.ID-1].has("warm-up") })
	g.network.Cut(leader.cfg.ID, follower.cfg.ID)
	return follower
}

// TestLockedOutProposalsTakeOneStep: proposals that wait for the lock
// together are stepped into raft as one message (Batching counts one
// step), not one each.
func TestLockedOutProposalsTakeOneStep(t *testing.T) {
	const proposers = 8
	follower := cutOffFollower(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, before := follower.Batching()
	for i, err := range holdBatch(t, ctx, follower, "cut-", proposers) {
		if err != nil {
			t.Fatalf("proposal %d: %v", i, err)
		}
	}
	if _, after := follower.Batching(); after-before != 1 {
		t.Errorf("%d proposals made while the lock was held took %d steps, want 1", proposers, after-before)
	}
}

// TestBatchesStopAtTheSizeBound: proposals whose data together would pass
// maxBatchSize, made while the lock is held, are stepped in as many
// batches as the bound needs (Batching counts the steps), and a small one
// still joins the last batch.
func TestBatchesStopAtTheSizeBound(t *testing.T) {
	follower := cutOffFollower(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, before := follower.Batching()
	big := maxBatchSize/2 + 1 // two do not fit in one batch
	sizes := []int{big, big, big, 10}
	follower.mu.Lock()
	errs := make(chan error, len(sizes))
	for i, size := range sizes {
		data := make([]byte, size)
		data[0] = byte(i)
		go func() { errs <- follower.Propose(ctx, data) }()
		// Each joins the open batch before the next is made.
		waitFor(t, fmt.Sprintf("proposal %d to join a batch", i), func() bool {
			follower.batchMu.Lock()
			defer follower.batchMu.Unlock()
			b := follower.openBatch
			return b != nil && b.entries[len(b.entries)-1].Data[0] == byte(i) && len(b.entries[len(b.entries)-1].Data) == size
		})
	}
	follower.mu.Unlock()
	for range sizes {
		if err := <-errs; err != nil {
			t.Fatalf("proposal: %v", err)
		}
	}
	if _, after := follower.Batching(); after-before != 3 {
		t.Errorf("proposals of %v bytes took %d steps, want 3 (the bound is %d bytes a batch)", sizes, after-before, maxBatchSize)
	}
}
