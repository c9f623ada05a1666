package zkserver

import (
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/latch-io/latch/internal/clock"
	"github.com/latch-io/latch/internal/testkit/testcluster"
)

// skew is how far ahead member n3 (index 2)'s wall clock runs in TestStatTimesFromTheLog.
const skew = time.Hour

// TestStatTimesFromTheLog: ctime, mtime, cversion and pzxid are the log's,
// not a member's clock's: a node's Stat is identical on every member (one
// of which has its wall clock an hour ahead), its times lie within the
// test's wall-clock window, a write proposed through the skewed member
// carries that member's time everywhere, setData's reply reports the mtime
// every member then shows, and a member restarted from a snapshot shows
// the same times.
func TestStatTimesFromTheLog(t *testing.T) {
	skewed := clock.NewSkewed(clock.Real())
	skewed.Jump(skew)
	c := startZKWith(t, 3, Config{}, testcluster.Options{SnapshotEvery: 20, Clock: func(name string) clock.Clock {
		if name == "n3" {
			return skewed
		}
		return clock.Real()
	}}, nil)
	conns := make([]*zk.Conn, len(c.addrs))
	for i, addr := range c.addrs {
		conns[i], _ = connect(t, []string{addr}, 10*time.Second)
	}
	before := time.Now().UnixMilli()
	mustCreate(t, conns[0], "/t", "a")
	mustCreate(t, conns[0], "/t/c1", "")
	mustCreate(t, conns[0], "/t/c2", "")
	if err := conns[0].Delete("/t/c1", -1); err != nil {
		t.Fatal(err)
	}
	set, err := conns[0].Set("/t", []byte("b"), 0)
	if err != nil {
		t.Fatal(err)
	}
	after := time.Now().UnixMilli()
	stat := sameStatEverywhere(t, conns, "/t")
	switch {
	case stat.Ctime < before || stat.Ctime > after || stat.Mtime < stat.Ctime || stat.Mtime > after:
		t.Errorf("ctime %d, mtime %d: want both within the test's window [%d, %d], ctime first", stat.Ctime, stat.Mtime, before, after)
	case *set != *stat:
		t.Errorf("setData replied %+v, the members show %+v", *set, *stat)
	case stat.Cversion != 3 || stat.NumChildren != 1:
		t.Errorf("cversion %d, numChildren %d: want 3 (two creates, a delete) and 1", stat.Cversion, stat.NumChildren)
	case stat.Pzxid <= stat.Czxid || stat.Pzxid >= stat.Mzxid:
		t.Errorf("pzxid %d: want the delete's index, between czxid %d and mzxid %d", stat.Pzxid, stat.Czxid, stat.Mzxid)
	}

	// Proposed through the member whose clock is ahead: its time, on every member.
	mustCreate(t, conns[2], "/t/skewed", "")
	late := sameStatEverywhere(t, conns, "/t/skewed")
	if ahead := late.Ctime - time.Now().UnixMilli(); ahead < int64(skew/time.Millisecond)-60_000 {
		t.Errorf("a create proposed through n3 has ctime %d, %v ahead of the test's clock: want n3's clock, %v ahead", late.Ctime, time.Duration(ahead)*time.Millisecond, skew)
	}

	// Enough writes for snapshots, then n1 restarts from its snapshot.
	for i := range 30 {
		if _, err := conns[0].Set("/t/c2", []byte{byte(i)}, -1); err != nil {
			t.Fatal(err)
		}
	}
	if !testcluster.WaitFor(30*time.Second, func() bool { return len(c.SnapshotIndexes(1)) > 0 }) {
		t.Fatalf("n1 took no snapshot after 30 writes (snapshot every 20)")
	}
	c.Stop(1)
	c.Restart(1)
	// n2 may have led: a write sent before the next leader is elected
	// ends its connection unanswered (ConnectionLoss, as from a ZooKeeper
	// server that lost its leader), and the multi below is a write.
	c.WaitLeader(30 * time.Second)
	_, index := c.Nodes[0].Server.StateHash()
	c.WaitApplied(index, 30*time.Second)
	c.EnsureSame(30 * time.Second)
	node, err := c.LocalGet(1, "/t")
	if err != nil {
		t.Fatal(err)
	}
	if int64(node.CreatedAtMs) != stat.Ctime || int64(node.ModifiedAtMs) != stat.Mtime || int64(node.ChildrenVersion) != int64(stat.Cversion)+1 {
		t.Errorf("after n1's restart (snapshots %v): created_at_ms %d, modified_at_ms %d, cversion %d; want %d, %d, %d",
			c.SnapshotIndexes(1), node.CreatedAtMs, node.ModifiedAtMs, node.ChildrenVersion, stat.Ctime, stat.Mtime, stat.Cversion+1)
	}

	// A multi's setData reports the whole Stat of a node made before it
	// (ctime, cversion and pzxid too), as the members then show it (the
	// restarted member's connection is reconnecting).
	res, err := conns[0].Multi(&zk.SetDataRequest{Path: "/t", Data: []byte("m"), Version: -1})
	if err != nil || len(res) != 1 || res[0].Error != nil || res[0].Stat == nil {
		t.Fatalf("multi setData: %+v, %v", res, err)
	}
	if after := sameStatEverywhere(t, []*zk.Conn{conns[0], conns[2]}, "/t"); *res[0].Stat != *after {
		t.Errorf("multi's setData replied %+v, the members show %+v", *res[0].Stat, *after)
	}
}

func mustCreate(t *testing.T, conn *zk.Conn, path, value string) {
	t.Helper()
	if _, err := conn.Create(path, []byte(value), 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatalf("create %s: %v", path, err)
	}
}

// sameStatEverywhere reads path's Stat through every connection (each on
// its own member, after a sync) and fails the test unless all are equal.
func sameStatEverywhere(t *testing.T, conns []*zk.Conn, path string) *zk.Stat {
	t.Helper()
	var first *zk.Stat
	for i, conn := range conns {
		if _, err := conn.Sync(path); err != nil {
			t.Fatalf("sync on member %d: %v", i, err)
		}
		_, stat, err := conn.Exists(path)
		if err != nil {
			t.Fatalf("exists %s on member %d: %v", path, i, err)
		}
		if first == nil {
			first = stat
		} else if *stat != *first {
			t.Errorf("%s on member %d: %+v; member 0: %+v", path, i, *stat, *first)
		}
	}
	return first
}
