package server

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
)

// TestCountDescendantsEveryShard: on a 4-shard member CountDescendants
// counts the nodes below a path in every shard, by a scan of each shard's
// part and, once a quota sits at the path, from each shard's quota count;
// both follow a delete.
func TestCountDescendantsEveryShard(t *testing.T) {
	const shards = 4
	s := startShardedMember(t, shards)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const dirs = 8
	held := map[int]bool{}
	for i := range dirs {
		path := fmt.Sprintf("/q/d%d/n", i)
		if _, err := s.Put(ctx, PutRequest{Path: path, Value: []byte("ab")}); err != nil {
			t.Fatal(err)
		}
		held[s.shards.Shard(path)] = true
	}
	if len(held) < 2 {
		t.Fatalf("the leaves lie in shards %v only: the test needs several", held)
	}
	check := func(when, path string, want int) {
		t.Helper()
		got, _, err := s.CountDescendants(ctx, path, ReadOptions{Consistency: api.Linearizable})
		if err != nil || got != want {
			t.Fatalf("%s: CountDescendants %s = %d, %v; want %d", when, path, got, err, want)
		}
	}
	check("by scans", "/q", 2*dirs)
	check("by scans", "/q/d3", 1)
	check("by scans", "/q/d3/n", 0)
	if _, _, err := s.CountDescendants(ctx, "/q/none", ReadOptions{}); api.CodeOf(err) != api.CodeNotFound {
		t.Fatalf("CountDescendants of a missing node: %v, want not_found", err)
	}
	if _, err := s.ChangeAuth(ctx, api.AuthChange{Action: "quota_set", Prefix: "/q", MaxNodes: 1000, MaxBytes: 1000}); err != nil {
		t.Fatal(err)
	}
	check("by quota counts", "/q", 2*dirs)
	if _, err := s.Delete(ctx, DeleteRequest{Path: "/q/d3/n"}); err != nil {
		t.Fatal(err)
	}
	check("by quota counts, after a delete", "/q", 2*dirs-1)
	check("by scans, after a delete", "/q/d3", 0)
}
