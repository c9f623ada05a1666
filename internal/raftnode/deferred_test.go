package raftnode

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
)

// deferredWaiting reports whether a deferred proposal waits in n's open
// batch (ProposeDeferred, before anything stepped it).
func deferredWaiting(n *Node) bool {
	n.batchMu.Lock()
	defer n.batchMu.Unlock()
	return n.openBatch != nil && n.openBatch.done != nil
}

// proposeDeferredAsync proposes data through n with ProposeDeferred on
// another goroutine, waits until it waits in the open batch of holder (n,
// or the leader if n is a follower), and returns the channel of its
// outcome (read it with deferredOutcome).
func proposeDeferredAsync(t *testing.T, n, holder *Node, data string, delay time.Duration) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		done <- n.ProposeDeferred(ctx, []byte(data), delay, nil)
	}()
	waitFor(t, fmt.Sprintf("%q to wait in the open batch", data), func() bool { return deferredWaiting(holder) })
	return done
}

// waitApplied waits until every member applied the entry data.
func (g *fakeGroup) waitApplied(t *testing.T, data string) {
	t.Helper()
	for i, m := range g.machines {
		waitFor(t, fmt.Sprintf("node %d to apply %q", i+1, data), func() bool { return m.has(data) })
	}
}

// deferredOutcome returns what ProposeDeferred returned on done, failing t
// if it has not returned within 10 s: nothing stepped the proposal (its
// delay, on the fake clock, never passes by itself).
func deferredOutcome(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("the deferred proposal was not stepped within 10s")
		return nil
	}
}

// wantOneAppend fails t unless the entries whose data starts with prefix
// left leader for each of its followers in one Send and one MsgApp.
func wantOneAppend(t *testing.T, g *fakeGroup, logs map[uint64]*sendLog, leader *Node, prefix string, entries int) {
	t.Helper()
	for _, follower := range g.nodes {
		if follower == leader {
			continue
		}
		msgApps, carried := logs[leader.cfg.ID].appendsCarrying(follower.cfg.ID, prefix)
		if len(carried) != 1 || carried[0] != entries || msgApps[0] != 1 {
			t.Errorf("to follower %d the %d entries %q... left in %d Sends carrying %v of them in %v MsgApps, want one Send, one MsgApp with all",
				follower.cfg.ID, entries, prefix, len(carried), carried, msgApps)
		}
	}
}

// followerOf returns a member other than leader, once it knows leader.
func (g *fakeGroup) followerOf(t *testing.T, leader *Node) *Node {
	t.Helper()
	follower := g.nodes[leader.cfg.ID%uint64(len(g.nodes))] // the next member
	waitFor(t, "the follower to know the leader", func() bool { return follower.leader.Load() == leader.cfg.ID })
	return follower
}

// TestDeferredProposalLeavesWithTheNext: a deferred proposal waits in the
// leader's open batch (the clock stands still, so its delay never passes)
// until the next proposal, made on the leader or forwarded to it by a
// follower, steps both: they leave for every follower in one MsgApp and
// apply everywhere.
func TestDeferredProposalLeavesWithTheNext(t *testing.T) {
	for _, from := range []string{"leader", "follower"} {
		t.Run("next from the "+from, func(t *testing.T) {
			g, logs := startLoggedGroup(t, 3, fakeOptions{})
			leader := g.elect(t)
			g.propose(t, leader, "warm-up") // every member knows the leader
			next := leader
			if from == "follower" {
				next = g.followerOf(t, leader)
			}
			deferred := proposeDeferredAsync(t, leader, leader, "pair-deferred", time.Hour)
			if g.machines[leader.cfg.ID-1].has("pair-deferred") {
				t.Fatal("the deferred proposal applied before anything stepped it")
			}
			g.propose(t, next, "pair-next")
			if err := deferredOutcome(t, deferred); err != nil {
				t.Fatalf("the deferred proposal: %v", err)
			}
			g.waitApplied(t, "pair-deferred")
			wantOneAppend(t, g, logs, leader, "pair-", 2)
		})
	}
}

