package testcluster

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/clock"
)

// learnerCluster starts three voters in virtual time, without quiescing (so
// the leader keeps ticking and checking its quorum), adds n4 as a learner
// and waits until it has caught up. It returns the cluster, the leader and
// n4's index.
func learnerCluster(t *testing.T, ctx context.Context) (c *Cluster, leader, n4 int) {
	t.Helper()
	c = New(t, 3, Options{Time: clock.NewFake(time.Unix(1_700_000_000, 0)), NoQuiesce: []string{"n1", "n2", "n3", "n4"}})
	leader = c.WaitLeader(10 * time.Second)
	var added api.Member
	if err := Do(ctx, "POST", c.URL(leader), "/v1/cluster/members", nil,
		map[string]any{"name": "n4", "peer_url": c.PeerURL("n4"), "learner": true}, &added); err != nil || !added.Learner {
		t.Fatalf("add learner: %+v, %v", added, err)
	}
	n4 = c.AddNode("n4")
	voters := sortedIDs(c.Nodes[0].ID, c.Nodes[1].ID, c.Nodes[2].ID)
	if !c.AdvanceUntil(30*time.Second, func() bool {
		return c.shardConfigsAre(leader, 1, voters, []uint64{c.Nodes[n4].ID}) && sameShardIndexes(c) &&
			c.Nodes[leader].Server.PeerHealthy(c.Nodes[n4].ID) // its acknowledgement reached the leader
	}) {
		t.Fatalf("n4 did not catch up as a learner: %+v", c.Status(n4))
	}
	return c, leader, n4
}

// answerWhileAdvancing runs call on its own goroutine and advances virtual
// time until it returns, calling during after each tick with the ticks
// taken so far; it returns the virtual time the call took and its error.
func answerWhileAdvancing(t *testing.T, c *Cluster, call func() error, during func(ticks int)) (time.Duration, error) {
	t.Helper()
	start := c.Now()
	done := make(chan error, 1)
	asked := make(chan struct{})
	go func() {
		close(asked)
		done <- call()
	}()
	<-asked
	var err error
	ticks := 0
	answered := func() bool {
		select {
		case err = <-done:
			return true
		default:
			during(ticks)
			ticks++
			return false
		}
	}
	if !c.AdvanceUntil(30*time.Second, answered) {
		t.Fatal("no answer within 30 s")
	}
	return c.Now().Sub(start), err
}

// promoteWhileAdvancing asks the leader to promote n4 (answerWhileAdvancing).
func promoteWhileAdvancing(t *testing.T, ctx context.Context, c *Cluster, leader, n4 int, during func(ticks int)) (api.Member, time.Duration, error) {
	t.Helper()
	var promoted api.Member
	took, err := answerWhileAdvancing(t, c, func() error {
		var err error
		promoted, err = c.Nodes[leader].Server.PromoteMember(ctx, c.Nodes[n4].ID)
		return err
	}, during)
	return promoted, took, err
}

// TestPromotionHearsFromTheLearnerAgain: raft's leader forgets whom it heard
// from at each election timeout's quorum check. A learner that was silent
// across such a check and answers again while the promotion waits is
// promoted: the leader waits to hear from it instead of refusing at once.
func TestPromotionHearsFromTheLearnerAgain(t *testing.T) {
	ctx := ctxT(t, 90*time.Second)
	c, leader, n4 := learnerCluster(t, ctx)
	election := silence(t, c, leader, n4) // at least one quorum check with n4 silent since
	// The promotion asks while n4 is still cut off, and n4 comes back
	// three ticks later.
	promoted, took, err := promoteWhileAdvancing(t, ctx, c, leader, n4, func(ticks int) {
		if ticks == 3 {
			c.Net.Heal()
		}
	})
	if err != nil || promoted.Learner {
		t.Fatalf("promote n4, back three ticks after the promotion asked: %+v, %v; want it a voter", promoted, err)
	}
	// Within an election timeout of the heal in principle; twice that
	// leaves room for a loaded machine, whose goroutines lag the ticks.
	if took > 2*election {
		t.Fatalf("the promotion took %v of virtual time, more than two election timeouts (%v each)", took, election)
	}
}

