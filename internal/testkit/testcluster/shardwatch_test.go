package testcluster

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/client"
)

// Watches across shards, in a 3-member cluster of 4 shards (docs/api.md,
// "Watch rules"): a recursive watch gets the events of every shard, each
// tagged with its shard, in index order per shard; a watch re-registered
// with each shard's known index catches up per shard; an integer
// known_index for a watch over several shards is refused.

// watchCrossShardDirs makes, under parent, a directory whose children live
// in each shard but one (crossShardDirs), each with a child, and a session
// whose stream is open on base with a persistent recursive watch on parent.
func watchCrossShardDirs(ctx context.Context, t *testing.T, base, parent string) (map[int]string, api.Session, *EventStream, api.Watch) {
	t.Helper()
	dirs := crossShardDirs(t, parent)
	for _, d := range dirs {
		if _, err := put(ctx, base, d+"/first", "x", ""); err != nil {
			t.Fatalf("put under %s: %v", d, err)
		}
	}
	sess, err := newSession(ctx, base, 20*time.Second)
	if err != nil {
		t.Fatalf("session: %v", err)
	}
	stream := openStream(t, base, sess.SessionID)
	reply, err := AddWatch(ctx, base, api.WatchRequest{Path: parent, Recursive: true, Persistent: true, SessionID: sess.SessionID})
	if err != nil {
		t.Fatalf("recursive watch on %s: %v", parent, err)
	}
	return dirs, sess, stream, reply
}

// TestShardsRecursiveWatchSeesEveryShard: a persistent recursive watch on a
// prefix whose directories live in every shard sees each write once, tagged
// with the shard of the written node, and per shard in increasing index
// order; an exact watch on a directory whose children live in another shard
// gets its CHILDREN_CHANGED from that shard.
func TestShardsRecursiveWatchSeesEveryShard(t *testing.T) {
	c := newShardedCluster(t)
	ctx := ctxT(t, 60*time.Second)
	base := c.URL(1)
	dirs, sess, stream, reply := watchCrossShardDirs(ctx, t, base, "/w")
	defer stream.Close()
	if len(reply.Indexes) != wiringShards {
		t.Fatalf("reply indexes %v, want one per shard", reply.Indexes)
	}
	var exactDir string
	var exactChildShard int
	for k, d := range dirs {
		exactDir, exactChildShard = d, k
		break
	}
	exact, err := AddWatch(ctx, base, api.WatchRequest{Path: exactDir, SessionID: sess.SessionID})
	if err != nil {
		t.Fatalf("exact watch on %s: %v", exactDir, err)
	}
	want := map[string]int{} // path -> shard of its CREATED event
	for round := range 3 {
		for _, d := range dirs {
			p := fmt.Sprintf("%s/n%d", d, round)
			if _, err := put(ctx, c.URL(round%3), p, "v", ""); err != nil {
				t.Fatalf("put %s: %v", p, err)
			}
			want[p] = placement4.Shard(p)
		}
	}
	seen := map[string]int{}
	last := map[int]uint64{}
	exactFired := false
	deadline := time.Now().Add(30 * time.Second)
	for (len(seen) < len(want) || !exactFired) && time.Now().Before(deadline) {
		ev, ok := stream.Next(time.Until(deadline))
		if !ok {
			t.Fatalf("stream ended (%s) with %d of %d writes seen", stream.Reason(), len(seen), len(want))
		}
		if ev.WatchID == exact.WatchID {
			if ev.Event != "CHILDREN_CHANGED" || ev.Path != exactDir || ev.Shard != exactChildShard {
				t.Fatalf("exact watch on %s fired %+v, want CHILDREN_CHANGED from shard %d", exactDir, ev, exactChildShard)
			}
			exactFired = true
			continue
		}
		if ev.Index < last[ev.Shard] {
			t.Fatalf("shard %d: event at %d after one at %d", ev.Shard, ev.Index, last[ev.Shard])
		}
		last[ev.Shard] = ev.Index
		if ev.Event != "CREATED" {
			continue
		}
		if shard, ok := want[ev.Path]; ok {
			if ev.Shard != shard {
				t.Fatalf("%s created in shard %d, event says %d", ev.Path, shard, ev.Shard)
			}
			seen[ev.Path]++
			if seen[ev.Path] > 1 {
				t.Fatalf("CREATED %s twice", ev.Path)
			}
		}
	}
	if len(seen) < len(want) || !exactFired {
		t.Fatalf("saw %d of %d creates, exact watch fired: %v", len(seen), len(want), exactFired)
	}
}

