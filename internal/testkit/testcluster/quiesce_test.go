package testcluster

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/clock"
	"github.com/latch-io/latch/internal/placement"
	"github.com/latch-io/latch/internal/server"
)

// Quiescing idle shard groups (internal/raftnode "Quiescing",
// internal/server quiesce.go): every shard but the meta group (shard 0)
// stops ticking once idle.

// quiescedShards lists the shards quiesced on node i.
func (c *Cluster) quiescedShards(i int) []int {
	var out []int
	for _, sh := range c.Nodes[i].Server.ShardStatuses() {
		if sh.Quiesced {
			out = append(out, sh.Shard)
		}
	}
	return out
}

// idleShardsQuiesced reports whether every shard is led by a running node
// all running nodes agree on, and every shard but the meta group is
// quiesced on every running node (the meta group never is).
func (c *Cluster) idleShardsQuiesced(shards int) bool {
	if !c.everyShardLed(shards) {
		return false
	}
	for _, i := range c.Running() {
		got := c.quiescedShards(i)
		if len(got) != shards-1 || got[0] != 1 {
			return false
		}
	}
	return true
}

// describeQuiesced says, per running node, which shards it has quiesced.
func (c *Cluster) describeQuiesced() string {
	out := ""
	for _, i := range c.Running() {
		out += fmt.Sprintf(" %s: leaders %v quiesced %v;", c.Nodes[i].Name, c.shardLeaders(i), c.quiescedShards(i))
	}
	return out
}

// advanceGently advances virtual time by d a tick at a time, letting the
// messages of each tick land (a millisecond of real time) before the next:
// Advance ticks back to back, and under -race the meta group's heartbeats
// can then fall an election timeout behind and elect anew, which would
// blur whether quiesced shards stay put.
func (c *Cluster) advanceGently(d time.Duration) {
	c.t.Helper()
	for ; d > 0; d -= c.opts.TickInterval {
		c.Advance(min(d, c.opts.TickInterval))
		time.Sleep(time.Millisecond)
	}
}

// dirInShard returns a directory whose children live in shard k.
func dirInShard(t *testing.T, m placement.Map, k int) string {
	t.Helper()
	for n := range 10000 {
		if dir := fmt.Sprintf("/q%d", n); m.ChildShard(dir) == k {
			return dir
		}
	}
	t.Fatalf("no directory with its children in shard %d", k)
	return ""
}

// virtualQuiesceCluster starts members members with shards shards in
// virtual time and waits until the leaderships are balanced and the idle
// shards quiesced.
func virtualQuiesceCluster(t *testing.T, members, shards int) *Cluster {
	t.Helper()
	c := New(t, members, Options{Shards: shards, Time: clock.NewFake(time.Unix(1_700_000_000, 0))})
	start := c.Now()
	// Elections, leader balancing (a transfer per round) and a few idle ticks.
	if !c.AdvanceUntil(60*time.Second, func() bool { return c.idleShardsQuiesced(shards) && c.balancedLeaders(min(members, shards)) }) {
		t.Fatalf("idle shards did not all quiesce with balanced leaders:%s", c.describeQuiesced())
	}
	t.Logf("every idle shard quiesced %v (virtual) after start", c.Now().Sub(start))
	return c
}

// TestQuiesceIdleShards: in an idle 3-member cluster of 8 shards every
// shard but the meta group quiesces on every member, the gauge says so,
// and it stays so (same leaders and terms) over several status report
// rounds. Writes to quiesced shards succeed (a create, whose directory is
// made in another shard, with virtual time running: the cross-shard steps
// back off on timers; an update of an existing key with virtual time
// standing still: no tick needed), and the shards quiesce again after them.
func TestQuiesceIdleShards(t *testing.T) {
	const shards = 8
	c := virtualQuiesceCluster(t, 3, shards)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range c.Nodes {
		if got, _ := scrapeMetrics(t, ctx, c.URL(i)).value("latch_raft_groups_quiesced"); got != shards-1 {
			t.Fatalf("%s: latch_raft_groups_quiesced %v, want %d", c.Nodes[i].Name, got, shards-1)
		}
	}
	before := c.Status(0).Shards
	c.advanceGently(4 * server.StatusReportInterval)
	if !c.idleShardsQuiesced(shards) {
		t.Fatalf("idle shards woke without traffic:%s", c.describeQuiesced())
	}
	for k, sh := range c.Status(0).Shards[1:] {
		if was := before[k+1]; sh.LeaderID != was.LeaderID || sh.Term != was.Term {
			t.Fatalf("shard %d: leader %s term %d after %v idle, was %s term %d",
				k+1, sh.LeaderID, sh.Term, 4*server.StatusReportInterval, was.LeaderID, was.Term)
		}
	}
	m, err := placement.New(shards)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, k := range []int{3, 6} {
		path := dirInShard(t, m, k) + "/x"
		paths = append(paths, path)
		if _, err := putAdvancing(ctx, c, 0, path); err != nil {
			t.Fatalf("put %s (shard %d): %v", path, k, err)
		}
	}
	if !c.AdvanceUntil(30*time.Second, func() bool { return c.idleShardsQuiesced(shards) && sameShardIndexes(c) }) {
		t.Fatalf("shards did not quiesce again after the writes:%s", c.describeQuiesced())
	}
	for _, path := range paths {
		for i := range c.Nodes {
			if _, err := Put(ctx, c.URL(i), path, c.Nodes[i].Name, ""); err != nil {
				t.Fatalf("update %s through %s with virtual time standing still: %v", path, c.Nodes[i].Name, err)
			}
		}
		if n, err := Get(ctx, c.URL(0), path, api.Linearizable); err != nil || n.Value != c.Nodes[2].Name {
			t.Fatalf("get %s: %+v, %v; want the last update", path, n, err)
		}
	}
	if !c.AdvanceUntil(30*time.Second, func() bool { return c.idleShardsQuiesced(shards) && sameShardIndexes(c) }) {
		t.Fatalf("shards did not quiesce again after the updates:%s", c.describeQuiesced())
	}
}