// TestPromotionRefusesASilentLearner: a learner the leader does not hear
// from for an election timeout after the promotion asks is refused, with
// that reason, and stays a learner.
func TestPromotionRefusesASilentLearner(t *testing.T) {
	ctx := ctxT(t, 90*time.Second)
	c, leader, n4 := learnerCluster(t, ctx)
	election := silence(t, c, leader, n4)
	_, took, err := promoteWhileAdvancing(t, ctx, c, leader, n4, func(int) {})
	if api.CodeOf(err) != api.CodePreconditionFailed || !strings.Contains(err.Error(), "has not heard from it within the last election timeout") {
		t.Fatalf("promote the isolated n4: %v; want precondition_failed, not heard from", err)
	}
	if took < election {
		t.Fatalf("refused after %v of virtual time, before an election timeout (%v) to hear from n4", took, election)
	}
	requireStillLearner(t, c, leader, n4, "after the refusal")
}

// TestPromotionEndedMidWaitIsUnavailable: a promotion whose request ends
// while the leader still waits to hear from the learner has not been
// refused: it answers unavailable (try again), not the refusal of the last
// look, and n4 stays a learner. The request ends three ticks into the
// wait; virtual time then stands still, so the wait's own end cannot come
// first.
func TestPromotionEndedMidWaitIsUnavailable(t *testing.T) {
	ctx := ctxT(t, 90*time.Second)
	c, leader, n4 := learnerCluster(t, ctx)
	silence(t, c, leader, n4)
	callCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	err := promoteInterrupted(t, c, callCtx, leader, n4, cancel)
	if api.CodeOf(err) != api.CodeUnavailable || !strings.Contains(err.Error(), "the request ended") || !strings.Contains(err.Error(), "has not heard from it") {
		t.Fatalf("promote the isolated n4, the request ended mid-wait: %v; want unavailable, the request ended, with the last look's reason", err)
	}
	requireStillLearner(t, c, leader, n4, "after the ended request")
}

// TestPromotionOnAStoppingMemberIsUnavailable: a leader that stops while it
// waits to hear from the learner has not refused the promotion either: it
// says it is stopping (unavailable, retry on another), with the last
// look's reason, and n4 stays a learner.
func TestPromotionOnAStoppingMemberIsUnavailable(t *testing.T) {
	ctx := ctxT(t, 90*time.Second)
	c, leader, n4 := learnerCluster(t, ctx)
	silence(t, c, leader, n4)
	err := promoteInterrupted(t, c, ctx, leader, n4, func() { c.Stop(leader) })
	if api.CodeOf(err) != api.CodeUnavailable || !strings.Contains(err.Error(), "this member is stopping") || !strings.Contains(err.Error(), "has not heard from it") {
		t.Fatalf("promote the isolated n4 on a leader that stops mid-wait: %v; want unavailable, this member is stopping, with the last look's reason", err)
	}
	requireStillLearner(t, c, c.Others(leader, n4)[0], n4, "after the stop")
}

// requireStillLearner fails the test unless, as member at has it, the
// three first members are the voters and n4 is still a learner.
func requireStillLearner(t *testing.T, c *Cluster, at, n4 int, when string) {
	t.Helper()
	voters := sortedIDs(c.Nodes[0].ID, c.Nodes[1].ID, c.Nodes[2].ID)
	if !c.shardConfigsAre(at, 1, voters, []uint64{c.Nodes[n4].ID}) {
		v, l := c.Nodes[at].Server.ShardConfig(0)
		t.Fatalf("%s, as %s has it: voters %v learners %v; want n4 still a learner", when, c.Nodes[at].Name, v, l)
	}
}

