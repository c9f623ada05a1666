package raftnode

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/latch-io/latch/internal/transport"
)

// blockOn makes m's Apply wait for gate when it meets the entry "block",
// holding its Ready loop busy; blocked is closed when it starts waiting.
func blockOn(m *recordingMachine) (blocked, gate chan struct{}) {
	blocked, gate = make(chan struct{}), make(chan struct{})
	hook := func(entries []raftpb.Entry) {
		for _, e := range entries {
			if string(e.Data) == "block" {
				close(blocked)
				<-gate
			}
		}
	}
	m.beforeApply.Store(&hook)
	return blocked, gate
}

// sendLog records every Send of one member: which entries each call
// carried, in how many MsgApps, to each peer.
type sendLog struct {
	transport.Transport
	mu    sync.Mutex
	sends [][]raftpb.Message // guarded by mu: each Send's messages
}

func (s *sendLog) Send(group uint64, msgs []raftpb.Message) {
	s.mu.Lock()
	s.sends = append(s.sends, append([]raftpb.Message(nil), msgs...))
	s.mu.Unlock()
	s.Transport.Send(group, msgs)
}

// appendsCarrying returns, for each Send that carried an entry whose data
// starts with prefix to peer to, the MsgApps of that Send to to and the
// number of such entries they held.
func (s *sendLog) appendsCarrying(to uint64, prefix string) (msgApps, entries []int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, msgs := range s.sends {
		apps, carried := 0, 0
		for _, m := range msgs {
			if m.To != to || m.Type != raftpb.MsgApp {
				continue
			}
			apps++
			for _, e := range m.Entries {
				if strings.HasPrefix(string(e.Data), prefix) {
					carried++
				}
			}
		}
		if carried > 0 {
			msgApps, entries = append(msgApps, apps), append(entries, carried)
		}
	}
	return msgApps, entries
}

// startLoggedGroup starts a fake group of size members whose every Send is
// recorded, by member id; opts.wrap is set here.
func startLoggedGroup(t *testing.T, size int, opts fakeOptions) (*fakeGroup, map[uint64]*sendLog) {
	logs := map[uint64]*sendLog{}
	var logsMu sync.Mutex
	next := uint64(0)
	opts.wrap = func(tr transport.Transport) transport.Transport {
		logsMu.Lock()
		defer logsMu.Unlock()
		next++
		logs[next] = &sendLog{Transport: tr}
		return logs[next]
	}
	g := startFakeGroupWith(t, size, opts)
	return g, logs
}

// TestProposalsWhileLoopBusyLeaveInOneReady: proposals stepped by several
// goroutines while the leader's Ready loop is busy (applying) are taken by
// the callers at once, without waiting for the loop, and leave together in
// the next Ready: one Send to each follower carrying all of them, in one
// MsgApp.
func TestProposalsWhileLoopBusyLeaveInOneReady(t *testing.T) {
	const proposers = 8
	g, logs := startLoggedGroup(t, 3, fakeOptions{})
	leader := g.elect(t)
	g.propose(t, leader, "warm-up") // every follower replicating

	// The leader's machine blocks on "block": its loop is busy in Apply.
	blocked, gate := blockOn(g.machines[leader.cfg.ID-1])
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := leader.Propose(ctx, []byte("block")); err != nil {
		t.Fatalf("propose: %v", err)
	}
	select {
	case <-blocked:
	case <-ctx.Done():
		t.Fatal("the leader's loop never reached the blocking entry")
	}
	readysBefore, _ := leader.Batching()

	var wg sync.WaitGroup
	errs := make(chan error, proposers)
	for i := range proposers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- leader.Propose(ctx, fmt.Appendf(nil, "batch-%d", i))
		}()
	}
	wg.Wait() // every proposal taken while the loop is still in Apply
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("propose while the loop is busy: %v", err)
		}
	}
	if readys, _ := leader.Batching(); readys != readysBefore {
		t.Fatalf("the loop took %d Readys while blocked in Apply", readys-readysBefore)
	}
	close(gate)
	for i, m := range g.machines {
		waitFor(t, fmt.Sprintf("node %d to apply the batch", i+1), func() bool {
			return m.has(fmt.Sprintf("batch-%d", proposers-1)) && m.has("batch-0")
		})
	}
	for _, follower := range g.nodes {
		if follower == leader {
			continue
		}
		msgApps, entries := logs[leader.cfg.ID].appendsCarrying(follower.cfg.ID, "batch-")
		if len(entries) != 1 || entries[0] != proposers || msgApps[0] != 1 {
			t.Errorf("to follower %d the %d proposals left in %d Sends carrying %v of them in %v MsgApps, want one Send, one MsgApp with all",
				follower.cfg.ID, proposers, len(entries), entries, msgApps)
		}
	}
}