// TestShardsWatchResumesWithKnownIndexes: a recursive watch re-registered
// with the position it reached in each shard fires at once, tagged with the
// shard, for a change made in one shard while no stream was open, and not
// for the shards where nothing changed; an integer known_index is refused
// for a watch spanning shards.
func TestShardsWatchResumesWithKnownIndexes(t *testing.T) {
	c := newShardedCluster(t)
	ctx := ctxT(t, 60*time.Second)
	base := c.URL(0)
	dirs, sess, stream, reply := watchCrossShardDirs(ctx, t, base, "/r")
	stream.Close()
	_, err := AddWatch(ctx, base, api.WatchRequest{Path: "/r", Recursive: true, SessionID: sess.SessionID, KnownIndex: 1})
	if api.CodeOf(err) != api.CodeInvalidArgument || !strings.Contains(err.Error(), "known_indexes") {
		t.Fatalf("integer known_index on a recursive watch: %v, want invalid_argument naming known_indexes", err)
	}
	var target string
	var targetShard int
	for k, d := range dirs {
		target, targetShard = d+"/late", k
		break
	}
	created, err := put(ctx, c.URL(2), target, "x", "")
	if err != nil {
		t.Fatalf("put %s: %v", target, err)
	}
	// The watch is registered again on another member: once that member
	// applied the put, the change is one it finds at registration (the
	// catch-up under test), not one it applies after (a live event).
	if !waitFor(20*time.Second, func() bool { return c.Nodes[1].Server.ShardApplied(targetShard) >= created.ModifiedIndex }) {
		t.Fatalf("%s did not apply shard %d's index %d within 20s", c.Nodes[1].Name, targetShard, created.ModifiedIndex)
	}
	other := openStream(t, c.URL(1), sess.SessionID)
	defer other.Close()
	resumed, err := AddWatch(ctx, c.URL(1), api.WatchRequest{Path: "/r", Recursive: true, Persistent: true,
		SessionID: sess.SessionID, KnownIndexes: reply.Indexes})
	if err != nil {
		t.Fatalf("re-register with known_indexes %v: %v", reply.Indexes, err)
	}
	ev, ok := other.Next(20 * time.Second)
	if !ok {
		t.Fatalf("no catch-up event (%s)", other.Reason())
	}
	if ev.WatchID != resumed.WatchID || ev.Shard != targetShard || ev.Index != resumed.Indexes[targetShard] {
		t.Fatalf("catch-up %+v, want shard %d at its registration index %d", ev, targetShard, resumed.Indexes[targetShard])
	}
	// Catch-up events are queued at registration, before any later
	// change: if the next event is a later write's, there was no other.
	sentinel := target + "-sentinel"
	if _, err := put(ctx, base, sentinel, "x", ""); err != nil {
		t.Fatalf("put %s: %v", sentinel, err)
	}
	if ev, ok := other.Next(20 * time.Second); !ok || ev.Path != sentinel {
		t.Fatalf("after the catch-up: %+v (%v, %s), want the sentinel's CREATED: only shard %d changed", ev, ok, other.Reason(), targetShard)
	}
}

// TestShardsStaleReadsReadYourWrites: on a cluster of 4 shards whose logs
// are far apart, the Go client's stale reads send every shard's position as
// min_index and read their own writes from any member (with one index for
// all shards, a read of a shard behind the busiest one would be refused as
// beyond that shard's commit index); the server takes a vector's entry for
// each shard a read touches, and refuses a malformed vector.
func TestShardsStaleReadsReadYourWrites(t *testing.T) {
	c := newShardedCluster(t)
	ctx := ctxT(t, 60*time.Second)
	dirs := crossShardDirs(t, "/ryw")
	busy := dirs[placement4.ChildShard(dirs[1])]
	cl, err := client.New(client.Config{Endpoints: c.URLs()})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := range 40 {
		if _, err := cl.Put(ctx, busy+"/hot", fmt.Sprint(i)); err != nil {
			t.Fatalf("put %s/hot: %v", busy, err)
		}
	}
	for round := range 3 {
		for _, d := range dirs {
			p := d + "/mine"
			written, err := cl.Put(ctx, p, fmt.Sprint(round))
			if err != nil {
				t.Fatalf("put %s: %v", p, err)
			}
			got, err := cl.Get(ctx, p, client.Stale())
			if err != nil {
				t.Fatalf("stale read of %s (shard %d) after writing it: %v", p, placement4.Shard(p), err)
			}
			if got.Version < written.Version {
				t.Fatalf("stale read of %s: version %d, below the written %d", p, got.Version, written.Version)
			}
		}
	}
	for _, tt := range []struct{ name, value string }{
		{"shard twice", "0:1,0:2"}, {"no index", "1:"}, {"negative shard", "-1:5"}, {"not a pair", "1:2,x"},
	} {
		err := Do(ctx, "GET", c.URL(0), "/v1/kv/ryw", url.Values{"min_index": {tt.value}}, nil, nil)
		if api.CodeOf(err) != api.CodeInvalidArgument {
			t.Errorf("%s (min_index=%s): %v, want invalid_argument", tt.name, tt.value, err)
		}
	}
}