// promoteInterrupted asks leader to promote the silent learner n4 with
// ctx, lets three ticks of its wait to hear from n4 pass, then runs
// interrupt (a cancel, a stop) and returns the call's answer, with virtual
// time standing still from then on.
func promoteInterrupted(t *testing.T, c *Cluster, ctx context.Context, leader, n4 int, interrupt func()) error {
	t.Helper()
	armed := c.opts.Time.Pending()
	return answerInHeldTime(t, func() error {
		_, err := c.Nodes[leader].Server.PromoteMember(ctx, c.Nodes[n4].ID)
		return err
	}, func() {
		awaitArmed(c, armed+1) // the call's pause between looks
		c.advanceGently(3 * c.opts.TickInterval)
		interrupt()
	})
}

// awaitArmed waits, with virtual time standing still, until n timers are
// armed on the cluster's clock: a call under test that arms one to pause
// is then waiting on it, so the time the test advances next falls inside
// the call's wait. If none comes within 5 s of real time (another timer
// fired or was stopped meanwhile), it goes on, and the test's own checks
// say what happened.
func awaitArmed(c *Cluster, n int) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = c.opts.Time.BlockUntil(ctx, n)
}

// answerInHeldTime runs call on its own goroutine, then, once that
// goroutine runs, before (which may advance virtual time or stop a member
// under the call), then waits up to 20 s of real time for the call's answer
// with virtual time standing still.
func answerInHeldTime(t *testing.T, call func() error, before func()) error {
	t.Helper()
	done := make(chan error, 1)
	started := make(chan struct{})
	go func() {
		close(started)
		done <- call()
	}()
	<-started // a loaded machine may run the goroutine late: before must not act ahead of the call
	before()
	select {
	case err := <-done:
		return err
	case <-time.After(20 * time.Second):
		t.Fatal("no answer within 20 s with virtual time standing still")
		return nil
	}
}

