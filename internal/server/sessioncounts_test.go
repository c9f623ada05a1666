package server

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
)

// TestSessionCountsEveryShard: a session's ephemeral nodes lie in every
// shard (under directories whose children live in each), and the figures
// that count them cover every shard: GetSession's and ListSessions'
// ephemeral_count, and StateCounts' node count (the four-letter words'),
// which counts the root once although every shard keeps one; both follow
// the session's close. One shard is the unchanged path.
func TestSessionCountsEveryShard(t *testing.T) {
	for _, shards := range []int{1, 4} {
		t.Run(fmt.Sprintf("shards=%d", shards), func(t *testing.T) {
			testSessionCounts(t, shards)
		})
	}
}

func testSessionCounts(t *testing.T, shards int) {
	s := startShardedMember(t, shards)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	linearizable := ReadOptions{Consistency: api.Linearizable}
	base, _, err := s.CountDescendants(ctx, "/", linearizable)
	if err != nil {
		t.Fatal(err)
	}
	newSession := func() uint64 {
		t.Helper()
		sess, err := s.CreateSession(ctx, 60_000)
		if err != nil {
			t.Fatal(err)
		}
		id, err := api.ParseID(sess.SessionID)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	owner, idle := newSession(), newSession()

	// One directory per shard holds an ephemeral node of owner (in that
	// shard) and a persistent one; /e and /e/dN are made on the way.
	created, ephemerals := 1, 0 // /e
	held := map[int]bool{}
	for i := 0; len(held) < shards; i++ {
		dir := fmt.Sprintf("/e/d%d", i)
		shard := s.shards.ChildShard(dir)
		if held[shard] {
			continue
		}
		held[shard] = true
		if _, err := s.Put(ctx, PutRequest{Path: dir + "/eph", Ephemeral: true, SessionID: owner}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Put(ctx, PutRequest{Path: dir + "/p"}); err != nil {
			t.Fatal(err)
		}
		created += 3
		ephemerals++
	}

	// wantOwner < 0: owner is closed, no longer described or listed.
	check := func(when string, wantOwner, wantNodes int) {
		t.Helper()
		if wantOwner >= 0 {
			got, err := s.GetSession(ctx, owner, linearizable)
			if err != nil || got.EphemeralCount != wantOwner {
				t.Errorf("%s: GetSession ephemeral_count = %d, %v; want %d", when, got.EphemeralCount, err, wantOwner)
			}
		}
		if got, err := s.GetSession(ctx, idle, linearizable); err != nil || got.EphemeralCount != 0 {
			t.Errorf("%s: GetSession of the idle session: ephemeral_count = %d, %v; want 0", when, got.EphemeralCount, err)
		}
		want := map[string]int{api.FormatSessionHandle(idle): 0}
		if wantOwner >= 0 {
			want[api.FormatSessionHandle(owner)] = wantOwner
		}
		got1, err := s.ListSessions(ctx, Page{Limit: 1}, linearizable)
		if err != nil {
			t.Fatal(err)
		}
		got2, err := s.ListSessions(ctx, Page{Limit: 1, After: got1.NextAfter}, linearizable)
		if err != nil {
			t.Fatal(err)
		}
		listed := map[string]int{}
		for _, e := range append(got1.Sessions, got2.Sessions...) {
			listed[e.SessionHandle] = e.EphemeralCount
		}
		if fmt.Sprint(listed) != fmt.Sprint(want) || got1.Count != len(want) {
			t.Errorf("%s: ListSessions (two pages of one) = %v, count %d; want %v", when, listed, got1.Count, want)
		}
		if c := s.StateCounts(); c.Nodes != wantNodes || c.Sessions != len(want) {
			t.Errorf("%s: StateCounts = %+v, want %d nodes (the root included) and %d sessions", when, c, wantNodes, len(want))
		}
	}
	check("with an ephemeral node in every shard", ephemerals, int(base)+created+1)

	if _, err := s.CloseSession(ctx, owner); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetSession(ctx, owner, linearizable); api.CodeOf(err) != api.CodeNotFound {
		t.Errorf("GetSession of a closed session: %v, want not_found", err)
	}
	check("after the close", -1, int(base)+created-ephemerals+1)
}