// TestProposalDroppedDuringTransferIsProposedAgain: while the leader
// transfers leadership it drops a proposal at once (raft.ErrProposalDropped,
// not appended, the caller not blocked); proposed again, as the replica
// does, once the new leader is in place, the entry applies exactly once on
// every member.
func TestProposalDroppedDuringTransferIsProposedAgain(t *testing.T) {
	g := startFakeGroup(t, 3)
	leader := g.elect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The transferee misses an entry, so the transfer waits for it to catch up.
	transferee, lastBefore := startStalledTransfer(t, ctx, g, leader)

	err := leader.Propose(ctx, []byte("during"))
	if !errors.Is(err, raft.ErrProposalDropped) {
		t.Fatalf("propose during a leadership transfer: %v, want raft.ErrProposalDropped", err)
	}
	if last, _ := leader.storage.LastIndex(); last != lastBefore {
		t.Fatalf("a dropped proposal reached the log: last index %d, was %d", last, lastBefore)
	}

	// Proposed again until taken, through the old leader, while the
	// transferee catches up and takes over.
	accepted := make(chan error, 1)
	go func() {
		for {
			err := leader.Propose(ctx, []byte("during"))
			if !errors.Is(err, raft.ErrProposalDropped) {
				accepted <- err
				return
			}
			select {
			case <-time.After(time.Millisecond):
			case <-ctx.Done():
				accepted <- ctx.Err()
				return
			}
		}
	}()
	// The entry the transferee missed is committed (by the leader and the
	// third node) before the cut heals, so no message of its commit is left
	// to reach the transferee after: the leader learns that the transferee
	// is behind from its answer to a heartbeat, and heartbeats go with the
	// ticks of the test's clock.
	waitFor(t, "the entry before the transfer to commit", func() bool { return leader.Status().Commit >= lastBefore })
	g.network.Heal()
	waitFor(t, "the transferee to lead", func() bool {
		// raft gives a transfer an election timeout of ticks to finish;
		// if it is abandoned, ask again (the re-proposals go on meanwhile).
		l := g.leader()
		if l == transferee {
			return true
		}
		if l != nil && l.Status().LeadTransferee == raft.None {
			l.TransferLeadership(ctx, transferee.cfg.ID)
		}
		g.tick(t)
		return false
	})
	if err := <-accepted; err != nil {
		t.Fatalf("propose again: %v", err)
	}
	for i, m := range g.machines {
		waitFor(t, fmt.Sprintf("node %d to apply the entry proposed again", i+1), func() bool { return m.has("during") })
	}
	g.propose(t, transferee, "after") // applied in order after it
	for i, m := range g.machines {
		m.mu.Lock()
		count := 0
		for _, d := range m.applied {
			if string(d) == "during" {
				count++
			}
		}
		m.mu.Unlock()
		if count != 1 {
			t.Errorf("node %d applied the entry %d times, want once", i+1, count)
		}
	}
}

// TestProposalWaitsForALeader: a proposal made while no leader is known
// waits (raft would drop it) and is taken once one is elected, as
// raft.Node's was; a caller that gives up first gets its context's error.
func TestProposalWaitsForALeader(t *testing.T) {
	g := startFakeGroup(t, 3)
	n := g.nodes[0]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	waiting := make(chan error, 1)
	go func() { waiting <- n.Propose(ctx, []byte("waited")) }()
	waitFor(t, "the proposal to wait for a leader", func() bool {
		n.leaderMu.Lock()
		defer n.leaderMu.Unlock()
		return n.leaderWait != nil
	})
	select {
	case err := <-waiting:
		t.Fatalf("propose without a leader returned %v, want it to wait", err)
	default:
	}
	gaveUp, cancelEarly := context.WithCancel(context.Background())
	cancelEarly()
	if err := n.Propose(gaveUp, []byte("given-up")); !errors.Is(err, context.Canceled) {
		t.Fatalf("propose given up: %v, want context.Canceled", err)
	}
	g.elect(t)
	if err := <-waiting; err != nil {
		t.Fatalf("propose once a leader is elected: %v", err)
	}
	for i, m := range g.machines {
		waitFor(t, fmt.Sprintf("node %d to apply the proposal that waited", i+1), func() bool { return m.has("waited") })
		if m.has("given-up") {
			t.Errorf("node %d applied a proposal its caller gave up before any leader", i+1)
		}
	}
}

// TestReforwardedProposalIsFromThisNode: a proposal a peer forwarded here
// that raft forwards on to the leader leaves as this node's (as raft.Node
// made it), not with the first sender's id: the next hop's transport
// refuses a message whose sender is not the connection's peer.
func TestReforwardedProposalIsFromThisNode(t *testing.T) {
	g, logs := startLoggedGroup(t, 3, fakeOptions{})
	leader := g.elect(t)
	g.propose(t, leader, "warm-up") // every member knows the leader
	var via, origin *Node
	for _, n := range g.nodes {
		switch {
		case n == leader:
		case via == nil:
			via = n
		default:
			origin = n
		}
	}
	waitFor(t, "the forwarding member to know the leader", func() bool { return via.leader.Load() == leader.cfg.ID })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m := raftpb.Message{Type: raftpb.MsgProp, From: origin.cfg.ID, To: via.cfg.ID, Entries: []raftpb.Entry{{Data: []byte("reforwarded")}}}
	if err := via.Step(ctx, m); err != nil {
		t.Fatalf("step the forwarded proposal: %v", err)
	}
	waitFor(t, "the leader to apply the reforwarded proposal", func() bool { return g.machines[leader.cfg.ID-1].has("reforwarded") })
	log := logs[via.cfg.ID]
	log.mu.Lock()
	defer log.mu.Unlock()
	for _, msgs := range log.sends {
		for _, sent := range msgs {
			if sent.Type == raftpb.MsgProp && sent.To == leader.cfg.ID && sent.From != via.cfg.ID {
				t.Fatalf("the proposal left member %d for the leader %d with sender %d, want %d", via.cfg.ID, leader.cfg.ID, sent.From, via.cfg.ID)
			}
		}
	}
}
