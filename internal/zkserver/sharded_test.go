package zkserver

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

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
	c := startZKWith(t, 3, Config{}, testcluster.Options{Shards: zkShards}, nil)
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
// The lock's directory is one whose children live in shard 0, as watches
// are served only there with several shards yet (docs/zookeeper.md).
func TestLockRecipeOnShardedCluster(t *testing.T) {
	c := startZKWith(t, 3, Config{}, testcluster.Options{Shards: zkShards}, nil)
	const clients, cycles = 4, 5
	conns := make([]*zk.Conn, clients)
	for i := range conns {
		conns[i], _ = connect(t, c.addrs[i%len(c.addrs):i%len(c.addrs)+1], 10*time.Second)
	}
	mustCreate(t, conns[0], "/lk", "")
	lockDir := shardZeroDir(t, "/lk")
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

// shardZeroDir returns a child of parent whose own children live in shard 0.
func shardZeroDir(t *testing.T, parent string) string {
	t.Helper()
	m, err := placement.New(zkShards)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 256 {
		if p := fmt.Sprintf("%s/l%d", parent, i); m.ChildShard(p) == 0 {
			return p
		}
	}
	t.Fatal("no directory with its children in shard 0")
	return ""
}

// TestWatchesOutsideShardZeroRefused: on a sharded cluster the ZooKeeper
// port refuses a watch whose changes come from another shard than 0 (a
// session's zxid follows shard 0's indexes) with BadArguments, and serves
// a data watch on a node of shard 0: its change is notified.
func TestWatchesOutsideShardZeroRefused(t *testing.T) {
	c := startZKWith(t, 1, Config{}, testcluster.Options{Shards: zkShards}, nil)
	conn, _ := connect(t, c.addrs, 10*time.Second)
	m, err := placement.New(zkShards)
	if err != nil {
		t.Fatal(err)
	}
	var inZero, elsewhere string // a node's shard is its parent's children's
	for i := 0; i < 256 && (inZero == "" || elsewhere == ""); i++ {
		p := fmt.Sprintf("/w%d/n", i)
		switch {
		case m.Shard(p) == 0 && inZero == "":
			inZero = p
		case m.Shard(p) != 0 && elsewhere == "":
			elsewhere = p
		default:
			continue
		}
		mustCreate(t, conn, fmt.Sprintf("/w%d", i), "")
		mustCreate(t, conn, p, "a")
	}
	if _, _, _, err := conn.GetW(elsewhere); !errors.Is(err, zk.ErrBadArguments) {
		t.Fatalf("getData with a watch on %s (shard %d): %v, want BadArguments", elsewhere, m.Shard(elsewhere), err)
	}
	_, _, events, err := conn.GetW(inZero)
	if err != nil {
		t.Fatalf("getData with a watch on %s (shard 0): %v", inZero, err)
	}
	if _, err := conn.Set(inZero, []byte("b"), -1); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-events:
		if ev.Type != zk.EventNodeDataChanged || ev.Path != inZero {
			t.Fatalf("event %+v, want NodeDataChanged on %s", ev, inZero)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("no notification of %s's change", inZero)
	}
}
