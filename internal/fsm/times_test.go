package fsm

import (
	"bytes"
	"errors"
	"testing"

	"github.com/latch-io/latch/internal/command"
)

// stamped is c with the proposal time timeMs, as replica.Propose stamps it.
func stamped(c command.Command, timeMs uint64) command.Command {
	c.TimeMs = timeMs
	return c
}

// mustGet reads path or fails the test.
func mustGet(t *testing.T, f *FSM, path string) Node {
	t.Helper()
	n, err := f.Get(path)
	if err != nil {
		t.Fatalf("Get %s: %v", path, err)
	}
	return n
}

// TestNodeTimes checks ctime, mtime, cversion and pzxid: the times come from
// the commands (never a clock), cversion counts every create and delete of
// a child (a session's end included) and pzxid is the index of the latest.
func TestNodeTimes(t *testing.T) {
	h := newHarness(t)
	h.mustApply(stamped(put("/d/a", "1"), 5000)) // index 1: makes /d too
	n := mustGet(t, h.f, "/d")
	if n.CreatedAtMs != 5000 || n.ModifiedAtMs != 5000 || n.ChildrenVersion != 1 || n.ChildrenModifiedIndex != 1 {
		t.Errorf("/d made by mkdir -p: %+v, want times 5000, cversion 1, pzxid 1", n)
	}
	h.mustApply(stamped(put("/d/a", "2"), 6000)) // 2
	a := mustGet(t, h.f, "/d/a")
	if a.CreatedAtMs != 5000 || a.ModifiedAtMs != 6000 || a.ChildrenVersion != 0 || a.ChildrenModifiedIndex != 1 {
		t.Errorf("/d/a after a write: %+v, want ctime 5000, mtime 6000, cversion 0, pzxid 1 (its create)", a)
	}
	h.mustApply(createSession(1000))                                                      // 3: session 3
	h.mustApply(stamped(putEphemeral("/d/e", "", 3), 7000))                               // 4
	h.mustApply(stamped(put("/d/b", ""), 7100))                                           // 5
	h.mustApply(stamped(del("/d/b"), 7200))                                               // 6
	h.mustApply(stamped(command.Command{Op: command.OpSessionClose, SessionID: 3}, 7300)) // 7: deletes /d/e
	n = mustGet(t, h.f, "/d")
	if n.ChildrenVersion != 5 || n.ChildrenModifiedIndex != 7 || n.ModifiedAtMs != 5000 || n.Version != 1 {
		t.Errorf("/d after 5 child changes: %+v, want cversion 5, pzxid 7, mtime and version unchanged", n)
	}
	// A transaction stamps its writes with its own time.
	h.mustApply(stamped(command.Command{Op: command.OpTxn, Ops: []command.TxnOp{
		{Kind: command.TxnCreate, Path: "/d/t"}, {Kind: command.TxnSet, Path: "/d/a", Value: []byte("3")},
	}}, 8000)) // 8
	if tn, a := mustGet(t, h.f, "/d/t"), mustGet(t, h.f, "/d/a"); tn.CreatedAtMs != 8000 || a.ModifiedAtMs != 8000 || a.CreatedAtMs != 5000 {
		t.Errorf("after a transaction: /d/t %+v, /d/a %+v; want both stamped 8000", tn, a)
	}
}

// TestUnstampedWritesKeepNoTimes checks that entries without a time (of
// binaries before TimeMs) change no time, cversion or pzxid, so old logs
// replay to the state they made, and the snapshot stays in the old format.
func TestUnstampedWritesKeepNoTimes(t *testing.T) {
	h := newHarness(t)
	h.mustApply(put("/d/a", "1"))
	h.mustApply(put("/d/a", "2"))
	h.mustApply(del("/d/a"))
	if n := mustGet(t, h.f, "/d"); n.CreatedAtMs|n.ModifiedAtMs|n.ChildrenVersion|n.ChildrenModifiedIndex != 0 {
		t.Errorf("unstamped writes recorded times: %+v", n)
	}
	if v := snapshotBytes(t, h.f)[len(snapshotMagic)]; v != snapshotVersion {
		t.Errorf("a state without times is written in version %d, want %d", v, snapshotVersion)
	}
	h.mustApply(stamped(put("/d/a", "3"), 9000))
	if v := snapshotBytes(t, h.f)[len(snapshotMagic)]; v != snapshotVersion+snapshotTimesRaise {
		t.Errorf("a state with times is written in version %d, want %d", v, snapshotVersion+snapshotTimesRaise)
	}
}

// TestSnapshotTimesVersionsMustHoldTimes checks that a snapshot of version
// 10 whose nodes hold no time is refused (the encoding of a state is
// unique), and that every byte of the times is covered by the checks.
func TestSnapshotTimesVersionsMustHoldTimes(t *testing.T) {
	empty := handMade(snapshotVersion+snapshotTimesRaise, header(0, 0, 0, 1),
		frameSpec{frameNode, append(appendNode(nil, "", entry{path: "/", nodeData: &nodeData{}}), 0, 0, 0, 0)}, endFrame)
	if _, err := ReadSnapshot(bytes.NewReader(empty)); !errors.Is(err, ErrCorruptSnapshot) {
		t.Errorf("version 10 without times: %v, want ErrCorruptSnapshot", err)
	}
	ahead := handMade(snapshotVersion+snapshotTimesRaise, header(3, 0, 0, 1),
		frameSpec{frameNode, append(appendNode(nil, "", entry{path: "/", nodeData: &nodeData{}}), 1, 1, 1, 4)}, endFrame)
	if _, err := ReadSnapshot(bytes.NewReader(ahead)); !errors.Is(err, ErrCorruptSnapshot) {
		t.Errorf("pzxid past the applied index: %v, want ErrCorruptSnapshot", err)
	}
	fine := handMade(snapshotVersion+snapshotTimesRaise, header(4, 0, 0, 1),
		frameSpec{frameNode, append(appendNode(nil, "", entry{path: "/", nodeData: &nodeData{}}), 1, 1, 1, 4)}, endFrame)
	f, err := ReadSnapshot(bytes.NewReader(fine))
	if err != nil {
		t.Fatalf("a valid version-10 snapshot: %v", err)
	}
	if !bytes.Equal(snapshotBytes(t, f), fine) {
		t.Errorf("version 10 re-encodes differently")
	}
}
