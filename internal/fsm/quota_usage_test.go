package fsm

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/command"
)

// checkQuotaCounts compares every quota's incremental count with a scan
// of the tree, and the counts with the quota table.
func checkQuotaCounts(f *FSM) error {
	if f.quota.counts.Len() != len(f.auth.quotas) {
		return fmt.Errorf("%d quota counts for %d quotas", f.quota.counts.Len(), len(f.auth.quotas))
	}
	for _, q := range f.Quotas() {
		nodes, bytes := f.scanUsage(q.Prefix)
		if q.Nodes != nodes || q.Bytes != bytes {
			return fmt.Errorf("quota on %q counts %d nodes and %d bytes; the tree holds %d and %d", q.Prefix, q.Nodes, q.Bytes, nodes, bytes)
		}
	}
	return nil
}

// randomQuota is a quota set or clear on one of the generator's prefixes,
// with limits tight enough that creates, sets and transactions are often
// refused.
func (g *commandGenerator) randomQuota() command.Command {
	prefixes := []string{"/", "/a", "/a/b", "/b", "/ab", "/locks", "/c/a"}
	prefix := prefixes[g.rng.IntN(len(prefixes))]
	if g.rng.IntN(5) == 0 {
		return authCmd(command.AuthOp{Kind: command.AuthQuotaClear, Prefix: prefix})
	}
	nodes, bytes := uint64(g.rng.IntN(30)), uint64(g.rng.IntN(200))
	if prefix == "/" { // room enough for the others to fill
		nodes, bytes = nodes+60, bytes+600
	}
	return quotaSet(prefix, nodes, bytes)
}

// TestQuotaUsageIncremental applies random commands of every kind (creates
// with their ancestors, sets, sequential and ephemeral creates, queue
// joins, recursive deletes, transactions applied and refused, session
// closes and expiries deleting ephemerals) with quotas set, changed and
// cleared among them, and checks after every command that each quota's
// incremental count equals a scan; a snapshot round trip and a clone keep
// the counts, and the restored state refuses and accepts what the original
// does.
func TestQuotaUsageIncremental(t *testing.T) {
	seed := testSeed(t)
	g := newCommandGenerator(seed)
	f := New()
	var restored *FSM
	refusals := 0
	for i := range *stepsFlag {
		c := g.next()
		if g.rng.IntN(25) == 0 {
			c = g.randomQuota()
		}
		res, _ := f.Apply(g.index, decoded(t, c))
		if codeOf(res.Err) == api.CodeQuotaExceeded {
			refusals++
		}
		if err := checkQuotaCounts(f); err != nil {
			t.Fatalf("seed %d, index %d, after %v %q: %v", seed, g.index, c.Op, c.Path, err)
		}
		if restored != nil {
			again, _ := restored.Apply(g.index, decoded(t, c))
			if codeOf(again.Err) != codeOf(res.Err) {
				t.Fatalf("seed %d, index %d: the restored state answered %v, the original %v", seed, g.index, again.Err, res.Err)
			}
		}
		if i == *stepsFlag/2 {
			restored = restore(t, snapshotBytes(t, f))
			if err := checkQuotaCounts(restored); err != nil {
				t.Fatalf("after a snapshot round trip: %v", err)
			}
			clone := f.Clone()
			if err := checkQuotaCounts(clone); err != nil {
				t.Fatalf("clone: %v", err)
			}
		}
	}
	if refusals == 0 {
		t.Errorf("seed %d: no write was refused by a quota: the test checks nothing of the limits", seed)
	}
	if restored.Hash() != f.Hash() {
		t.Errorf("the restored state's hash differs at the end")
	}
	t.Logf("%d quota refusals; quotas at the end: %+v", refusals, f.Quotas())
}

// TestQuotaCountsSessionEnd: a session's end deletes its ephemeral nodes
// from the counts; a refused transaction leaves them as they were.
func TestQuotaCountsSessionEnd(t *testing.T) {
	h := buildState(t, []command.Command{quotaSet("/q", 4, 10), createSession(5000)})
	sid := uint64(2)
	h.mustApply(putEphemeral("/q/e1", "1234", sid))
	h.mustApply(putEphemeral("/q/e2", "12", sid))
	if q := h.f.Quotas()[0]; q.Nodes != 3 || q.Bytes != 6 {
		t.Fatalf("usage %+v, want 3 nodes (with /q) and 6 bytes", q)
	}
	txn := command.Command{Op: command.OpTxn, Ops: []command.TxnOp{
		{Kind: command.TxnCreate, Path: "/q/t1", Value: []byte("1")}, {Kind: command.TxnCreate, Path: "/q/t2"}}}
	if res, _ := h.apply(txn); codeOf(res.Err) != api.CodeQuotaExceeded {
		t.Fatalf("a transaction over the quota: %v", res.Err)
	}
	if q := h.f.Quotas()[0]; q.Nodes != 3 || q.Bytes != 6 {
		t.Fatalf("usage after a refused transaction %+v, want 3 and 6", q)
	}
	h.mustApply(closeSession(sid))
	if q := h.f.Quotas()[0]; q.Nodes != 1 || q.Bytes != 0 {
		t.Fatalf("usage after the session's end %+v, want 1 node and 0 bytes", q)
	}
	h.mustApply(txn)
	if err := checkQuotaCounts(h.f); err != nil {
		t.Fatal(err)
	}
}

// TestQuotaSnapshotOneShardUnchanged: with one shard the snapshot of a
// state with quotas is written in the versions it was before the ledger
// (usage is not written: it is counted when read).
func TestQuotaSnapshotOneShardUnchanged(t *testing.T) {
	h := buildState(t, []command.Command{quotaSet("/q", 5, 0), put("/q/a", "v")})
	data := snapshotBytes(t, h.f)
	if v := data[len(snapshotMagic)]; v > snapshotVersionMax {
		t.Fatalf("a one-shard state with quotas is written in version %d", v)
	}
	back := restore(t, data)
	if err := checkQuotaCounts(back); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(snapshotBytes(t, back), data) {
		t.Fatal("the restored state serialises differently")
	}
}