// mostQuiescedLeader returns the member leading the most shards other than
// shard 0 (quiesced ones), and those shards.
func (c *Cluster) mostQuiescedLeader() (int, []int) {
	led := map[string][]int{}
	for k, id := range c.shardLeaders(c.Running()[0]) {
		if k != 0 {
			led[id] = append(led[id], k)
		}
	}
	best := -1
	var shards []int
	for id, ks := range led {
		if i := c.indexOfFormatted(id); i >= 0 && len(ks) > len(shards) {
			best, shards = i, ks
		}
	}
	return best, shards
}

func (c *Cluster) indexOfFormatted(id string) int {
	for i, n := range c.Nodes {
		if api.FormatID(n.ID) == id {
			return i
		}
	}
	return -1
}

// TestQuiescedLeaderLost: the member leading quiesced shards is crashed, or
// cut off by a partition; the others elect new leaders for those shards
// within the status report staleness plus a few election timeouts (of
// virtual time), and writes to them succeed. The member then comes back
// (restarted, or the partition healed): every shard agrees on one leader,
// every member has every entry, and the idle shards quiesce again.
func TestQuiescedLeaderLost(t *testing.T) {
	for _, fault := range []string{"crash", "partition"} {
		t.Run(fault, func(t *testing.T) {
			const shards = 4
			c := virtualQuiesceCluster(t, 3, shards)
			victim, led := c.mostQuiescedLeader()
			if victim < 0 {
				t.Fatalf("no member leads a quiesced shard:%s", c.describeQuiesced())
			}
			t.Logf("%s of %s, which leads quiesced shards %v", fault, c.Nodes[victim].Name, led)
			start := c.Now()
			survivors := c.Others(victim)
			switch fault {
			case "crash":
				c.Crash(victim)
			case "partition":
				c.Net.Partition(c.IDs(victim), c.IDs(survivors...))
			}
			victimID := api.FormatID(c.Nodes[victim].ID)
			newLeaders := func() bool {
				first := c.shardLeaders(survivors[0])
				for _, k := range led {
					for _, i := range survivors {
						if got := c.shardLeaders(i)[k]; got == "" || got == victimID || got != first[k] {
							return false
						}
					}
				}
				return true
			}
			if !c.AdvanceUntil(60*time.Second, newLeaders) {
				t.Fatalf("survivors did not elect leaders for shards %v:%s", led, c.describeQuiesced())
			}
			took := c.Now().Sub(start)
			electionTimeout := time.Duration(c.opts.ElectionTicks) * c.opts.TickInterval
			limit := 3*server.StatusReportInterval + server.StatusReportInterval + 10*electionTimeout
			t.Logf("new leaders for shards %v after %v (virtual)", led, took)
			if took > limit {
				t.Fatalf("new leaders took %v (virtual), want at most %v", took, limit)
			}
			m, err := placement.New(shards)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			for _, k := range led {
				path := dirInShard(t, m, k) + "/after"
				if _, err := putAdvancing(ctx, c, survivors[0], path); err != nil {
					t.Fatalf("put %s (shard %d) after the %s: %v", path, k, fault, err)
				}
			}
			switch fault {
			case "crash":
				c.Restart(victim)
			case "partition":
				c.Net.Heal()
			}
			if !c.AdvanceUntil(60*time.Second, func() bool { return c.idleShardsQuiesced(shards) && sameShardIndexes(c) }) {
				t.Fatalf("after the %s ended, the members did not agree, catch up and quiesce:%s", fault, c.describeQuiesced())
			}
		})
	}
}

// putAdvancing puts path through node i while virtual time runs, again
// after a 503 (a write pending while its shard's leader changes has an
// unknown outcome; a client retries it), until it succeeds or ctx ends.
func putAdvancing(ctx context.Context, c *Cluster, i int, path string) (api.Node, error) {
	type result struct {
		n   api.Node
		err error
	}
	done := make(chan result, 1)
	go func() {
		for {
			n, err := Put(ctx, c.URL(i), path, "v", "")
			var apiErr *api.Error
			if err != nil && errors.As(err, &apiErr) && apiErr.Code == api.CodeUnavailable && ctx.Err() == nil {
				continue
			}
			done <- result{n, err}
			return
		}
	}()
	var r result
	if !c.AdvanceUntil(30*time.Second, func() bool {
		select {
		case r = <-done:
			return true
		default:
			return false
		}
	}) {
		return api.Node{}, fmt.Errorf("put %s did not return", path)
	}
	return r.n, r.err
}

