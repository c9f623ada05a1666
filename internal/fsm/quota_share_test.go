package fsm

import (
	"fmt"
	"testing"

	"github.com/latch-io/latch/api"
)

// usedUnder sums the usage under prefix over every shard.
func (c *cluster) usedUnder(prefix string) (used uint64) {
	for _, h := range c.shards {
		s, _ := h.f.QuotaShare(prefix)
		used += s.Nodes
	}
	return used
}

// fillSeq numbers the nodes fillWithRoom makes, so none is made twice.
var fillSeq int

// fillWithRoom creates up to n children of dir, moving room to dir's
// children's shard on each refusal as the server does; it returns how
// many were made.
func (c *cluster) fillWithRoom(dir string, n int) int {
	made := 0
	for range n {
		fillSeq++
		path := fmt.Sprintf("%s/f%d", dir, fillSeq)
		res := c.create(path, "")
		if res.Redo == RedoQuotaRoom {
			c.moveRoom(nil, c.m.ChildShard(dir), res.QuotaShort, nil)
			res = c.create(path, "")
		}
		if res.Err != nil {
			break
		}
		made++
	}
	return made
}

// quotaDirs makes /q and count directories under it whose children live
// in count different shards.
func (c *cluster) quotaDirs(count int) []string {
	c.shards[c.m.Shard("/q")].mustApply(put("/q", ""))
	var dirs []string
	seen := map[int]bool{}
	for i := 0; len(dirs) < count; i++ {
		d := fmt.Sprintf("/q/d%d", i)
		if res := c.create(d, ""); res.Err != nil {
			c.t.Fatal(res.Err)
		}
		if k := c.m.ChildShard(d); !seen[k] {
			seen[k] = true
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// TestQuotaSetCountsExistingNodes: a quota set over nodes that already
// exist in several shards counts them: the shards other than 0 start with
// their usage as allotment and shard 0 with the limit minus it, so filling
// any directory afterwards stops at the limit, not past it (the initial
// shares of limit/N let a shard holding none of the old nodes make its
// whole share on top of them).
func TestQuotaSetCountsExistingNodes(t *testing.T) {
	c := newCluster(t)
	dirs := c.quotaDirs(testShards)
	for i := range 30 {
		if res := c.create(fmt.Sprintf("%s/old%d", dirs[1], i), ""); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	const limit = 40
	c.setQuotaEverywhere("/q", limit, 0)
	at := c.usedUnder("/q")
	t.Logf("%d nodes under /q when the quota of %d is set", at, limit)
	c.checkRoom("/q", limit)
	for _, d := range dirs {
		c.fillWithRoom(d, 100)
		if used := c.usedUnder("/q"); used > limit {
			t.Fatalf("filling %s (shard %d) made %d nodes under /q, past the limit of %d", d, c.m.ChildShard(d), used, limit)
		}
		c.checkRoom("/q", limit)
	}
	if used := c.usedUnder("/q"); used != limit {
		t.Fatalf("the directories filled /q to %d of %d", used, limit)
	}
}

// TestQuotaSetAgainKeepsAllotments: setting a quota again with the same
// limits (a retried quota_set) changes no allotment, so the room moved to
// one shard and used there is not shared out again; a raised limit adds
// the increase to shard 0's allotment only.
func TestQuotaSetAgainKeepsAllotments(t *testing.T) {
	c := newCluster(t)
	dirs := c.quotaDirs(2)
	a, b := dirs[0], dirs[1]
	const limit = 40
	c.setQuotaEverywhere("/q", limit, 0)
	c.fillWithRoom(a, 100)
	if used := c.usedUnder("/q"); used != limit {
		t.Fatalf("%s filled /q to %d of %d", a, used, limit)
	}
	before := c.allotments("/q")
	c.setQuotaEverywhere("/q", limit, 0)
	if after := c.allotments("/q"); after != before {
		t.Fatalf("the same quota set again changed the allotments:\n%s\n%s", before, after)
	}
	c.fillWithRoom(b, 100)
	if used := c.usedUnder("/q"); used != limit {
		t.Fatalf("after the quota was set again, %s filled /q to %d of %d", b, used, limit)
	}
	c.setQuotaEverywhere("/q", limit+5, 0)
	c.checkRoom("/q", limit+5)
	for k, h := range c.shards[1:] {
		if s, _ := h.f.QuotaShare("/q"); fmt.Sprint(s.AllotNodes, s.Epoch) != fmt.Sprint(c.allotOf(before, k+1)) {
			t.Errorf("shard %d's allotment changed on a raise: %+v", k+1, s)
		}
	}
	if made := c.fillWithRoom(b, 100); made != 5 {
		t.Fatalf("a limit raised by 5 let %d more nodes in", made)
	}
}

// allotments lists every shard's allotment and epoch of the quota on
// prefix.
func (c *cluster) allotments(prefix string) string {
	var out string
	for k, h := range c.shards {
		s, _ := h.f.QuotaShare(prefix)
		out += fmt.Sprintf("shard %d: %d %d; ", k, s.AllotNodes, s.Epoch)
	}
	return out
}

func (c *cluster) allotOf(list string, k int) string {
	var allot, epoch uint64
	var got int
	for i := 0; i <= k; i++ {
		n, _ := fmt.Sscanf(list, "shard %d: %d %d; ", &got, &allot, &epoch)
		if n != 3 {
			return ""
		}
		list = list[len(fmt.Sprintf("shard %d: %d %d; ", got, allot, epoch)):]
	}
	return fmt.Sprint(allot, epoch)
}

// TestQuotaLoweredLimitStartsAnEpoch: a lowered limit drops the free room
// of every shard (a new epoch: each other shard keeps its usage as
// allotment, shard 0 the limit minus it), so no shard grows past the new
// limit with room given under the old one; below the usage shard 0's
// allotment is a debt (negative), it neither grows nor gives, and the
// others cannot grow either.
func TestQuotaLoweredLimitStartsAnEpoch(t *testing.T) {
	c := newCluster(t)
	dirs := c.quotaDirs(testShards)
	c.setQuotaEverywhere("/q", 40, 0)
	for _, d := range dirs {
		c.fillWithRoom(d, 3)
	}
	// Room spread out: every shard other than 0 has some free.
	epoch := c.shards[0].f.QuotaSynced()
	for k := 1; k < testShards; k++ {
		s0, _ := c.shards[0].f.QuotaShare("/q")
		if f := min(free(s0.AllotNodes, s0.Nodes), 4); f > 0 {
			c.shards[0].mustApply(give("/q", k, epoch, f, 0))
			c.finish(0, k)
		}
	}
	if c.freeRoom("/q", 0) == 0 {
		t.Fatal("no free room outside shard 0 before the limit is lowered")
	}
	used := c.usedUnder("/q")
	c.setQuotaEverywhere("/q", used, 0)
	c.checkRoom("/q", used)
	for _, d := range dirs {
		if made := c.fillWithRoom(d, 5); made != 0 {
			t.Fatalf("a limit lowered to the usage (%d) let %s make %d more", used, d, made)
		}
	}
	c.setQuotaEverywhere("/q", 2, 0)
	s0, _ := c.shards[0].f.QuotaShare("/q")
	if s0.AllotNodes >= 0 && int64(s0.Nodes) <= s0.AllotNodes {
		t.Fatalf("shard 0 after a limit far below the usage: %+v, want a debt", s0)
	}
	c.checkRoom2("/q", 2)
	c.shards[0].refused(give("/q", 1, s0.Epoch, 1, 0), api.CodeQuotaExceeded, RedoNone)
	for _, d := range dirs {
		if made := c.fillWithRoom(d, 5); made != 0 {
			t.Fatalf("with a debt, %s made %d more", d, made)
		}
	}
}

// freeRoom sums the free room of the quota on prefix in every shard but
// except.
func (c *cluster) freeRoom(prefix string, except int) (room uint64) {
	for k, h := range c.shards {
		if s, ok := h.f.QuotaShare(prefix); ok && k != except {
			room += free(s.AllotNodes, s.Nodes)
		}
	}
	return room
}

// checkRoom2 is checkRoom for a limit the usage may be above (set below
// it): the allotments plus transit are the limit.
func (c *cluster) checkRoom2(prefix string, limit uint64) {
	c.t.Helper()
	allotted, inTransit, _ := c.room(prefix)
	if allotted+int64(inTransit) != int64(limit) {
		c.t.Fatalf("quota on %q: %d allotted + %d in transit; the limit is %d", prefix, allotted, inTransit, limit)
	}
}

// TestQuotaRestoreCountsUsage: after a restore (Reseed of every shard,
// then ShareRestoredQuotas) the allotments are a new epoch's, from the
// usage of each shard: they sum to the limit and the usage cannot pass it.
func TestQuotaRestoreCountsUsage(t *testing.T) {
	c := newCluster(t)
	dirs := c.quotaDirs(testShards)
	for i, d := range dirs {
		for j := range 5 * i {
			c.create(fmt.Sprintf("%s/old%d", d, j), "")
		}
	}
	const limit = 50
	c.setQuotaEverywhere("/q", limit, 0)
	c.fillWithRoom(dirs[0], 3)
	states := make([]*FSM, 0, testShards)
	for _, h := range c.shards {
		if err := h.f.Reseed(h.index+100, nil); err != nil {
			t.Fatal(err)
		}
		h.index += 100
		states = append(states, h.f)
	}
	if err := ShareRestoredQuotas(states); err != nil {
		t.Fatal(err)
	}
	c.checkRoom("/q", limit)
	for _, d := range dirs {
		c.fillWithRoom(d, 100)
	}
	if used := c.usedUnder("/q"); used != limit {
		t.Fatalf("after a restore the directories filled /q to %d of %d", used, limit)
	}
	if err := ShareRestoredQuotas(states[:1]); err != nil {
		t.Fatalf("one shard: %v", err)
	}
}
