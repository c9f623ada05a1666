package testcluster

import (
	"time"

	"github.com/latch-io/latch/api"
)

// WaitBalanced waits until every one of the cluster's shards has a leader
// that the running members agree on and the leaderships are spread as the
// balancer leaves them (every member leads a shard, counts differ by at
// most one): a test that must not see a leader move under it starts
// there. It fails the test after timeout.
func (c *Cluster) WaitBalanced(timeout time.Duration) {
	c.t.Helper()
	shards := max(c.opts.Shards, 1)
	members := min(len(c.Running()), shards)
	balanced := func() bool { return c.everyShardLed(shards) && c.balancedLeaders(members) }
	if !c.AdvanceUntil(timeout, balanced) {
		c.t.Fatalf("leaders not balanced in %v: %v", timeout, c.leadCounts(c.Running()[0]))
	}
}

// shardLeaders returns, as node i sees them, each shard's leader id ("" for
// none).
func (c *Cluster) shardLeaders(i int) []string {
	var out []string
	for _, sh := range c.Nodes[i].Server.ShardStatuses() {
		out = append(out, sh.LeaderID)
	}
	return out
}

// everyShardLed reports whether the running nodes agree on one leader,
// among the running nodes, for each of the shards.
func (c *Cluster) everyShardLed(shards int) bool {
	running := c.Running()
	live := map[string]bool{}
	for _, i := range running {
		live[api.FormatID(c.Nodes[i].ID)] = true
	}
	first := c.shardLeaders(running[0])
	if len(first) != shards {
		return false
	}
	for _, i := range running {
		got := c.shardLeaders(i)
		for k := range first {
			if got[k] != first[k] || !live[got[k]] {
				return false
			}
		}
	}
	return true
}

// leadCounts counts the shards each node leads, as node i sees it.
func (c *Cluster) leadCounts(i int) map[string]int {
	counts := map[string]int{}
	for _, id := range c.shardLeaders(i) {
		counts[id]++
	}
	return counts
}

// balancedLeaders reports whether every member leads a shard and the
// counts of shards led differ by at most one (what the balancer aims at).
func (c *Cluster) balancedLeaders(members int) bool {
	counts := c.leadCounts(c.Running()[0])
	if len(counts) != members {
		return false
	}
	low, high := -1, 0
	for _, n := range counts {
		if low < 0 || n < low {
			low = n
		}
		high = max(high, n)
	}
	return high-low <= 1
}