// TestQuiescedShardsMemberRestarts: a member stops while the shards are
// quiesced; writes reach every shard without it (the written shards cannot
// quiesce while it lags); it restarts, catches up in every shard, and every
// idle shard quiesces again on every member.
func TestQuiescedShardsMemberRestarts(t *testing.T) {
	const shards = 4
	c := virtualQuiesceCluster(t, 3, shards)
	victim := (c.leader() + 1) % 3
	c.Stop(victim)
	m, err := placement.New(shards)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for k := 1; k < shards; k++ {
		path := dirInShard(t, m, k) + "/while-down"
		if _, err := putAdvancing(ctx, c, c.Others(victim)[0], path); err != nil {
			t.Fatalf("put %s (shard %d) with %s down: %v", path, k, c.Nodes[victim].Name, err)
		}
	}
	c.Restart(victim)
	if !c.AdvanceUntil(60*time.Second, func() bool { return c.idleShardsQuiesced(shards) && sameShardIndexes(c) }) {
		t.Fatalf("the restarted member did not catch up and quiesce:%s", c.describeQuiesced())
	}
	for k := 1; k < shards; k++ {
		path := dirInShard(t, m, k) + "/while-down"
		if n, err := c.LocalGet(victim, path); err != nil || n.Value != "v" {
			t.Fatalf("restarted member has %s = %+v, %v", path, n, err)
		}
	}
}

// TestQuiescedShardsLeaderBalance: with 8 shards on 3 members, the
// leaderships end balanced (2 or 3 each) with every idle shard quiesced,
// and stay so: the balancer does not keep waking groups. After a member
// restarts (leading nothing), the balance returns and the shards quiesce
// again.
func TestQuiescedShardsLeaderBalance(t *testing.T) {
	const shards, members = 8, 3
	c := virtualQuiesceCluster(t, members, shards)
	leaders := c.shardLeaders(0)
	c.advanceGently(3 * server.StatusReportInterval)
	if !c.balancedLeaders(members) || !c.idleShardsQuiesced(shards) || fmt.Sprint(c.shardLeaders(0)) != fmt.Sprint(leaders) {
		t.Fatalf("balance or quiescence did not hold: leaders %v, were %v:%s", c.shardLeaders(0), leaders, c.describeQuiesced())
	}
	victim := (c.leader() + 1) % members
	c.Stop(victim)
	if !c.AdvanceUntil(60*time.Second, func() bool { return c.everyShardLed(shards) }) {
		t.Fatalf("survivors did not take every shard:%s", c.describeQuiesced())
	}
	c.Restart(victim)
	if !c.AdvanceUntil(60*time.Second, func() bool { return c.balancedLeaders(members) && c.idleShardsQuiesced(shards) }) {
		t.Fatalf("balance and quiescence did not return after the restart: %v:%s", c.leadCounts(0), c.describeQuiesced())
	}
}

// TestQuiesceWithMembersWithoutIt: two of three members run as a latch
// without quiescing (a rolling upgrade's older members: they drop the
// Quiesce). The upgraded member's shards try to quiesce, get no
// acknowledgement, tick again before the others' election timeout and hold
// off: no shard elects anew over many election timeouts, and writes go on.
func TestQuiesceWithMembersWithoutIt(t *testing.T) {
	const shards, members = 6, 3 // balanced, each member leads 2, so n1 a shard besides the meta group's
	c := New(t, members, Options{Shards: shards, Time: clock.NewFake(time.Unix(1_700_000_000, 0)), NoQuiesce: []string{"n2", "n3"}})
	c.WaitBalanced(60 * time.Second)
	c.advanceGently(2 * server.StatusReportInterval) // the balancer's last moves settle
	before := c.Status(0).Shards
	if before[1].LeaderID == "" {
		t.Fatalf("no leaders: %+v", before)
	}
	led := 0
	for _, sh := range before[1:] {
		if sh.LeaderID == api.FormatID(c.Nodes[0].ID) {
			led++
		}
	}
	if led == 0 {
		t.Fatalf("n1, the member that quiesces, leads no shard: %+v", before)
	}
	c.advanceGently(4 * server.StatusReportInterval)
	for k, sh := range c.Status(0).Shards {
		if was := before[k]; sh.LeaderID != was.LeaderID || sh.Term != was.Term {
			t.Fatalf("shard %d: leader %s term %d, was %s term %d: an election where the quiesce was not acknowledged",
				k, sh.LeaderID, sh.Term, was.LeaderID, was.Term)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := putAdvancing(ctx, c, 1, "/after-idle"); err != nil {
		t.Fatalf("put: %v", err)
	}
}