// TestDeferredProposalAloneLeavesAfterItsDelay: with no other proposal, a
// deferred one waits in the leader's open batch (a follower's is forwarded
// at once and held there) while its delay has not passed on the clock,
// then is stepped and applies on every member.
func TestDeferredProposalAloneLeavesAfterItsDelay(t *testing.T) {
	const delay = 10 * time.Millisecond // less than a tick: advancing it ticks nothing
	for _, on := range []string{"leader", "follower"} {
		t.Run(on, func(t *testing.T) {
			g := startFakeGroup(t, 3)
			leader := g.elect(t)
			g.propose(t, leader, "warm-up")
			n := leader
			if on == "follower" {
				n = g.followerOf(t, leader)
			}
			deferred := proposeDeferredAsync(t, n, leader, "alone", delay)
			g.clock.Advance(delay / 2)
			if on == "leader" {
				select {
				case err := <-deferred:
					t.Fatalf("the deferred proposal returned (%v) before its delay passed", err)
				default:
				}
			}
			if !deferredWaiting(leader) {
				t.Fatal("the deferred proposal left the leader's open batch before its delay passed")
			}
			g.clock.Advance(delay / 2)
			if err := deferredOutcome(t, deferred); err != nil {
				t.Fatalf("the deferred proposal: %v", err)
			}
			g.waitApplied(t, "alone")
		})
	}
}

// TestFollowersDeferredProposalWaitsAtTheLeader: a follower forwards its
// deferred proposal at once; the leader holds it (the clock stands still)
// until the next proposal made on the leader, and both leave for every
// follower in one MsgApp.
func TestFollowersDeferredProposalWaitsAtTheLeader(t *testing.T) {
	g, logs := startLoggedGroup(t, 3, fakeOptions{})
	leader := g.elect(t)
	g.propose(t, leader, "warm-up")
	follower := g.followerOf(t, leader)

	deferred := proposeDeferredAsync(t, follower, leader, "pair-deferred", time.Hour)
	if err := deferredOutcome(t, deferred); err != nil {
		t.Fatalf("the follower's deferred proposal: %v", err)
	}
	if deferredWaiting(follower) {
		t.Fatal("the follower holds its deferred proposal; want it forwarded at once")
	}
	g.propose(t, leader, "pair-next")
	g.waitApplied(t, "pair-deferred")
	wantOneAppend(t, g, logs, leader, "pair-", 2)
	if joined, alone := leader.Deferrals(); joined != 1 || alone != 0 {
		t.Fatalf("the leader counts %d deferred proposals joined, %d alone; want 1, 0", joined, alone)
	}
}

// TestForwardedDeferral: a MsgProp's Context carries a deferral only as
// deferralContext writes it; the delay read back is capped.
func TestForwardedDeferral(t *testing.T) {
	tests := []struct {
		name    string
		context []byte
		want    time.Duration
		ok      bool
	}{
		{"none", nil, 0, false},
		{"2 ms", deferralContext(2 * time.Millisecond), 2 * time.Millisecond, true},
		{"zero", deferralContext(0), 0, true},
		{"capped", deferralContext(time.Hour), maxForwardedDeferral, true},
		{"tag alone", []byte{deferralTag}, 0, false},
		{"another tag", []byte{0x01, 0x02}, 0, false},
		{"trailing bytes", append(deferralContext(time.Millisecond), 0), 0, false},
		{"truncated uvarint", []byte{deferralTag, 0x80}, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := forwardedDeferral(&raftpb.Message{Type: raftpb.MsgProp, Context: tt.context})
			if got != tt.want || ok != tt.ok {
				t.Fatalf("forwardedDeferral(%x) = %v, %v; want %v, %v", tt.context, got, ok, tt.want, tt.ok)
			}
		})
	}
}

// appliedBefore reports whether m applied a before b (both applied).
func (m *recordingMachine) appliedBefore(a, b string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	ia, ib := -1, -1
	for i, d := range m.applied {
		switch string(d) {
		case a:
			ia = i
		case b:
			ib = i
		}
	}
	return ia >= 0 && ib >= 0 && ia < ib
}

// TestFollowersDeferredProposalKeepsItsOrder: a follower's deferred
// proposal, held at the leader, reaches raft before the next proposal the
// same follower forwards (a client connection's next write must apply
// after it), and before a deferred one held after it in a later batch.
func TestFollowersDeferredProposalKeepsItsOrder(t *testing.T) {
	g := startFakeGroup(t, 3)
	leader := g.elect(t)
	g.propose(t, leader, "warm-up")
	follower := g.followerOf(t, leader)

	if err := deferredOutcome(t, proposeDeferredAsync(t, follower, leader, "first", time.Hour)); err != nil {
		t.Fatalf("the deferred proposal: %v", err)
	}
	g.propose(t, follower, "second")
	g.waitApplied(t, "first")
	for i, m := range g.machines {
		if !m.appliedBefore("first", "second") {
			t.Fatalf("node %d applied the follower's second proposal before its deferred first", i+1)
		}
	}
}
