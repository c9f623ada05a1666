package watch

import (
	"reflect"
	"testing"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/fsm"
)

// shardedWatch registers session's watch with a record in every shard of r,
// each at its own index ats[k] and known index known[k].
func shardedWatch(t *testing.T, r *Registry, session uint64, spec Spec, ats, known []uint64) (uint64, bool) {
	t.Helper()
	first := spec
	first.KnownIndex = known[0]
	id := mustAdd(t, r, session, first, ats[0], Current{})
	alive := true
	for k := 1; k < len(ats) && alive; k++ {
		next := spec
		next.KnownIndex = known[k]
		alive = r.Shard(k).ExtendLocked(session, id, next, ats[k], Current{Elsewhere: true})
	}
	return id, alive
}

type shardIndex struct {
	Shard int
	Index uint64
	Path  string
}

func shardIndexes(events []api.Event) []shardIndex {
	out := make([]shardIndex, len(events))
	for i, e := range events {
		out[i] = shardIndex{e.Shard, e.Index, e.Path}
	}
	return out
}

// TestShardsFireEachRecordAtItsOwnIndexes: a recursive watch with records
// in three shards fires for every shard's events above that shard's start,
// tags each event with its shard, and compares an index only with indexes
// of the same shard.
func TestShardsFireEachRecordAtItsOwnIndexes(t *testing.T) {
	r := New(Options{Shards: 3})
	const session = 1
	_, alive := shardedWatch(t, r, session, Spec{Path: "/a", Recursive: true, Persistent: true},
		[]uint64{10, 500, 3}, []uint64{0, 0, 0})
	if !alive {
		t.Fatal("a persistent watch without known indexes did not live on")
	}
	r.Shard(1).PublishLocked([]fsm.Event{changed("/a/x/y", 400), changed("/a/x/y", 501)}) // 400 is below shard 1's start
	r.Shard(0).PublishLocked([]fsm.Event{changed("/a/b", 11), changed("/other", 12)})
	r.Shard(2).PublishLocked([]fsm.Event{changed("/a/c/d", 4)})
	r.Shard(1).PublishLocked([]fsm.Event{changed("/a", 502)})
	want := []shardIndex{{1, 501, "/a/x/y"}, {0, 11, "/a/b"}, {2, 4, "/a/c/d"}, {1, 502, "/a"}}
	if got := shardIndexes(pending(r, session)); !reflect.DeepEqual(got, want) {
		t.Fatalf("events %+v, want %+v", got, want)
	}
}

// TestShardsOneShotFiresOnce: a one-shot watch over several shards fires
// once, whichever shard's event comes first, and a record added after it
// fired does not bring it back.
func TestShardsOneShotFiresOnce(t *testing.T) {
	r := New(Options{Shards: 2})
	const session = 1
	id := mustAdd(t, r, session, Spec{Path: "/a", Recursive: true}, 10, Current{})
	r.Shard(0).PublishLocked([]fsm.Event{changed("/a/b", 11)})
	if r.Shard(1).ExtendLocked(session, id, Spec{Path: "/a", Recursive: true}, 20, Current{Elsewhere: true}) {
		t.Fatal("ExtendLocked revived a one-shot watch that had fired")
	}
	r.Shard(1).PublishLocked([]fsm.Event{changed("/a/c", 21)})
	r.Shard(0).PublishLocked([]fsm.Event{changed("/a/b", 12)})
	if got := pending(r, session); len(got) != 1 || got[0].Index != 11 {
		t.Fatalf("events %+v, want one at index 11", got)
	}
	if n := r.Stats().Watches; n != 0 {
		t.Fatalf("%d watches left, want 0", n)
	}
	id2, alive := shardedWatch(t, r, session, Spec{Path: "/a", Recursive: true}, []uint64{20, 30}, []uint64{0, 0})
	if !alive {
		t.Fatal("second watch not alive")
	}
	r.Shard(1).PublishLocked([]fsm.Event{changed("/a/c", 31)})
	r.Shard(0).PublishLocked([]fsm.Event{changed("/a/b", 21)})
	if got := pending(r, session); len(got) != 2 || got[1].Index != 31 || got[1].Shard != 1 || got[1].WatchID != api.FormatID(id2) {
		t.Fatalf("events %+v, want the second watch's one event, shard 1 index 31", got)
	}
	if err := r.Cancel(session, id2); err == nil {
		t.Fatal("Cancel of a fired one-shot watch succeeded")
	}
}

// TestShardsKnownIndexesCatchUpPerShard: re-registered with a known index
// per shard, a watch fires at once only for the shards whose history has a
// change after that shard's known index, with the registration index of
// that shard.
func TestShardsKnownIndexesCatchUpPerShard(t *testing.T) {
	r := New(Options{Shards: 3})
	r.Shard(0).PublishLocked([]fsm.Event{changed("/a/x", 5)})
	r.Shard(1).PublishLocked([]fsm.Event{changed("/a/y", 50)})
	r.Shard(2).PublishLocked([]fsm.Event{changed("/b", 7)})
	const session = 1
	_, alive := shardedWatch(t, r, session, Spec{Path: "/a", Recursive: true, Persistent: true},
		[]uint64{6, 60, 9}, []uint64{5, 40, 6})
	if !alive {
		t.Fatal("watch not alive")
	}
	want := []shardIndex{{1, 60, "/a/y"}}
	if got := shardIndexes(pending(r, session)); !reflect.DeepEqual(got, want) {
		t.Fatalf("events %+v, want %+v", got, want)
	}
}

// TestShardsRestoreDisconnects: a snapshot installed in one shard drops the
// watches of every shard (its skipped events are unknown), and that shard's
// history restarts after the snapshot.
func TestShardsRestoreDisconnects(t *testing.T) {
	r := New(Options{Shards: 2})
	const session = 1
	stream := r.Stream(session)
	defer stream.Close()
	shardedWatch(t, r, session, Spec{Path: "/", Recursive: true, Persistent: true}, []uint64{1, 1}, []uint64{0, 0})
	r.Shard(1).RestoredLocked(100)
	if reason := waitDone(t, stream); reason != ReasonRestored {
		t.Fatalf("stream ended with %q, want %q", reason, ReasonRestored)
	}
	if n := r.Stats().Watches; n != 0 {
		t.Fatalf("%d watches left, want 0", n)
	}
}
