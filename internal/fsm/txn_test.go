package fsm

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/command"
)

func txn(ops ...command.TxnOp) command.Command {
	return command.Command{Op: command.OpTxn, Ops: ops}
}

func txnCreate(path, value string) command.TxnOp {
	return command.TxnOp{Kind: command.TxnCreate, Path: path, Value: []byte(value)}
}

func txnSet(path, value string, version uint64) command.TxnOp {
	op := command.TxnOp{Kind: command.TxnSet, Path: path, Value: []byte(value)}
	if version != 0 {
		op.Precondition, op.Version = command.PrecondVersion, version
	}
	return op
}

func txnDelete(path string) command.TxnOp { return command.TxnOp{Kind: command.TxnDelete, Path: path} }

func txnCheck(path string, precondition command.Precondition, version uint64) command.TxnOp {
	return command.TxnOp{Kind: command.TxnCheck, Path: path, Precondition: precondition, Version: version}
}

// TestTxnAppliesInOrderAtOneIndex: every operation sees the ones before it,
// results come per operation, and every event carries the one index.
func TestTxnAppliesInOrderAtOneIndex(t *testing.T) {
	h := newHarness(t)
	h.mustApply(put("/q", ""))
	h.mustApply(put("/b", "old"))
	h.mustApply(noop()) // let /q's counter (1) fall behind the index
	seq := command.TxnOp{Kind: command.TxnCreate, Path: "/q/job-", Sequential: true}
	r, events := h.apply(txn(
		txnCreate("/a", "1"),
		txnSet("/a", "22", 1),
		txnCheck("/a", command.PrecondVersion, 2),
		seq, seq,
		txnDelete("/b"),
		txnCheck("/b", command.PrecondNone, 0),
	))
	if r.Err != nil {
		t.Fatalf("txn refused: %v", r.Err)
	}
	const at = 4
	want := []TxnOpResult{
		{Node: NodeMeta{Path: "/a", Version: 1, CreatedIndex: at, ModifiedIndex: at}, DataLength: 1},
		{Node: NodeMeta{Path: "/a", Version: 2, CreatedIndex: at, ModifiedIndex: at}, DataLength: 2},
		{Node: NodeMeta{Path: "/a", Version: 2, CreatedIndex: at, ModifiedIndex: at}, DataLength: 2},
		{Node: NodeMeta{Path: "/q/job-0000000001", Version: 1, CreatedIndex: at, ModifiedIndex: at}},
		{Node: NodeMeta{Path: "/q/job-0000000002", Version: 1, CreatedIndex: at, ModifiedIndex: at}},
		{Node: NodeMeta{Path: "/b", Version: 1, CreatedIndex: 2, ModifiedIndex: 2}},
		{Node: NodeMeta{Path: "/b"}},
	}
	if r.Txn == nil || !reflect.DeepEqual(r.Txn.Ops, want) {
		t.Fatalf("results:\n got %+v\nwant %+v", r.Txn, want)
	}
	wantEvents := []Event{
		{Kind: EventCreated, Path: "/a", Version: 1, Index: at},
		{Kind: EventChildrenChanged, Path: "/", Index: at},
		{Kind: EventChanged, Path: "/a", Version: 2, Index: at},
		{Kind: EventCreated, Path: "/q/job-0000000001", Version: 1, Index: at},
		{Kind: EventChildrenChanged, Path: "/q", Version: 1, Index: at},
		{Kind: EventCreated, Path: "/q/job-0000000002", Version: 1, Index: at},
		{Kind: EventChildrenChanged, Path: "/q", Version: 1, Index: at},
		{Kind: EventDeleted, Path: "/b", Version: 1, Index: at},
		{Kind: EventChildrenChanged, Path: "/", Index: at},
	}
	if !reflect.DeepEqual(events, wantEvents) {
		t.Errorf("events:\n got %+v\nwant %+v", events, wantEvents)
	}
	if err := checkInvariants(h.f); err != nil {
		t.Error(err)
	}
}