// waitHealthy advances virtual time until the leader counts every one of
// members healthy (recently heard from and replicating).
func waitHealthy(t *testing.T, c *Cluster, leader int, members ...int) {
	t.Helper()
	if !c.AdvanceUntil(10*time.Second, func() bool {
		for _, i := range members {
			if !c.Nodes[leader].Server.PeerHealthy(c.Nodes[i].ID) {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("the leader %s does not count every member healthy", c.Nodes[leader].Name)
	}
}

// removeWhileAdvancing asks the leader to remove member victim
// (answerWhileAdvancing).
func removeWhileAdvancing(t *testing.T, ctx context.Context, c *Cluster, leader, victim int, during func(ticks int)) (time.Duration, error) {
	t.Helper()
	return answerWhileAdvancing(t, c, func() error {
		return c.Nodes[leader].Server.RemoveMember(ctx, c.Nodes[victim].ID)
	}, during)
}

// silence cuts node i off and advances virtual time over two election
// timeouts, gently (each tick's messages land before the next: ticked back
// to back, the leader's other followers could fall silent too and the
// leader step down), so that the leader's last quorum check found i
// silent; it returns the election timeout.
func silence(t *testing.T, c *Cluster, leader, i int) time.Duration {
	t.Helper()
	election := time.Duration(c.opts.ElectionTicks) * c.opts.TickInterval
	c.Net.Isolate(c.Nodes[i].ID)
	c.advanceGently(2 * election)
	if st := c.Status(leader); st.Role != "leader" {
		t.Fatalf("%s stopped leading while %s was cut off (%+v): the test needs one leader throughout", c.Nodes[leader].Name, c.Nodes[i].Name, st)
	}
	return election
}

// silentVoterCluster starts three voters in virtual time without quiescing
// and waits until the leader counts the two others healthy: one to fall
// silent, one to remove.
func silentVoterCluster(t *testing.T) (c *Cluster, leader, silent, victim int) {
	t.Helper()
	c = New(t, 3, Options{Time: clock.NewFake(time.Unix(1_700_000_000, 0)), NoQuiesce: []string{"n1", "n2", "n3"}})
	leader = c.WaitLeader(10 * time.Second)
	others := c.Others(leader)
	silent, victim = others[0], others[1]
	waitHealthy(t, c, leader, silent, victim)
	return c, leader, silent, victim
}

// TestRemovalHearsFromTheVotersAgain: removing a voter of three needs the
// other two healthy. One of them silent across the leader's quorum check,
// and back while the removal waits, counts again: the removal goes through.
func TestRemovalHearsFromTheVotersAgain(t *testing.T) {
	ctx := ctxT(t, 90*time.Second)
	c, leader, silent, victim := silentVoterCluster(t)
	election := silence(t, c, leader, silent)
	took, err := removeWhileAdvancing(t, ctx, c, leader, victim, func(ticks int) {
		if ticks == 3 {
			c.Net.Heal()
		}
	})
	if err != nil {
		t.Fatalf("remove %s with %s back three ticks after the removal asked: %v", c.Nodes[victim].Name, c.Nodes[silent].Name, err)
	}
	// Within an election timeout of the heal in principle; twice that
	// leaves room for a loaded machine, whose goroutines lag the ticks.
	if took > 2*election {
		t.Fatalf("the removal took %v of virtual time, more than two election timeouts (%v each)", took, election)
	}
	want := sortedIDs(c.Nodes[leader].ID, c.Nodes[silent].ID)
	if !c.AdvanceUntil(10*time.Second, func() bool { return c.shardConfigsAre(leader, 1, want, nil) }) {
		v, l := c.Nodes[leader].Server.ShardConfig(0)
		t.Fatalf("after the removal: voters %v learners %v; want %v", v, l, want)
	}
}

// TestRemovalRefusedWhileAVoterIsSilent: with one of the two voters that
// would remain silent for an election timeout after the removal asks, the
// removal is refused for want of a healthy quorum, and nothing changes.
func TestRemovalRefusedWhileAVoterIsSilent(t *testing.T) {
	ctx := ctxT(t, 90*time.Second)
	c, leader, silent, victim := silentVoterCluster(t)
	election := silence(t, c, leader, silent)
	took, err := removeWhileAdvancing(t, ctx, c, leader, victim, func(int) {})
	if api.CodeOf(err) != api.CodePreconditionFailed || !strings.Contains(err.Error(), "healthy voters of 2, below a quorum of 2") {
		t.Fatalf("remove %s with %s silent: %v; want precondition_failed, 1 healthy voter of 2", c.Nodes[victim].Name, c.Nodes[silent].Name, err)
	}
	if took < election {
		t.Fatalf("refused after %v of virtual time, before an election timeout (%v) to hear from %s", took, election, c.Nodes[silent].Name)
	}
	if !c.shardConfigsAre(leader, 1, sortedIDs(c.IDs(0, 1, 2)...), nil) {
		v, l := c.Nodes[leader].Server.ShardConfig(0)
		t.Fatalf("after the refusal: voters %v learners %v; want all three", v, l)
	}
}

// TestRemovalOfTheLastVoterRefusedAtOnce: a refusal that no wait can
// change, removing the only voter, does not wait for the leader's view.
// Virtual time stands still while the call runs, so a call that waited for
// even one tick would never answer.
func TestRemovalOfTheLastVoterRefusedAtOnce(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	c := New(t, 1, Options{Time: clock.NewFake(time.Unix(1_700_000_000, 0))})
	leader := c.WaitLeader(10 * time.Second)
	err := answerInHeldTime(t, func() error { return c.Nodes[leader].Server.RemoveMember(ctx, c.Nodes[leader].ID) }, func() {})
	if api.CodeOf(err) != api.CodePreconditionFailed || !strings.Contains(err.Error(), "last voter") {
		t.Fatalf("remove the only voter: %v; want precondition_failed, the last voter", err)
	}
}
