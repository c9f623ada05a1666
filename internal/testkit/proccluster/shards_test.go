package proccluster

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/testkit/testcluster"
)

// shardLeaders returns the leader of each shard as member i reports it
// (nil if it does not answer).
func (c *Cluster) shardLeaders(i int) []string {
	st, err := c.Status(i)
	if err != nil {
		return nil
	}
	out := make([]string, len(st.Shards))
	for k, sh := range st.Shards {
		out[k] = sh.LeaderID
	}
	return out
}

// shardsLedAmong reports whether members agree on a leader for each of the
// shards, every one of them among the members.
func (c *Cluster) shardsLedAmong(shards int, members ...int) bool {
	ids := map[string]bool{}
	for _, i := range members {
		st, err := c.Status(i)
		if err != nil {
			return false
		}
		ids[st.ID] = true
	}
	first := c.shardLeaders(members[0])
	if len(first) != shards {
		return false
	}
	for _, i := range members {
		got := c.shardLeaders(i)
		if len(got) != shards {
			return false
		}
		for k := range got {
			if got[k] != first[k] || !ids[got[k]] {
				return false
			}
		}
	}
	return true
}

// TestShardsKillLeaderOfSeveral runs three latchd processes with --shards 4
// over real TCP: every shard elects a leader; SIGKILL of the member that
// leads the most shards leaves every shard led by a survivor and writable;
// the member restarted from its data directory rejoins every shard, and a
// restart with another --shards is refused naming both counts.
func TestShardsKillLeaderOfSeveral(t *testing.T) {
	const shards = 4
	c := Start(t, Options{Nodes: 3, Shards: shards})
	all := []int{0, 1, 2}
	if !waitUntil(60*time.Second, func() bool { return c.shardsLedAmong(shards, all...) }) {
		t.Fatalf("not every shard elected an agreed leader: %v", c.shardLeaders(0))
	}
	counts := map[string]int{}
	for _, id := range c.shardLeaders(0) {
		counts[id]++
	}
	victim, most := 0, 0
	for i := range all {
		st, err := c.Status(i)
		if err == nil && counts[st.ID] > most {
			victim, most = i, counts[st.ID]
		}
	}
	if most < 2 { // 4 shards on 3 members: some member leads two or more
		t.Fatalf("no member leads two shards: %v", counts)
	}
	t.Logf("killing %s, which leads %d of %d shards", c.Members[victim].Name, most, shards)
	c.Kill(victim)
	var survivors []int
	for _, i := range all {
		if i != victim {
			survivors = append(survivors, i)
		}
	}
	if !waitUntil(60*time.Second, func() bool { return c.shardsLedAmong(shards, survivors...) }) {
		t.Fatalf("survivors did not lead every shard: %v", c.shardLeaders(survivors[0]))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	written, err := testcluster.Put(ctx, c.Members[survivors[0]].ClientURL, "/after-kill", "v", "")
	if err != nil {
		t.Fatalf("put after the kill: %v", err)
	}

	setShards(c.Members[victim], "8")
	if err := c.Restart(victim); err != nil {
		t.Fatal(err)
	}
	if !waitUntil(30*time.Second, func() bool { return !c.Running(victim) }) {
		t.Fatal("a member restarted with --shards 8 is still running")
	}
	if logs, _ := os.ReadFile(c.Members[victim].LogPath); !strings.Contains(string(logs), "was created with --shards 4, not 8") {
		t.Fatalf("the refusal does not name both counts; log:\n%s", logs)
	}
	setShards(c.Members[victim], "4")
	if err := c.Restart(victim); err != nil {
		t.Fatal(err)
	}
	if !waitUntil(60*time.Second, func() bool { return c.shardsLedAmong(shards, all...) }) {
		t.Fatalf("the restarted member did not rejoin every shard: %v", c.shardLeaders(victim))
	}
	got, err := testcluster.Get(ctx, c.Members[victim].ClientURL, "/after-kill", api.Linearizable)
	if err != nil || got.Value != "v" || got.ModifiedIndex != written.ModifiedIndex {
		t.Fatalf("restarted member reads /after-kill = %+v, %v", got, err)
	}
}

// setShards sets the --shards flag m starts with.
func setShards(m *Member, value string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := 0; i+1 < len(m.args); i++ {
		if m.args[i] == "--shards" {
			m.args[i+1] = value
		}
	}
}

// waitUntil polls cond until it holds or timeout passes.
func waitUntil(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
	return true
}
