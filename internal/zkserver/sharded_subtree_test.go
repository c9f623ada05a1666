package zkserver

import (
	"slices"
	"testing"

	"github.com/latch-io/latch/internal/placement"
	"github.com/latch-io/latch/internal/testkit/testcluster"
	"github.com/latch-io/latch/internal/zkproto"
)

// TestSubtreeReadsOnShardedCluster: on a 4-shard cluster getEphemerals and
// getAllChildrenNumber answer for every shard, not only the one they
// start from: a session's ephemeral nodes lie in every shard (under
// directories whose children live in each shard, and at the top level),
// and the nodes below /t are spread over every shard, two levels deep.
func TestSubtreeReadsOnShardedCluster(t *testing.T) {
	c := startZKWith(t, 3, Config{}, testcluster.Steady(testcluster.Options{Shards: zkShards}), nil)
	r := dialRaw(t, c.addrs[0])
	r.session()
	other := dialRaw(t, c.addrs[1])
	other.session()
	create := func(r *rawClient, path string, flags zkproto.CreateMode) {
		t.Helper()
		mustOK(t, "create "+path, firstHeader(r.call(zkproto.OpCreate, &zkproto.CreateRequest{Path: path, ACL: worldAnyone, Flags: flags})))
	}
	m, err := placement.New(zkShards)
	if err != nil {
		t.Fatal(err)
	}

	create(r, "/t", 0)
	create(r, "/t/e", zkproto.ModeEphemeral)
	create(other, "/t/other", zkproto.ModeEphemeral)
	create(r, "/zeph", zkproto.ModeEphemeral)
	want := []string{"/t/e", "/zeph"}
	descendants := 2 // /t/e, /t/other
	shards := map[int]bool{m.Shard("/t/e"): true, m.Shard("/zeph"): true}
	var dirs []string
	for shard := range zkShards {
		// dir's children, its ephemeral e among them, live in shard;
		// dir/p/q lives wherever dir/p's children do.
		dir := dirWithChildrenIn(t, "/t", func(s int) bool { return s == shard })
		dirs = append(dirs, dir)
		create(r, dir, 0)
		create(r, dir+"/e", zkproto.ModeEphemeral)
		create(r, dir+"/p", 0)
		create(r, dir+"/p/q", 0)
		want = append(want, dir+"/e")
		descendants += 4
		shards[m.Shard(dir+"/e")] = true
		shards[m.Shard(dir+"/p/q")] = true
	}
	if len(shards) != zkShards {
		t.Fatalf("the nodes lie in shards %v, want all %d", shards, zkShards)
	}
	slices.Sort(want)

	ephemerals := func(prefix string) []string {
		t.Helper()
		h, rest := r.call(zkproto.OpGetEphemerals, &zkproto.PathRequest{Path: prefix})
		var out zkproto.GetChildrenResponse
		mustDecode(t, "getEphemerals "+prefix, h, rest, &out, "GetEphemeralsResponse")
		return out.Children
	}
	for _, prefix := range []string{"/", ""} {
		if got := ephemerals(prefix); !slices.Equal(got, want) {
			t.Errorf("getEphemerals %q = %v, want %v", prefix, got, want)
		}
	}
	// "/t/l" is part of a name: dirWithChildrenIn's directories are /t/lN.
	var underL []string
	for _, dir := range dirs {
		underL = append(underL, dir+"/e")
	}
	slices.Sort(underL)
	if got, want := ephemerals("/t/l"), underL; !slices.Equal(got, want) {
		t.Errorf("getEphemerals /t/l = %v, want %v", got, want)
	}
	if got, want := ephemerals(dirs[2]), []string{dirs[2] + "/e"}; !slices.Equal(got, want) {
		t.Errorf("getEphemerals %s = %v, want %v", dirs[2], got, want)
	}
	if got := ephemerals("/none"); len(got) != 0 {
		t.Errorf("getEphemerals /none = %v, want none", got)
	}

	count := func(path string) int32 {
		t.Helper()
		h, rest := r.call(zkproto.OpGetAllChildrenNumber, &zkproto.PathRequest{Path: path})
		var out zkproto.IntResponse
		mustDecode(t, "getAllChildrenNumber "+path, h, rest, &out, "GetAllChildrenNumberResponse")
		return out.Value
	}
	if got := count("/t"); got != int32(descendants) {
		t.Errorf("getAllChildrenNumber /t = %d, want %d", got, descendants)
	}
	for _, dir := range dirs {
		if got := count(dir); got != 3 {
			t.Errorf("getAllChildrenNumber %s = %d, want 3", dir, got)
		}
		if got := count(dir + "/p/q"); got != 0 {
			t.Errorf("getAllChildrenNumber %s/p/q = %d, want 0", dir, got)
		}
	}
	if h, _ := r.call(zkproto.OpGetAllChildrenNumber, &zkproto.PathRequest{Path: "/t/none"}); h.Err != zkproto.ErrNoNode {
		t.Errorf("getAllChildrenNumber of a missing node = %d, want NoNode", h.Err)
	}
}
