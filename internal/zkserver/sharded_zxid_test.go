package zkserver

import (
	"fmt"
	"testing"

	"github.com/latch-io/latch/internal/testkit/testcluster"
	"github.com/latch-io/latch/internal/zkproto"
)

// TestZxidsAreShardZeros: on a sharded cluster a connection's zxids are
// indexes of shard 0's log only, even after writes to a shard whose log
// has run ahead of shard 0's, so that the client can reconnect with its
// last zxid to another member (which compares it with its shard 0 applied
// index) and setWatches can compare it with shard 0's zxids.
func TestZxidsAreShardZeros(t *testing.T) {
	c := startZKWith(t, 3, Config{}, testcluster.Steady(testcluster.Options{Shards: zkShards}), nil)
	waitShardsSettled(t, c.Cluster)
	r := dialRaw(t, c.addrs[0])
	sess := r.session()
	if h, _ := r.call(zkproto.OpCreate, &zkproto.CreateRequest{Path: "/zx", ACL: worldAnyone}); h.Err != zkproto.ErrOK {
		t.Fatalf("create /zx: %v", h.Err)
	}
	dir := dirWithChildrenIn(t, "/zx", func(shard int) bool { return shard != 0 })
	if h, _ := r.call(zkproto.OpCreate, &zkproto.CreateRequest{Path: dir, ACL: worldAnyone}); h.Err != zkproto.ErrOK {
		t.Fatalf("create %s: %v", dir, h.Err)
	}
	srv := c.Nodes[0].Server
	busy := srv.ShardOf(dir + "/x")
	var last zkproto.ReplyHeader
	for i := 0; srv.ShardApplied(busy) <= srv.AppliedIndex()+10; i++ {
		if i == 2000 {
			t.Fatalf("shard %d's log did not run ahead of shard 0's: %d and %d", busy, srv.ShardApplied(busy), srv.AppliedIndex())
		}
		last, _ = r.call(zkproto.OpCreate, &zkproto.CreateRequest{Path: fmt.Sprintf("%s/n%d", dir, i), ACL: worldAnyone})
		if last.Err != zkproto.ErrOK {
			t.Fatalf("create under %s: %v", dir, last.Err)
		}
	}
	h, _ := r.call(zkproto.OpGetData, &zkproto.PathWatchRequest{Path: dir + "/n0"})
	if applied := srv.AppliedIndex(); uint64(last.Zxid) > applied || uint64(h.Zxid) > applied {
		t.Fatalf("zxids %d (create) and %d (getData) are past shard 0's applied index %d (shard %d's is %d)",
			last.Zxid, h.Zxid, applied, busy, srv.ShardApplied(busy))
	}
	other := dialRaw(t, c.addrs[1])
	resumed, err := other.connect(zkproto.ConnectRequest{SessionID: sess.SessionID, Passwd: sess.Passwd, TimeOut: sess.TimeOut, LastZxidSeen: h.Zxid})
	if err != nil || resumed.SessionID != sess.SessionID {
		t.Fatalf("reconnect to another member with zxid %d: %+v, %v", h.Zxid, resumed, err)
	}
}
