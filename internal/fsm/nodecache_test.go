package fsm

import (
	"fmt"
	"testing"

	"github.com/latch-io/latch/internal/command"
)

// TestNodeCacheFollowsTheTree grows a state past the cache's first sizes,
// updates, deletes and makes a refused transaction undo its writes, checking
// after each step that every cached entry is the tree's and that lookups
// find what the tree holds.
func TestNodeCacheFollowsTheTree(t *testing.T) {
	f := New()
	apply := func(c command.Command) Result {
		t.Helper()
		r, _ := f.Apply(f.Applied()+1, &c)
		if err := checkNodeCache(f); err != nil {
			t.Fatalf("after %v %q: %v", c.Op, c.Path, err)
		}
		return r
	}
	const nodes = 5000
	path := func(i int) string { return fmt.Sprintf("/d%02d/k%05d", i%50, i) }
	for i := range nodes {
		if r := apply(command.Command{Op: command.OpPut, Path: path(i), Value: []byte("v")}); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	if got := len(f.cache.slots); got <= nodes || got > maxNodeCacheSlots {
		t.Fatalf("cache of %d slots for %d nodes, want more than the nodes and at most %d", got, nodes, maxNodeCacheSlots)
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
