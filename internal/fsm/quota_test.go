package fsm

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/command"
)

func quotaSet(prefix string, nodes, bytes uint64) command.Command {
	return authCmd(command.AuthOp{Kind: command.AuthQuotaSet, Prefix: prefix, MaxNodes: nodes, MaxBytes: bytes})
}

// TestQuotaRefusesAndChangesNothing: creates (with the ancestors they
// make), sets, transactions and queue joins past a quota's nodes or bytes
// are refused with quota_exceeded and change nothing; deletes free room;
// paths outside the prefix are not counted.
func TestQuotaRefusesAndChangesNothing(t *testing.T) {
	h := buildState(t, []command.Command{quotaSet("/q", 3, 10), put("/q", "12"), put("/qx/a", "long value outside")})
	h.mustApply(put("/q/a", "1234"))
	before := tree(h.f)
	refused := []struct {
		name string
		cmd  command.Command
	}{
		{"bytes of a create", put("/q/b", "12345")},
		{"bytes of a set", put("/q/a", "123456789")},
		{"nodes of a create with its ancestor", put("/q/b/c", "")},
		{"a transaction", command.Command{Op: command.OpTxn, Ops: []command.TxnOp{
			{Kind: command.TxnCreate, Path: "/q/t1"}, {Kind: command.TxnCreate, Path: "/q/t2"}}}},
	}
	for _, r := range refused {
		if res, _ := h.apply(r.cmd); codeOf(res.Err) != api.CodeQuotaExceeded {
			t.Errorf("%s: %v, want quota_exceeded", r.name, res.Err)
		}
	}
	if tree(h.f) != before {
		t.Fatal("a refused write changed the state")
	}
	h.mustApply(put("/q/b", "1234")) // 3 nodes, 10 bytes: at the limits
	h.mustApply(put("/q/a", ""))     // shrinking is always allowed
	h.mustApply(del("/q/b"))
	h.mustApply(put("/q/c", "12345678"))
	if got := h.f.Quotas(); len(got) != 1 || got[0].Nodes != 3 || got[0].Bytes != 10 {
		t.Errorf("usage %+v, want 3 nodes and 10 bytes", got)
	}
	h.mustApply(authCmd(command.AuthOp{Kind: command.AuthQuotaClear, Prefix: "/q"}))
	h.mustApply(put("/q/d", "no limit any more"))
}

// TestQuotaSurvivesSnapshot: quotas travel in the auth frame; the usage,
// counted from the tree, is the same after a restore, and so are the
// refusals. A state whose only auth content is a quota is written and read.
func TestQuotaSurvivesSnapshot(t *testing.T) {
	h := buildState(t, []command.Command{quotaSet("/q", 2, 0), quotaSet("/a/b", 0, 5), put("/q/x", "v")})
	back := restore(t, snapshotBytes(t, h.f))
	if back.Hash() != h.f.Hash() {
		t.Fatal("restored state differs")
	}
	got := back.Quotas()
	if len(got) != 2 || got[0].Prefix != "/a/b" || got[1].Prefix != "/q" || got[1].Nodes != 2 {
		t.Fatalf("quotas after restore %+v", got)
	}
	restored := &harness{t: t, f: back, index: h.index}
	if res, _ := restored.apply(put("/q/y", "")); codeOf(res.Err) != api.CodeQuotaExceeded {
		t.Errorf("after restore: %v, want quota_exceeded", res.Err)
	}
}

// TestQuotaSnapshotDamage: a damaged quota list in the auth frame is
// refused with the offset.
func TestQuotaSnapshotDamage(t *testing.T) {
	data := snapshotBytes(t, buildState(t, []command.Command{quotaSet("/q", 2, 7)}).f)
	checkEveryFlipRefused(t, data)
	base := []frameSpec{header(5, 0, 0, 1), nodeFrame("", "/", 0, 0)}
	bad := map[string][]byte{
		"no limit":     append(append([]byte{0}, uvarints(0, 0, 0, 1, 2)...), append([]byte("/q"), uvarints(0, 0)...)...),
		"bad prefix":   append(append([]byte{0}, uvarints(0, 0, 0, 1, 2)...), append([]byte("q/"), uvarints(1, 0)...)...),
		"zero quotas":  append([]byte{0}, uvarints(0, 0, 0, 0)...),
		"out of order": append(append(append([]byte{0}, uvarints(0, 0, 0, 2, 2)...), append([]byte("/q"), uvarints(1, 0, 2)...)...), append([]byte("/a"), uvarints(1, 0)...)...),
	}
	for name, payload := range bad {
		all := append(append([]frameSpec{}, base...), frameSpec{frameAuth, payload}, frameSpec{frameEnd, nil})
		_, err := ReadSnapshot(bytes.NewReader(handMade(snapshotVersion+snapshotAuthRaise, all...)))
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		corruptOffset(t, err)
	}
}

// BenchmarkAuthCheck is the state machine's part of one authorized
// request: the token's user, then a write grant on a path, with the
// authSetup state (alice holds two roles).
func BenchmarkAuthCheck(b *testing.B) {
	f := buildState(b, authSetup).f
	d := digest(1)
	b.ReportAllocs()
	for b.Loop() {
		user, ok := f.TokenUser(d, 1500)
		if !ok || !f.Permitted(user, command.PermWrite, "/app/jobs/d042/key-0000042") {
			b.Fatal("refused")
		}
	}
}

// BenchmarkQuotaCheckedCreate is a create (and the delete that makes room
// for the next) under a quota whose prefix holds 1,000 nodes, with
// ...Unlimited beside it: the difference is the cost of checking and
// keeping the quota's usage at each write (a lookup per ancestor of the
// path since usage is kept incrementally; a scan of the 1,000 nodes
// before).
func BenchmarkQuotaCheckedCreate(b *testing.B) {
	benchCreateDelete(b, buildState(b, []command.Command{quotaSet("/q", 1<<40, 0)}))
}

func BenchmarkQuotaCheckedCreateUnlimited(b *testing.B) { benchCreateDelete(b, newHarness(b)) }

// benchCreateDelete fills /q with 1,000 nodes, then times a create and a
// delete under it.
func benchCreateDelete(b *testing.B, h *harness) {
	for i := range 1000 {
		h.mustApply(put(fmt.Sprintf("/q/n%04d", i), "v"))
	}
	b.ReportAllocs()
	for b.Loop() {
		h.mustApply(put("/q/new", "w"))
		h.mustApply(del("/q/new"))
	}
}
