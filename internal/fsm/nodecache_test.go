package fsm

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/command"
)

// applyCheckingCache returns a function that applies a command to f as
// its next entry and fails t unless f's node cache holds to its invariant
// afterwards (checkNodeCache).
func applyCheckingCache(t *testing.T, f *FSM) func(command.Command) Result {
	return func(c command.Command) Result {
		t.Helper()
		r, _ := f.Apply(f.Applied()+1, &c)
		if err := checkNodeCache(f); err != nil {
			t.Fatalf("after %v %q: %v", c.Op, c.Path, err)
		}
		return r
	}
}

// TestNodeCacheFollowsTheTree grows a state past the cache's first sizes,
// updates, deletes and makes a refused transaction undo its writes, checking
// after each step that every cached entry is the tree's and that lookups
// find what the tree holds.
func TestNodeCacheFollowsTheTree(t *testing.T) {
	f := New()
	apply := applyCheckingCache(t, f)
	const nodes = 5000
	path := func(i int) string { return fmt.Sprintf("/d%02d/k%05d", i%50, i) }
	for i := range nodes {
		if r := apply(command.Command{Op: command.OpPut, Path: path(i), Value: []byte("v")}); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	if got := len(f.cache.slots); got < 2*nodes || got > maxNodeCacheSlots {
		t.Fatalf("cache of %d slots for %d nodes, want at least twice the nodes and at most %d", got, nodes, maxNodeCacheSlots)
	}
	for i := 0; i < nodes; i += 7 {
		apply(command.Command{Op: command.OpPut, Path: path(i), Value: []byte("w")})
	}
	for i := 3; i < nodes; i += 11 {
		if r := apply(command.Command{Op: command.OpDelete, Path: path(i)}); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	// A transaction that sets a cached node, then fails its check: the set
	// is undone, and the cache must not keep it.
	refused := apply(command.Command{Op: command.OpTxn, Ops: []command.TxnOp{
		{Kind: command.TxnSet, Path: path(7), Value: []byte("undone")},
		{Kind: command.TxnCheck, Path: path(3), Precondition: command.PrecondAny},
	}})
	if refused.Err == nil {
		t.Fatal("a check of a deleted node passed")
	}
	for i := range nodes {
		e, ok := f.lookup(path(i))
		want := "v"
		switch {
		case i%11 == 3:
			if ok {
				t.Fatalf("%s: deleted, yet found", path(i))
			}
			continue
		case i%7 == 0:
			want = "w"
		}
		if !ok || string(e.value) != want {
			t.Fatalf("%s: found %v with %q, want %q", path(i), ok, e.value, want)
		}
	}
}

// TestEditsInPlaceSpareClones: a node's data is modified in place once f
// alone holds it (see edit), so a Clone must make every later edit copy
// the data the clone shares, for plain writes and transactions alike.
func TestEditsInPlaceSpareClones(t *testing.T) {
	f := New()
	set := func(value string, txn bool) {
		t.Helper()
		c := command.Command{Op: command.OpPut, Path: "/a", Value: []byte(value)}
		if txn {
			c = command.Command{Op: command.OpTxn, Ops: []command.TxnOp{{Kind: command.TxnSet, Path: "/a", Value: []byte(value)}}}
		}
		if r, _ := f.Apply(f.Applied()+1, &c); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	for i, txn := range []bool{false, true} {
		set("1", txn)
		set("2", txn) // the first edit copied: this one and the next are in place
		set("3", txn)
		clone := f.Clone()
		set("4", txn)
		set("5", txn)
		if n, err := clone.Get("/a"); err != nil || string(n.Value) != "3" || n.Version != uint64(3+5*i) {
			t.Fatalf("txn %v: the clone reads %q version %d (%v), want \"3\" version %d", txn, n.Value, n.Version, err, 3+5*i)
		}
		if n, _ := f.Get("/a"); string(n.Value) != "5" {
			t.Fatalf("txn %v: the original reads %q, want \"5\"", txn, n.Value)
		}
	}
}

// TestNodeCacheKeepsAWorkingSet: nodes written in random order, as a
// workload of keys drawn at random writes them, stay cached: at least 93% of
// 10,000 (95.5% expected: two slots a node, two ways a set; one slot a node
// in direct-mapped slots keeps 75%, either change alone 86%).
func TestNodeCacheKeepsAWorkingSet(t *testing.T) {
	seed := testSeed(t)
	r := rand.New(rand.NewPCG(seed, seed))
	f := New()
	const nodes = 10_000
	path := func(i int) string { return fmt.Sprintf("/bench/k%08d", i) }
	write := func(i int, value string) {
		c := command.Command{Op: command.OpPut, Path: path(i), Value: []byte(value)}
		if res, _ := f.Apply(f.Applied()+1, &c); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	for _, i := range r.Perm(nodes) {
		write(i, "v")
	}
	for _, i := range r.Perm(nodes) { // every one once since the cache last grew
		write(i, "w")
	}
	if err := checkNodeCache(f); err != nil {
		t.Fatal(err)
	}
	cached := 0
	for i := range nodes {
		h, set := f.cache.index(path(i))
		if f.cache.find(path(i), h, set) != nil {
			cached++
		}
	}
	if cached < nodes*93/100 {
		t.Fatalf("%d of %d nodes cached (%d slots), want at least 93%%", cached, nodes, len(f.cache.slots))
	}
	t.Logf("%d of %d nodes cached in %d slots", cached, nodes, len(f.cache.slots))
}

// TestNodeCacheSetOfTwo walks the moves within one set: a path stored
// again while in the second slot, the second slot's path stored once the
// first was emptied by a delete, and a refused transaction that stored two
// paths of the set (each moving the one before to the second slot): after
// each, every cached entry is the tree's and no path is cached twice.
func TestNodeCacheSetOfTwo(t *testing.T) {
	f := New()
	apply := applyCheckingCache(t, f)
	put := func(p, v string) {
		t.Helper()
		if r := apply(command.Command{Op: command.OpPut, Path: p, Value: []byte(v)}); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	put("/x", "v") // the cache exists from the first write on
	// Three paths of one set (the cache keeps its size: a few nodes).
	var same []string
	_, want := f.cache.index("/p0")
	for i := 0; len(same) < 3; i++ {
		p := fmt.Sprintf("/p%d", i)
		if _, set := f.cache.index(p); set == want {
			same = append(same, p)
		}
	}
	a, b, c := same[0], same[1], same[2]
	put(c, "1") // moved out by a's and b's writes
	put(a, "1")
	put(b, "1") // b first, a second
	put(a, "2") // a from the second slot to the first
	if r := apply(command.Command{Op: command.OpDelete, Path: a}); r.Err != nil {
		t.Fatal(r.Err)
	}
	put(b, "2") // the first slot is empty, b is in the second
	put(a, "3")
	refused := apply(command.Command{Op: command.OpTxn, Ops: []command.TxnOp{
		{Kind: command.TxnSet, Path: b, Value: []byte("undone")},
		{Kind: command.TxnSet, Path: c, Value: []byte("undone")},
		{Kind: command.TxnCheck, Path: "/missing", Precondition: command.PrecondAny},
	}})
	if refused.Err == nil || refused.Txn == nil || refused.Txn.Failed != 2 {
		t.Fatalf("the transaction ended with %v (%+v), want its check refused", refused.Err, refused.Txn)
	}
	for p, v := range map[string]string{a: "3", b: "2", c: "1"} {
		if e, ok := f.lookup(p); !ok || string(e.value) != v {
			t.Fatalf("%s: found %v with %q, want %q", p, ok, e.value, v)
		}
	}
}

// TestNodeCacheStaysWithinItsMax: the cache grows with the tree, never past
// maxNodeCacheSlots.
func TestNodeCacheStaysWithinItsMax(t *testing.T) {
	f := New()
	for i := range 20_000 {
		c := command.Command{Op: command.OpPut, Path: fmt.Sprintf("/d%02d/k%05d", i%50, i), Value: []byte("v")}
		if r, _ := f.Apply(f.Applied()+1, &c); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	if got := len(f.cache.slots); got != maxNodeCacheSlots {
		t.Fatalf("%d nodes: %d slots, want %d", f.NodeCount(), got, maxNodeCacheSlots)
	}
}

// TestRefusalsAfterInPlaceEdits: a write refused after its node's data
// became editable in place (no Clone between: a Clone would make the write
// copy) changes nothing, as a single write and as a transaction.
func TestRefusalsAfterInPlaceEdits(t *testing.T) {
	for _, txn := range []bool{false, true} {
		f := New()
		apply := func(c command.Command) Result {
			t.Helper()
			r, _ := f.Apply(f.Applied()+1, &c)
			return r
		}
		if r := apply(quotaSet("/b", 1<<20, 8)); r.Err != nil {
			t.Fatal(r.Err)
		}
		for i, v := range []string{"1", "22", "333"} { // a create, a copy, an edit in place
			if r := apply(command.Command{Op: command.OpPut, Path: "/b/x", Value: []byte(v), TimeMs: uint64(100 + i)}); r.Err != nil {
				t.Fatal(r.Err)
			}
		}
		want := tree(f)
		c := command.Command{Op: command.OpPut, Path: "/b/x", Value: []byte("too long a value"), TimeMs: 999}
		if txn {
			c = command.Command{Op: command.OpTxn, TimeMs: 999, Ops: []command.TxnOp{{Kind: command.TxnSet, Path: "/b/x", Value: []byte("too long a value")}}}
		}
		if r := apply(c); api.CodeOf(r.Err) != api.CodeQuotaExceeded {
			t.Fatalf("txn %v: %v, want %s", txn, r.Err, api.CodeQuotaExceeded)
		}
		if got := tree(f); got != want {
			t.Fatalf("txn %v: the refused write changed the tree:\n%s\nwas\n%s", txn, got, want)
		}
		if err := checkNodeCache(f); err != nil {
			t.Fatal(err)
		}
	}
}

// TestShardSnapshotReadDropsTheCache: a shard's state read from a snapshot
// does not keep the cached root of the empty state it was read into.
func TestShardSnapshotReadDropsTheCache(t *testing.T) {
	const shards = 3
	probe, err := NewShard(0, shards)
	if err != nil {
		t.Fatal(err)
	}
	k := probe.placementMap().Shard("/")
	f, err := NewShard(k, shards)
	if err != nil {
		t.Fatal(err)
	}
	c := command.Command{Op: command.OpPut, Path: "/", Value: []byte("root")}
	if r, _ := f.Apply(1, &c); r.Err != nil {
		t.Fatal(r.Err)
	}
	read, err := ReadShardSnapshot(bytes.NewReader(snapshotBytes(t, f)), k, shards)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkNodeCache(read); err != nil {
		t.Fatal(err)
	}
	if n, err := read.Get("/"); err != nil || string(n.Value) != "root" || n.Version != 1 {
		t.Fatalf("root read back: %q version %d (%v), want \"root\" version 1", n.Value, n.Version, err)
	}
}

// TestReadersUnderReadLock runs readers of the live state under a read
// lock while writes (some of them refused transactions) apply under the
// write lock, as the replica does: under -race it fails if a read path
// writes the cache or a node's data.
func TestReadersUnderReadLock(t *testing.T) {
	f := New()
	const n = 3000
	path := func(i int) string { return fmt.Sprintf("/d%02d/k%05d", i%30, i) }
	for i := range n {
		c := command.Command{Op: command.OpPut, Path: path(i), Value: []byte("v")}
		if r, _ := f.Apply(f.Applied()+1, &c); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	var mu sync.RWMutex
	done := make(chan struct{})
	var wg sync.WaitGroup
	for r := range 4 {
		wg.Go(func() {
			for i := r; ; i += 13 {
				select {
				case <-done:
					return
				default:
				}
				mu.RLock()
				_, _ = f.Get(path(i % n))
				_, _ = f.Children(fmt.Sprintf("/d%02d", i%30))
				mu.RUnlock()
			}
		})
	}
	for i := range 3000 {
		c := command.Command{Op: command.OpPut, Path: path(i * 7 % n), Value: []byte(fmt.Sprint(i))}
		if i%5 == 0 {
			c = command.Command{Op: command.OpTxn, Ops: []command.TxnOp{
				{Kind: command.TxnSet, Path: path(i * 11 % n), Value: []byte("t")},
				{Kind: command.TxnCheck, Path: "/absent"},
			}}
		}
		mu.Lock()
		f.Apply(f.Applied()+1, &c)
		mu.Unlock()
	}
	close(done)
	wg.Wait()
	if err := checkNodeCache(f); err != nil {
		t.Fatal(err)
	}
}
