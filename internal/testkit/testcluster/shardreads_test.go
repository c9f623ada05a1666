package testcluster

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/placement"
)

// Reads whose answer spans shards, in a 3-member cluster of 4 shards: the
// lock and election listings (each lock's queue in the shard of its own
// directory's children) and a multi-read of directories whose children
// live in another shard than their node. Each answers as a one-shard
// cluster would.

func TestShardsListingsCoverEveryShard(t *testing.T) {
	c := newShardedCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	s, err := newSession(ctx, c.URL(0), 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	locks := namesInEveryShard("/locks/", "listed-%d")
	roles := namesInEveryShard("/elections/", "role-%d")
	if len(locks) != wiringShards || len(roles) != wiringShards {
		t.Fatalf("names in every shard: %v, %v", locks, roles)
	}
	tokens := map[string]uint64{}
	for shard, name := range locks {
		lock, err := acquire(ctx, c.URL(shard%3), name, s.SessionID, 10*time.Second)
		if err != nil || !lock.Held {
			t.Fatalf("acquire %s (shard %d): %+v, %v", name, shard, lock, err)
		}
		tokens[name] = lock.FencingToken
	}
	for shard, role := range roles {
		if _, err := join(ctx, c.URL(shard%3), role, s.SessionID, "v-"+role); err != nil {
			t.Fatalf("join %s (shard %d): %v", role, shard, err)
		}
	}
	wantLocks := sortedValues(locks)
	wantRoles := sortedValues(roles)
	for i := range c.Nodes {
		var list api.LockList
		if err := do(ctx, http.MethodGet, c.URL(i), "/v1/locks", nil, nil, &list); err != nil {
			t.Fatalf("list locks on %d: %v", i, err)
		}
		var names []string
		for _, l := range list.Locks {
			names = append(names, l.Name)
			if l.Holder == nil || l.Holder.SessionHandle != s.SessionHandle || l.Holder.FencingToken != tokens[l.Name] || l.Waiters != 0 {
				t.Fatalf("member %d lists lock %s as %+v, want held by %s with token %d", i, l.Name, l.Holder, s.SessionHandle, tokens[l.Name])
			}
		}
		if !slices.Equal(names, wantLocks) || list.Truncated || len(list.Indexes) == 0 {
			t.Fatalf("member %d lists locks %v (truncated %v, indexes %v), want %v", i, names, list.Truncated, list.Indexes, wantLocks)
		}
		var elections api.ElectionList
		if err := do(ctx, http.MethodGet, c.URL(i), "/v1/elections", nil, nil, &elections); err != nil {
			t.Fatalf("list elections on %d: %v", i, err)
		}
		names = nil
		for _, e := range elections.Elections {
			names = append(names, e.Role)
			if e.Leader == nil || e.Leader.Value != "v-"+e.Role || e.Candidates != 1 {
				t.Fatalf("member %d lists election %s as %+v (%d candidates)", i, e.Role, e.Leader, e.Candidates)
			}
		}
		if !slices.Equal(names, wantRoles) {
			t.Fatalf("member %d lists elections %v, want %v", i, names, wantRoles)
		}
	}
	// One lock a page: every lock once, in order, whatever shard its queue
	// is in.
	var paged []string
	after := ""
	for range wiringShards + 1 {
		var list api.LockList
		q := url.Values{"limit": {"1"}}
		if after != "" {
			q.Set("after", after)
		}
		if err := do(ctx, http.MethodGet, c.URL(1), "/v1/locks", q, nil, &list); err != nil {
			t.Fatalf("page after %q: %v", after, err)
		}
		for _, l := range list.Locks {
			if l.Holder == nil {
				t.Fatalf("paged lock %s has no holder", l.Name)
			}
			paged = append(paged, l.Name)
		}
		if !list.Truncated {
			break
		}
		after = list.NextAfter
	}
	if !slices.Equal(paged, wantLocks) {
		t.Fatalf("paged locks %v, want %v", paged, wantLocks)
	}
}

func sortedValues(m map[int]string) []string {
	out := make([]string, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	sort.Strings(out)
	return out
}

func TestShardsMultiReadOfChildrenInAnotherShard(t *testing.T) {
	c := newShardedCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	m, err := placement.New(wiringShards)
	if err != nil {
		t.Fatal(err)
	}
	for shard, dir := range crossShardDirs(t, "/multi") {
		for _, p := range []string{dir + "/a", dir + "/b"} {
			if _, err := put(ctx, c.URL(shard%3), p, "v", ""); err != nil {
				t.Fatalf("put %s: %v", p, err)
			}
		}
		reads := api.ReadRequest{Reads: []api.ReadOp{{Path: dir, Children: true}, {Path: dir}, {Path: dir + "-missing", Children: true}}}
		if m.Shard(dir+"-missing") != m.Shard(dir) {
			t.Fatalf("%s-missing is not a sibling of %s", dir, dir)
		}
		var out api.ReadResults
		if err := do(ctx, http.MethodPost, c.URL((shard+1)%3), "/v1/read", nil, reads, &out); err != nil {
			t.Fatalf("multi-read of %s: %v", dir, err)
		}
		if len(out.Results) != 3 {
			t.Fatalf("multi-read of %s: %d results", dir, len(out.Results))
		}
		list, node, missing := out.Results[0].Children, out.Results[1].Node, out.Results[2].Error
		if list == nil || !slices.Equal(list.Children, []string{"a", "b"}) || list.Shard != shard || list.Index == 0 {
			t.Fatalf("children of %s: %+v, want [a b] read in shard %d", dir, list, shard)
		}
		if node == nil || node.ChildrenCount != 2 || node.ChildrenIndex == 0 || node.Index != out.Index {
			t.Fatalf("node %s: %+v, want 2 children counted in shard %d", dir, node, shard)
		}
		if missing == nil || missing.Code != api.CodeNotFound {
			t.Fatalf("children of the missing %s-missing: %+v", dir, out.Results[2])
		}
		// A stale multi-read elsewhere with the indexes of this one, as a
		// vector (the node's shard, the children's), sees what it saw.
		vector := strconv.Itoa(m.Shard(dir)) + ":" + strconv.FormatUint(out.Index, 10) + "," + strconv.Itoa(shard) + ":" + strconv.FormatUint(list.Index, 10)
		q := url.Values{"consistency": {"stale"}, "min_index": {vector}}
		if err := do(ctx, http.MethodPost, c.URL(shard%3), "/v1/read", q, reads, &out); err != nil ||
			out.Results[0].Children == nil || len(out.Results[0].Children.Children) != 2 {
			t.Fatalf("stale multi-read of %s at its children's index: %+v, %v", dir, out, err)
		}
	}
}