// TestTxnRefusalChangesNothing: whichever operation fails, the state is
// exactly what it was before the transaction (nothing but the applied
// index moves), no event is published, and the result names the failing
// operation and its error.
func TestTxnRefusalChangesNothing(t *testing.T) {
	setup := func(h *harness) uint64 {
		s := h.mustApply(createSession(5000)).SessionID
		h.mustApply(put("/a", "1"))
		h.mustApply(put("/dir/child", ""))
		h.mustApply(putEphemeral("/eph", "", s))
		return s
	}
	tests := []struct {
		name   string
		ops    []command.TxnOp
		failed int
		code   api.Code
	}{
		{"create over an existing node", []command.TxnOp{txnCreate("/new", "x"), txnCreate("/a", "y")}, 1, api.CodePreconditionFailed},
		{"create made earlier in the txn", []command.TxnOp{txnCreate("/new", "x"), txnCreate("/new", "y")}, 1, api.CodePreconditionFailed},
		{"set of a missing node", []command.TxnOp{txnSet("/a", "2", 0), txnSet("/missing", "y", 0)}, 1, api.CodeNotFound},
		{"set at a stale version", []command.TxnOp{txnSet("/a", "2", 1), txnSet("/a", "3", 1)}, 1, api.CodePreconditionFailed},
		{"delete of a missing node", []command.TxnOp{txnDelete("/a"), txnDelete("/a")}, 1, api.CodeNotFound},
		{"delete of a directory", []command.TxnOp{txnCreate("/x/y", ""), txnDelete("/dir")}, 1, api.CodePreconditionFailed},
		{"delete of another session's ephemeral", []command.TxnOp{txnDelete("/a"), txnDelete("/eph")}, 1, api.CodePreconditionFailed},
		{"check of a missing node", []command.TxnOp{txnDelete("/dir/child"), txnCheck("/dir/child", command.PrecondAny, 0)}, 1, api.CodeNotFound},
		{"check of absence", []command.TxnOp{txnCheck("/a", command.PrecondNone, 0)}, 0, api.CodePreconditionFailed},
		{"check of a version", []command.TxnOp{txnSet("/a", "2", 0), txnCheck("/a", command.PrecondVersion, 1)}, 1, api.CodePreconditionFailed},
		{"child of an ephemeral", []command.TxnOp{txnCreate("/z", ""), txnCreate("/eph/c", "")}, 1, api.CodeInvalidArgument},
		{"ephemeral without a session", []command.TxnOp{txnCreate("/z", ""), {Kind: command.TxnCreate, Path: "/e2", Ephemeral: true}}, 1, api.CodeInvalidArgument},
		{"invalid path", []command.TxnOp{txnCreate("/z", ""), txnCreate("/bad/", "")}, 1, api.CodeInvalidArgument},
		{"root delete", []command.TxnOp{txnDelete("/")}, 0, api.CodeInvalidArgument},
		{"checks, a change, then a refusal", []command.TxnOp{txnCheck("/a", command.PrecondAny, 0), txnCheck("/dir", command.PrecondAny, 0), txnCreate("/new", "x"), txnCreate("/a", "y")}, 3, api.CodePreconditionFailed},
		{"a check, then the refused change", []command.TxnOp{txnCheck("/dir", command.PrecondAny, 0), txnCreate("/dir/child", "y")}, 1, api.CodePreconditionFailed},
		{"a check, a change, a refused check", []command.TxnOp{txnCheck("/a", command.PrecondAny, 0), txnSet("/a", "2", 0), txnCheck("/a", command.PrecondVersion, 1)}, 2, api.CodePreconditionFailed},
		{"last op fails after many", []command.TxnOp{txnCreate("/m/1", ""), txnCreate("/m/2", ""), txnSet("/a", "9", 0), txnDelete("/dir/child"), txnCheck("/m/1", command.PrecondNone, 0)}, 4, api.CodePreconditionFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			setup(h)
			before, hashBefore := tree(h.f), h.f.Clone()
			r, events := h.apply(txn(tt.ops...))
			if codeOf(r.Err) != tt.code || r.Txn == nil || r.Txn.Failed != tt.failed {
				t.Fatalf("result %+v (txn %+v), want op %d refused with %s", r, r.Txn, tt.failed, tt.code)
			}
			if events != nil {
				t.Errorf("a refused transaction published %v", events)
			}
			if after := tree(h.f); after != before {
				t.Errorf("tree changed:\n%s\nwas\n%s", after, before)
			}
			hashBefore.Advance(h.index)
			if h.f.Hash() != hashBefore.Hash() {
				t.Error("state hash changed (sessions, owner index or members differ)")
			}
			if err := checkInvariants(h.f); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestTxnRefusedAsAWhole: a transaction with no operation, or on behalf
// of a session that is not live, is refused before any operation.
func TestTxnRefusedAsAWhole(t *testing.T) {
	h := newHarness(t)
	s := h.mustApply(createSession(5000)).SessionID
	h.mustApply(closeSession(s))
	empty, _ := h.apply(txn())
	if codeOf(empty.Err) != api.CodeInvalidArgument || empty.Txn != nil {
		t.Errorf("empty txn: %+v", empty)
	}
	c := txn(txnCreate("/a", ""))
	c.SessionID = s
	expired, _ := h.apply(c)
	if codeOf(expired.Err) != api.CodeSessionExpired || expired.Txn != nil {
		t.Errorf("txn of a closed session: %+v", expired)
	}
	if _, err := h.f.Get("/a"); codeOf(err) != api.CodeNotFound {
		t.Errorf("/a exists after refused txns: %v", err)
	}
}

// TestTxnShapeRefusals: flags and preconditions an operation's kind does
// not take are refused with invalid_argument.
func TestTxnShapeRefusals(t *testing.T) {
	tests := []struct {
		name string
		op   command.TxnOp
	}{
		{"ephemeral set", command.TxnOp{Kind: command.TxnSet, Path: "/a", Ephemeral: true}},
		{"sequential check", command.TxnOp{Kind: command.TxnCheck, Path: "/a", Sequential: true}},
		{"recursive create", command.TxnOp{Kind: command.TxnCreate, Path: "/a", Recursive: true}},
		{"delete with a value", command.TxnOp{Kind: command.TxnDelete, Path: "/a", Value: []byte("v")}},
		{"create with a version", command.TxnOp{Kind: command.TxnCreate, Path: "/a", Precondition: command.PrecondVersion, Version: 1}},
		{"set requiring absence", command.TxnOp{Kind: command.TxnSet, Path: "/a", Precondition: command.PrecondNone}},
		{"check of version 0", command.TxnOp{Kind: command.TxnCheck, Path: "/a", Precondition: command.PrecondVersion}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			h.mustApply(put("/a", ""))
			r, _ := h.apply(txn(txnCreate("/b", ""), tt.op))
			if codeOf(r.Err) != api.CodeInvalidArgument || r.Txn == nil || r.Txn.Failed != 1 {
				t.Fatalf("result %+v, want op 1 refused with invalid_argument", r)
			}
		})
	}
}

// TestTxnEphemeralCreates: an ephemeral create in a transaction belongs to
// the transaction's session, and goes with it.
func TestTxnEphemeralCreates(t *testing.T) {
	h := newHarness(t)
	s := h.mustApply(createSession(5000)).SessionID
	h.mustApply(put("/svc", ""))
	c := txn(
		command.TxnOp{Kind: command.TxnCreate, Path: "/svc/n-", Ephemeral: true, Sequential: true},
		command.TxnOp{Kind: command.TxnCreate, Path: "/svc/leader", Ephemeral: true},
	)
	c.SessionID = s
	r := h.mustApply(c)
	for _, op := range r.Txn.Ops {
		if op.Owner != s {
			t.Errorf("%s owned by %d, want session %d", op.Node.Path, op.Owner, s)
		}
	}
	if got := h.f.Sessions()[0].Ephemerals; got != 2 {
		t.Errorf("session owns %d ephemerals, want 2", got)
	}
	h.mustApply(closeSession(s))
	if names, _ := h.f.Children("/svc"); len(names) != 0 {
		t.Errorf("children after the session closed: %v", names)
	}
	if err := checkInvariants(h.f); err != nil {
		t.Error(err)
	}
}

// TestTxnExactlyOnce: a retried transaction (same session and
// request_seq) answers its first result, applied or refused, and applies
// nothing again.
func TestTxnExactlyOnce(t *testing.T) {
	h := newHarness(t)
	s := h.mustApply(createSession(5000)).SessionID
	h.mustApply(put("/q", ""))
	h.mustApply(noop())
	seqCreate := withSeq(txn(command.TxnOp{Kind: command.TxnCreate, Path: "/q/j-", Sequential: true}, txnCreate("/a", "x")), s, 1)
	first := h.mustApply(seqCreate)
	again, events := h.apply(seqCreate)
	if !reflect.DeepEqual(again, first) || events != nil {
		t.Fatalf("retry answered %+v with events %v, want %+v and none", again.Txn, events, first.Txn)
	}
	if names, _ := h.f.Children("/q"); len(names) != 1 {
		t.Errorf("/q has %v after a retry, want one child", names)
	}

	refused := withSeq(txn(txnCheck("/b", command.PrecondAny, 0)), s, 2)
	r1, _ := h.apply(refused)
	h.mustApply(put("/b", "")) // the check would now pass
	r2, _ := h.apply(refused)
	if codeOf(r2.Err) != api.CodeNotFound || r2.Txn == nil || r2.Txn.Failed != 0 || !reflect.DeepEqual(r1.Txn, r2.Txn) {
		t.Fatalf("retry of a refused txn: %+v %+v, want the first refusal %+v %+v", r2, r2.Txn, r1, r1.Txn)
	}
}

// TestTxnSequentialNamesNeverReused: a transaction may take several
// sequential numbers under one parent, but never a number above its own
// log index, so a parent deleted and made again cannot hand a name out
// twice; the same create succeeds once the index has moved past.
func TestTxnSequentialNamesNeverReused(t *testing.T) {
	h := newHarness(t)
	h.mustApply(put("/q", "")) // index 1: /q counts from 1
	seq := command.TxnOp{Kind: command.TxnCreate, Path: "/q/j-", Sequential: true}
	r, _ := h.apply(txn(seq, seq, seq)) // index 2: numbers 1, 2, then 3 > 2
	if codeOf(r.Err) != api.CodePreconditionFailed || r.Txn == nil || r.Txn.Failed != 2 {
		t.Fatalf("three sequential creates at index 2 under a counter at 1: %+v, want op 2 refused", r)
	}
	// Plain creates of names ahead of the counter, then a sequential
	// create that would skip them past the index.
	r, _ = h.apply(txn(txnCreate("/q/j-0000000001", ""), txnCreate("/q/j-0000000002", ""), txnCreate("/q/j-0000000003", ""),
		txnCreate("/q/j-0000000004", ""), seq))
	if codeOf(r.Err) != api.CodePreconditionFailed || r.Txn == nil || r.Txn.Failed != 4 {
		t.Fatalf("a skip past the index: %+v, want op 4 refused", r)
	}
	h.mustApply(noop())
	got := h.mustApply(txn(seq, seq, seq)) // index 5: numbers 1, 2, 3
	var taken []string
	for _, op := range got.Txn.Ops {
		taken = append(taken, op.Node.Path)
	}
	h.mustApply(delRecursive("/q"))
	h.mustApply(put("/q", ""))
	again := h.mustApply(txn(seq)).Txn.Ops[0].Node.Path
	for _, p := range taken {
		if p >= again {
			t.Errorf("after /q was made again, a create took %s, not above the earlier %v", again, taken)
		}
	}
}

// txnState is a state whose exactly-once windows hold an applied and a
// refused transaction.
func txnState(t *testing.T) *harness {
	h := newHarness(t)
	s := h.mustApply(createSession(5000)).SessionID
	h.mustApply(put("/q", ""))
	h.mustApply(noop())
	h.mustApply(withSeq(txn(command.TxnOp{Kind: command.TxnCreate, Path: "/q/e-", Ephemeral: true, Sequential: true, Value: []byte("v")}, txnSet("/q", "w", 1)), s, 1))
	h.apply(withSeq(txn(txnCreate("/z", ""), txnCheck("/missing", command.PrecondAny, 0)), s, 2))
	h.mustApply(withSeq(put("/plain", "p"), s, 3))
	return h
}

// TestTxnResultsSurviveSnapshot: the exactly-once window of transactions
// is written in snapshot format 3 and read back identical, so a retry
// through a replica restored from a snapshot answers the first result; a
// state without transaction results is still written in format 2.
func TestTxnResultsSurviveSnapshot(t *testing.T) {
	h := txnState(t)
	data := snapshotBytes(t, h.f)
	if data[len(snapshotMagic)] != snapshotVersionTxn {
		t.Fatalf("snapshot format %d, want %d", data[len(snapshotMagic)], snapshotVersionTxn)
	}
	restored := restore(t, data)
	if !bytes.Equal(snapshotBytes(t, restored), data) {
		t.Fatal("restored state re-encodes differently")
	}
	s := h.f.Sessions()[0].ID
	for seq := uint64(1); seq <= 3; seq++ {
		want, _, _ := mustSession(t, h.f, s).dedup.lookup(seq)
		got, _, _ := mustSession(t, restored, s).dedup.lookup(seq)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("request %d: restored result %+v (txn %+v), want %+v (txn %+v)", seq, got, got.Txn, want, want.Txn)
		}
	}
	plain := newHarness(t)
	ps := plain.mustApply(createSession(5000)).SessionID
	plain.mustApply(withSeq(put("/a", ""), ps, 1))
	if v := snapshotBytes(t, plain.f)[len(snapshotMagic)]; v != snapshotVersion {
		t.Errorf("a state without transactions is written in format %d, want %d", v, snapshotVersion)
	}
}

func mustSession(t *testing.T, f *FSM, id uint64) session {
	t.Helper()
	s, ok := f.sessions.Get(session{id: id})
	if !ok {
		t.Fatalf("session %d missing", id)
	}
	return s
}
