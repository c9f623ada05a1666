package zkserver

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/placement"
	"github.com/latch-io/latch/internal/testkit/testcluster"
)

// zkShards is the shard count of the sharded tests.
const zkShards = 4

// TestCreatesOnShardedCluster: go-zookeeper on 3 members with 4 shards,
// where a node and its children live in different shards: nested creates
// succeed and never make a missing parent (NoNode), sequential and
// ephemeral children keep ZooKeeper's names and codes (NodeExists,
// NoChildrenForEphemerals), a delete of a directory with children is
// NotEmpty, and a multi spanning shards is refused whole with
// BadArguments.
func TestCreatesOnShardedCluster(t *testing.T) {
	c := startZKWith(t, 3, Config{}, testcluster.Steady(testcluster.Options{Shards: zkShards}), nil)
	a, _ := connect(t, c.addrs[:1], 10*time.Second)
	b, _ := connect(t, c.addrs[1:2], 10*time.Second)

	mustCreate(t, a, "/a", "1")
	mustCreate(t, a, "/a/b", "2")
	mustCreate(t, b, "/a/b/c", "3")
	if got, _, err := b.Get("/a/b/c"); err != nil || string(got) != "3" {
		t.Fatalf("get /a/b/c = %q, %v", got, err)
	}
	if _, err := a.Create("/a/b", nil, 0, openACL); err != zk.ErrNodeExists {
		t.Fatalf("second create /a/b: %v, want NodeExists", err)
	}
	if _, err := a.Create("/missing/x", nil, 0, openACL); err != zk.ErrNoNode {
		t.Fatalf("create under a missing parent: %v, want NoNode", err)
	}
	if ok, _, err := a.Exists("/missing"); err != nil || ok {
		t.Fatalf("the missing parent was made: exists = %v, %v", ok, err)
	}
	if _, err := a.Create("/a/b/c/d/e", nil, 0, openACL); err != zk.ErrNoNode {
		t.Fatalf("create two levels under: %v, want NoNode", err)
	}

	last := ""
	for range 3 {
		// Sequence numbers increase per parent, not from 0 (docs/api.md).
		got, err := b.Create("/a/q-", nil, zk.FlagSequence, openACL)
		if err != nil || len(got) != len("/a/q-")+10 || got <= last {
			t.Fatalf("sequential create = %q, %v; want /a/q-%%010d above %q", got, err, last)
		}
		last = got
	}
	eph, err := a.Create("/a/e-", []byte("x"), zk.FlagEphemeral|zk.FlagSequence, openACL)
	if err != nil {
		t.Fatalf("ephemeral sequential create: %v", err)
	}
	if _, stat, err := b.Get(eph); err != nil || stat.EphemeralOwner == 0 {
		t.Fatalf("get %s = %+v, %v; want an ephemeral owner", eph, stat, err)
	}
	if _, err := a.Create(eph+"/child", nil, 0, openACL); err != zk.ErrNoChildrenForEphemerals {
		t.Fatalf("create under an ephemeral node: %v, want NoChildrenForEphemerals", err)
	}
	children, _, err := b.Children("/a")
	if err != nil || len(children) != 5 {
		t.Fatalf("children of /a = %v, %v; want b, 3 q- and 1 e-", children, err)
	}
	if err := a.Delete("/a/b", -1); err != zk.ErrNotEmpty {
		t.Fatalf("delete /a/b with a child: %v, want NotEmpty", err)
	}
	if err := a.Delete("/a/b/c", -1); err != nil {
		t.Fatal(err)
	}
	if err := a.Delete("/a/b", -1); err != nil {
		t.Fatalf("delete of the emptied /a/b: %v", err)
	}

	x, y := twoShardDirs(t)
	mustCreate(t, a, x, "")
	mustCreate(t, a, y, "")
	_, err = a.Multi(&zk.CreateRequest{Path: x + "/m", Acl: openACL}, &zk.CreateRequest{Path: y + "/m", Acl: openACL})
	if err != zk.ErrBadArguments {
		t.Fatalf("multi over two shards: %v, want BadArguments", err)
	}
	for _, p := range []string{x + "/m", y + "/m"} {
		if ok, _, err := a.Exists(p); err != nil || ok {
			t.Fatalf("after the refused multi, %s exists = %v, %v", p, ok, err)
		}
	}
}

