package testcluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/clock"
	"github.com/latch-io/latch/internal/placement"
	"github.com/latch-io/latch/internal/server"
)

// TestShardsElectEveryShardAndServeWrites runs a 3-member cluster with 4
// shards: every shard elects a leader that every member agrees on, writes of
// top-level keys are acknowledged and read back linearizably from every
// member, and every member applies the same index in every shard.
func TestShardsElectEveryShardAndServeWrites(t *testing.T) {
	const shards = 4
	c := New(t, 3, Options{Shards: shards})
	if !waitFor(20*time.Second, func() bool { return c.everyShardLed(shards) }) {
		t.Fatalf("not every shard has an agreed leader: %v / %v / %v", c.shardLeaders(0), c.shardLeaders(1), c.shardLeaders(2))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for k := range 10 {
		if _, err := Put(ctx, c.URL(k%3), fmt.Sprintf("/top-%d", k), fmt.Sprint(k), ""); err != nil {
			t.Fatalf("put /top-%d: %v", k, err)
		}
	}
	for i := range c.Nodes {
		for k := range 10 {
			n, err := Get(ctx, c.URL(i), fmt.Sprintf("/top-%d", k), "linearizable")
			if err != nil || n.Value != fmt.Sprint(k) {
				t.Fatalf("node %d: get /top-%d = %+v, %v", i, k, n, err)
			}
		}
	}
	st := c.Status(0)
	if len(st.Shards) != shards {
		t.Fatalf("status lists %d shards, want %d: %+v", len(st.Shards), shards, st.Shards)
	}
	for k, sh := range st.Shards {
		if sh.Shard != k || sh.LeaderID == "" || sh.Term == 0 || sh.CommitIndex == 0 {
			t.Errorf("shard %d status %+v: want its number, a leader, a term and a commit index", k, sh)
		}
	}
	if !waitFor(10*time.Second, func() bool { return sameShardIndexes(c) }) {
		t.Fatalf("members did not apply the same index in every shard: %+v / %+v / %+v",
			c.Status(0).Shards, c.Status(1).Shards, c.Status(2).Shards)
	}
}

// sameShardIndexes reports whether every running node applied each shard
// up to the same index, and that index is its commit index.
func sameShardIndexes(c *Cluster) bool {
	running := c.Running()
	first := c.Nodes[running[0]].Server.ShardStatuses()
	for _, i := range running {
		for k, sh := range c.Nodes[i].Server.ShardStatuses() {
			if sh.AppliedIndex != first[k].AppliedIndex || sh.AppliedIndex != sh.CommitIndex {
				return false
			}
		}
	}
	return true
}

// TestShardsKillMemberLeadingSeveral crashes the member that leads the most
// shards (at least two): every shard elects a leader among the survivors
// and takes writes, and the member, restarted, catches up in every shard.
func TestShardsKillMemberLeadingSeveral(t *testing.T) {
	const shards = 4
	c := New(t, 3, Options{Shards: shards})
	victim := -1
	if !waitFor(20*time.Second, func() bool {
		if !c.everyShardLed(shards) {
			return false
		}
		for id, n := range c.leadCounts(0) {
			if n >= 2 {
				victim = c.Index(mustParseID(t, id))
				return true
			}
		}
		return false
	}) {
		t.Fatalf("no member leads two shards: %v", c.shardLeaders(0))
	}
	led := c.leadCounts(0)[api.FormatID(c.Nodes[victim].ID)]
	t.Logf("crashing %s, which leads %d of %d shards", c.Nodes[victim].Name, led, shards)
	c.Crash(victim)
	if !waitFor(20*time.Second, func() bool { return c.everyShardLed(shards) }) {
		t.Fatalf("survivors did not elect a leader in every shard: %v", c.shardLeaders(c.Others(victim)[0]))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	survivor := c.Others(victim)[0]
	if _, err := Put(ctx, c.URL(survivor), "/after-crash", "v", ""); err != nil {
		t.Fatalf("put after the crash: %v", err)
	}
	c.Restart(victim)
	if !waitFor(20*time.Second, func() bool { return c.everyShardLed(shards) && sameShardIndexes(c) }) {
		t.Fatalf("restarted member did not catch up in every shard: %+v vs %+v",
			c.Status(victim).Shards, c.Status(survivor).Shards)
	}
	if n, err := Get(ctx, c.URL(victim), "/after-crash", "linearizable"); err != nil || n.Value != "v" {
		t.Fatalf("restarted member reads /after-crash = %+v, %v", n, err)
	}
}

func mustParseID(t *testing.T, s string) uint64 {
	t.Helper()
	id, err := api.ParseID(s)
	if err != nil {
		t.Fatalf("parse id %q: %v", s, err)
	}
	return id
}

// TestShardsRestartWithAnotherCountRefused restarts a member of a 4-shard
// cluster with --shards 8 and with --shards 1: both are refused with an
// error naming the flag and both counts, and the member then restarts with
// 4 and rejoins every shard.
func TestShardsRestartWithAnotherCountRefused(t *testing.T) {
	c := New(t, 3, Options{Shards: 4})
	c.Stop(2)
	for _, other := range []int{8, 1} {
		c.opts.Shards = other
		_, err := server.New(c.serverConfig(2))
		want := fmt.Sprintf("was created with --shards 4, not %d: the shard count is fixed", other)
		if !errors.Is(err, server.ErrShardCount) || err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("restart with --shards %d: %v, want ErrShardCount saying %q", other, err, want)
		}
	}
	c.opts.Shards = 4
	c.Restart(2)
	if !waitFor(20*time.Second, func() bool { return c.everyShardLed(4) && sameShardIndexes(c) }) {
		t.Fatalf("member restarted with the right count did not rejoin: %+v", c.Status(2).Shards)
	}
}

// TestShardsLeaderBalance runs 8 shards on 3 members in virtual time: the
// meta leader spreads the leaderships so each member leads 2 or 3; after a
// member restarts (leading nothing), the balance returns within a few
// balancer rounds.
func TestShardsLeaderBalance(t *testing.T) {
	const shards, members = 8, 3
	c := New(t, members, Options{Shards: shards, Time: clock.NewFake(time.Unix(1_700_000_000, 0))})
	balanced := func() bool {
		if !c.everyShardLed(shards) {
			return false
		}
		counts := c.leadCounts(c.Running()[0])
		if len(counts) != members {
			return false
		}
		for _, n := range counts {
			if n < shards/members || n > (shards+members-1)/members {
				return false
			}
		}
		return true
	}
	// A round is an election timeout (10 ticks); a transfer takes a few ticks.
	if !c.AdvanceUntil(60*time.Second, balanced) {
		t.Fatalf("leaders not balanced: %v", c.leadCounts(0))
	}
	victim := (c.leader() + 1) % members
	c.Stop(victim)
	// The stopped member's shards may be quiesced: the survivors notice it
	// gone from its status reports (3 s) rather than an election timeout.
	if !c.AdvanceUntil(60*time.Second, func() bool { return c.everyShardLed(shards) }) {
		t.Fatalf("survivors did not take every shard: %v", c.shardLeaders(c.Others(victim)[0]))
	}
	start := c.Now()
	c.Restart(victim)
	if !c.AdvanceUntil(60*time.Second, balanced) {
		t.Fatalf("balance did not return after the restart: %v", c.leadCounts(0))
	}
	took := c.Now().Sub(start)
	t.Logf("balance returned %v (virtual) after the restart: %v", took, c.leadCounts(0))
	if rounds := took / (time.Duration(10) * c.opts.TickInterval); rounds > 30 {
		t.Fatalf("balance took %d balancer rounds after the restart, want a few", rounds)
	}
}

// shardConfigsAre reports whether node i sees, in every shard, exactly the
// given voters and learners.
func (c *Cluster) shardConfigsAre(i, shards int, voters, learners []uint64) bool {
	for k := range shards {
		v, l := c.Nodes[i].Server.ShardConfig(k)
		if !slices.Equal(v, voters) || !slices.Equal(l, learners) {
			return false
		}
	}
	return true
}

func sortedIDs(ids ...uint64) []uint64 {
	slices.Sort(ids)
	return ids
}

// TestShardsMembershipReachesEveryGroup adds a learner to a 4-shard
// cluster through the membership API: it becomes a learner of every shard
// and catches up in each; promoted, it becomes a voter of every shard;
// then a removed member leaves every shard's configuration, and the cluster
// keeps taking writes.
func TestShardsMembershipReachesEveryGroup(t *testing.T) {
	const shards = 4
	c := New(t, 3, Options{Shards: shards})
	ctx := ctxT(t, 90*time.Second)
	leader := c.WaitLeader(10 * time.Second)
	var added api.Member
	if err := Do(ctx, "POST", c.URL(leader), "/v1/cluster/members", nil,
		map[string]any{"name": "n4", "peer_url": c.PeerURL("n4"), "learner": true}, &added); err != nil || !added.Learner {
		t.Fatalf("add learner: %+v, %v", added, err)
	}
	n4 := c.AddNode("n4")
	ids := []uint64{c.Nodes[0].ID, c.Nodes[1].ID, c.Nodes[2].ID}
	if !waitFor(30*time.Second, func() bool {
		return c.shardConfigsAre(leader, shards, sortedIDs(ids...), []uint64{c.Nodes[n4].ID}) && sameShardIndexes(c)
	}) {
		t.Fatalf("n4 is not a caught-up learner of every shard: %+v", c.Status(n4).Shards)
	}
	var promoted api.Member
	if err := Do(ctx, "POST", c.URL(leader), "/v1/cluster/members/n4/promote", nil, nil, &promoted); err != nil || promoted.Learner {
		t.Fatalf("promote n4: %+v, %v", promoted, err)
	}
	all := sortedIDs(append(slices.Clone(ids), c.Nodes[n4].ID)...)
	if !waitFor(30*time.Second, func() bool { return c.shardConfigsAre(leader, shards, all, nil) }) {
		v, l := c.Nodes[leader].Server.ShardConfig(shards - 1)
		t.Fatalf("n4 did not become a voter of every shard: last shard voters %v learners %v", v, l)
	}
	leader = c.WaitLeader(10 * time.Second)
	victim := (leader + 1) % 3
	if err := Do(ctx, "DELETE", c.URL(leader), "/v1/cluster/members/"+c.Nodes[victim].Name, nil, nil, nil); err != nil {
		t.Fatalf("remove %s: %v", c.Nodes[victim].Name, err)
	}
	var left []uint64
	for _, id := range all {
		if id != c.Nodes[victim].ID {
			left = append(left, id)
		}
	}
	if !waitFor(30*time.Second, func() bool { return c.shardConfigsAre(leader, shards, left, nil) }) {
		t.Fatalf("the removal did not reach every shard: %+v", c.Status(leader).Shards)
	}
	if !waitFor(10*time.Second, func() bool { return c.Nodes[victim].Server.Err() != nil }) {
		t.Fatalf("removed member %s did not stop", c.Nodes[victim].Name)
	}
	c.Stop(victim)
	if _, err := Put(ctx, c.URL(n4), "/after-membership", "x", ""); err != nil {
		t.Fatalf("write after the membership changes: %v", err)
	}
	if !waitFor(20*time.Second, func() bool { return c.everyShardLed(shards) && sameShardIndexes(c) }) {
		t.Fatalf("survivors disagree: %+v / %+v", c.Status(leader).Shards, c.Status(n4).Shards)
	}
}

var placement4, _ = placement.New(4)

// TestShardsIdleGroupsDoNotPinTheWAL writes to one shard of a 4-shard
// cluster with small WAL segments: the idle shards snapshot when they hold
// back the oldest segment, so the WAL's segments are released and their
// count stays bounded instead of growing with every write.
func TestShardsIdleGroupsDoNotPinTheWAL(t *testing.T) {
	c := New(t, 3, Options{Shards: 4, WALSegmentSize: 16 << 10, SnapshotEvery: 50})
	ctx := ctxT(t, 60*time.Second)
	leader := c.WaitLeader(10 * time.Second)
	value := strings.Repeat("v", 500)
	for k := range 300 {
		if _, err := Put(ctx, c.URL(leader), fmt.Sprintf("/busy-%d", k%20), value, ""); err != nil {
			t.Fatalf("put %d: %v", k, err)
		}
	}
	segments := func(i int) int {
		names, err := c.Nodes[i].FS.List("/data/wal")
		if err != nil {
			t.Fatalf("list the WAL of %s: %v", c.Nodes[i].Name, err)
		}
		return len(names)
	}
	// 300 writes of 500 bytes fill about 10 segments of 16 KiB.
	if !waitFor(20*time.Second, func() bool { return segments(0) <= 3 && segments(1) <= 3 && segments(2) <= 3 }) {
		t.Fatalf("WAL segments not released: %d, %d, %d", segments(0), segments(1), segments(2))
	}
}

// TestShardsTxnCreateNeedsAnOpenDirectory: with several shards, a
// transaction's create under a directory whose children live in another
// shard than its node, with no child there yet, is refused with
// invalid_argument saying to create the first child outside the
// transaction (docs/api.md), not 503; once a plain create opened the
// directory there, the same transaction applies.
func TestShardsTxnCreateNeedsAnOpenDirectory(t *testing.T) {
	const shards = 4
	c := New(t, 1, Options{Shards: shards})
	if !waitFor(20*time.Second, func() bool { return c.everyShardLed(shards) }) {
		t.Fatalf("not every shard has a leader: %v", c.shardLeaders(0))
	}
	m, err := placement.New(shards)
	if err != nil {
		t.Fatal(err)
	}
	dir := ""
	for i := 0; dir == ""; i++ {
		if p := fmt.Sprintf("/t%d", i); m.ChildShard(p) != m.Shard(p) {
			dir = p
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := Put(ctx, c.URL(0), dir, "", ""); err != nil {
		t.Fatal(err)
	}
	create := func(name string) error {
		_, err := c.Nodes[0].Server.Txn(ctx, server.TxnRequest{Ops: []server.TxnOp{{Kind: server.TxnCreate, Path: dir + "/" + name, Value: []byte("v")}}})
		return err
	}
	if err := create("a"); api.CodeOf(err) != api.CodeInvalidArgument || !strings.Contains(err.Error(), "create the first child outside the transaction") {
		t.Fatalf("transaction create under %s, not open in its children's shard: %v; want invalid_argument", dir, err)
	}
	if _, err := Put(ctx, c.URL(0), dir+"/first", "", ""); err != nil {
		t.Fatal(err)
	}
	if err := create("a"); err != nil {
		t.Fatalf("transaction create once the directory is open: %v", err)
	}
}
