package zkserver

import (
	"fmt"
	"strings"
	"testing"

	"github.com/latch-io/latch/internal/testkit/testcluster"
	"github.com/latch-io/latch/internal/zkproto"
)

// TestFourLetterNodeCountOnShardedCluster: on a 4-shard member srvr's Node
// count and mntr's zk_znode_count count the nodes of every shard, the root
// once, not only those of the meta group.
func TestFourLetterNodeCountOnShardedCluster(t *testing.T) {
	c := startZKWith(t, 1, Config{FourLetterWords: []string{"srvr", "mntr"}}, testcluster.Options{Shards: zkShards}, nil)
	r := dialRaw(t, c.addrs[0])
	r.session()
	create := func(path string) {
		t.Helper()
		mustOK(t, "create "+path, firstHeader(r.call(zkproto.OpCreate, &zkproto.CreateRequest{Path: path, ACL: worldAnyone})))
	}
	create("/c")
	nodes := 2 // the root and /c
	for shard := range zkShards {
		dir := dirWithChildrenIn(t, "/c", func(s int) bool { return s == shard })
		create(dir)
		create(dir + "/x")
		nodes += 2
	}
	if srvr, want := fourLetterWord(t, c.addrs[0], "srvr"), fmt.Sprintf("Node count: %d\n", nodes); !strings.Contains(srvr, want) {
		t.Errorf("srvr = %q, want %q", srvr, want)
	}
	if mntr, want := fourLetterWord(t, c.addrs[0], "mntr"), fmt.Sprintf("zk_znode_count\t%d\n", nodes); !strings.Contains(mntr, want) {
		t.Errorf("mntr = %q, want %q", mntr, want)
	}
}