// twoShardDirs returns two top-level paths whose children live in
// different shards.
func twoShardDirs(t *testing.T) (string, string) {
	t.Helper()
	m, err := placement.New(zkShards)
	if err != nil {
		t.Fatal(err)
	}
	first := "/d0"
	for i := 1; i < 64; i++ {
		if p := fmt.Sprintf("/d%d", i); m.ChildShard(p) != m.ChildShard(first) {
			return first, p
		}
	}
	t.Fatal("no two directories with children in different shards")
	return "", ""
}

// TestLockRecipeOnShardedCluster: go-zookeeper's Lock with several clients
// on a 4-shard cluster: every cycle acquires, and no two holders overlap.
// The lock's directory is one whose children are not in shard 0, so the
// recipe's watch on its predecessor comes from another shard's log.
//
// The recipe gives up on a connection loss, which the listener causes, as
// ZooKeeper does, when a request finds no leader within the request
// timeout. So the cluster runs with Steady's election timeout (the default
// 100ms lets a loaded machine depose leaders by accident, and a shard
// whose followers then split their votes stays leaderless past the
// timeout), and the clients start once every shard has a leader and the
// leader balancer has nothing left to move.
func TestLockRecipeOnShardedCluster(t *testing.T) {
	c := startZKWith(t, 3, Config{}, testcluster.Steady(testcluster.Options{Shards: zkShards}), nil)
	waitShardsSettled(t, c.Cluster)
	const clients, cycles = 4, 5
	conns := make([]*zk.Conn, clients)
	for i := range conns {
		conns[i], _ = connect(t, c.addrs[i%len(c.addrs):i%len(c.addrs)+1], 10*time.Second)
	}
	mustCreate(t, conns[0], "/lk", "")
	lockDir := dirWithChildrenIn(t, "/lk", func(shard int) bool { return shard != 0 })
	var holders, acquired atomic.Int32
	errs := make(chan error, clients)
	var wg sync.WaitGroup
	for i, conn := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lock := zk.NewLock(conn, lockDir, openACL)
			for range cycles {
				if err := lock.Lock(); err != nil {
					errs <- fmt.Errorf("client %d lock: %w", i, err)
					return
				}
				if holders.Add(1) != 1 {
					errs <- fmt.Errorf("client %d holds the lock with another", i)
				}
				acquired.Add(1)
				holders.Add(-1)
				if err := lock.Unlock(); err != nil {
					errs <- fmt.Errorf("client %d unlock: %w", i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := acquired.Load(); got != clients*cycles {
		t.Fatalf("%d acquisitions, want %d", got, clients*cycles)
	}
}

// waitShardsSettled waits until the members agree on a running leader of
// every shard and the leaderships are balanced (the busiest and the idlest
// member differ by at most one), so that the leader balancer moves none.
func waitShardsSettled(t *testing.T, c *testcluster.Cluster) {
	t.Helper()
	leaders := func(i int) []string {
		var out []string
		for _, sh := range c.Nodes[i].Server.ShardStatuses() {
			out = append(out, sh.LeaderID)
		}
		return out
	}
	settled := func() bool {
		first := leaders(0)
		if len(first) != zkShards {
			return false
		}
		counts := map[string]int{}
		for _, n := range c.Nodes {
			counts[api.FormatID(n.ID)] = 0
		}
		for i := range c.Nodes {
			if !slices.Equal(leaders(i), first) {
				return false
			}
		}
		for _, id := range first {
			if _, member := counts[id]; !member {
				return false
			}
			counts[id]++
		}
		lo, hi := zkShards, 0
		for _, n := range counts {
			lo, hi = min(lo, n), max(hi, n)
		}
		return hi-lo <= 1
	}
	deadline := time.Now().Add(30 * time.Second)
	for !settled() {
		if time.Now().After(deadline) {
			t.Fatalf("the shards' leaders did not settle within 30s: %v / %v / %v", leaders(0), leaders(1), leaders(2))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// dirWithChildrenIn returns a child of parent whose own children live in
// a shard that wanted accepts.
func dirWithChildrenIn(t *testing.T, parent string, wanted func(shard int) bool) string {
	t.Helper()
	m, err := placement.New(zkShards)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 256 {
		if p := fmt.Sprintf("%s/l%d", parent, i); wanted(m.ChildShard(p)) {
			return p
		}
	}
	t.Fatal("no directory with its children in a wanted shard")
	return ""
}

// TestWatchesOnEveryShard: on a sharded cluster the ZooKeeper port serves
// watches whatever the shards their changes come from: a data watch on a
// node of every shard, a child watch on a directory whose children live in
// another shard than the node (its NodeChildrenChanged comes from the
// children's log, whose indexes are not the node's), an exist watch on a
// missing node, and go-zookeeper's lock recipe (which waits with a watch
// on its predecessor) on a lock directory whose children are not in shard
// 0. After a reconnect to another member, setWatches sets the watches
// again: each reports a change missed meanwhile.
func TestWatchesOnEveryShard(t *testing.T) {
	c := startZKWith(t, 3, Config{}, testcluster.Steady(testcluster.Options{Shards: zkShards}), nil)
	conn, _ := connect(t, c.addrs, 10*time.Second)
	home := slices.Index(c.addrs, conn.Server()) // the member conn is on
	if home < 0 {
		t.Fatalf("connected to %q, not one of %v", conn.Server(), c.addrs)
	}
	writer, _ := connect(t, []string{c.addrs[(home+1)%len(c.addrs)]}, 10*time.Second)
	m, err := placement.New(zkShards)
	if err != nil {
		t.Fatal(err)
	}
	// A node in each shard (a node's shard is its parent's children's).
	nodes := make([]string, zkShards)
	for i, found := 0, 0; found < zkShards; i++ {
		p := fmt.Sprintf("/w%d/n", i)
		if nodes[m.Shard(p)] != "" {
			continue
		}
		mustCreate(t, writer, fmt.Sprintf("/w%d", i), "")
		mustCreate(t, writer, p, "a")
		nodes[m.Shard(p)] = p
		found++
	}
	var dir string // a directory whose children are in another shard
	for i := 0; dir == ""; i++ {
		if p := fmt.Sprintf("/d%d", i); m.ChildShard(p) != m.Shard(p) && m.ChildShard(p) != 0 {
			dir = p
		}
	}
	mustCreate(t, writer, dir, "")
	missing := nodes[zkShards-1] + "-later"
	// The log of dir's own shard runs well ahead of its children's: a
	// child watch that compared the children's changes with the node's
	// index would drop them.
	for i := range 60 {
		if _, err := writer.Set(nodes[m.Shard(dir)], []byte(fmt.Sprint(i)), -1); err != nil {
			t.Fatal(err)
		}
	}

	dataEvents := make([]<-chan zk.Event, zkShards)
	for shard, p := range nodes {
		if _, _, dataEvents[shard], err = conn.GetW(p); err != nil {
			t.Fatalf("getData with a watch on %s (shard %d): %v", p, shard, err)
		}
	}
	_, _, childEvents, err := conn.ChildrenW(dir)
	if err != nil {
		t.Fatalf("getChildren with a watch on %s (children in shard %d): %v", dir, m.ChildShard(dir), err)
	}
	_, _, existEvents, err := conn.ExistsW(missing)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range nodes {
		if _, err := writer.Set(p, []byte("b"), -1); err != nil {
			t.Fatal(err)
		}
	}
	mustCreate(t, writer, dir+"/child", "")
	mustCreate(t, writer, missing, "")
	for shard, p := range nodes {
		expectEvent(t, dataEvents[shard], zk.EventNodeDataChanged, p)
	}
	expectEvent(t, childEvents, zk.EventNodeChildrenChanged, dir)
	expectEvent(t, existEvents, zk.EventNodeCreated, missing)

	// Set again, then the member holding the connection goes (its listener
	// first): the client reconnects elsewhere with setWatches, and the
	// changes made meanwhile are reported.
	away := nodes[1]
	if _, _, dataEvents[1], err = conn.GetW(away); err != nil {
		t.Fatal(err)
	}
	if _, _, childEvents, err = conn.ChildrenW(dir); err != nil {
		t.Fatal(err)
	}
	c.listeners[home].Close() // the client reconnects to another member
	c.Stop(home)
	if _, err := writer.Set(away, []byte("c"), -1); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, writer, dir+"/child2", "")
	expectEvent(t, dataEvents[1], zk.EventNodeDataChanged, away)
	expectEvent(t, childEvents, zk.EventNodeChildrenChanged, dir)
}

// expectEvent waits for the next event on events: typ on path.
func expectEvent(t *testing.T, events <-chan zk.Event, typ zk.EventType, path string) {
	t.Helper()
	select {
	case ev := <-events:
		if ev.Type != typ || ev.Path != path {
			t.Fatalf("event %+v, want %v on %s", ev, typ, path)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("no %v notification of %s within 30s", typ, path)
	}
}
