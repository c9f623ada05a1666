package fsm

import (
	"bytes"
	"strings"
	"testing"

	"github.com/latch-io/latch/internal/command"
)

func TestReseedEndsSessionsAndRaisesCounters(t *testing.T) {
	h := newHarness(t)
	h.mustApply(command.Command{Op: command.OpMemberSet, Member: command.Member{ID: 1, Name: "old"}})
	h.mustApply(command.Command{Op: command.OpMemberSet, Member: command.Member{ID: 2, Name: "gone"}})
	h.mustApply(command.Command{Op: command.OpMemberRemove, Member: command.Member{ID: 2}})
	h.mustApply(command.Command{Op: command.OpSessionCreate, SessionID: 9, TimeoutMs: 5000})
	h.mustApply(command.Command{Op: command.OpPut, Path: "/dir/eph", Ephemeral: true, SessionID: 9})
	h.mustApply(command.Command{Op: command.OpPut, Path: "/dir/keep", Value: []byte("v")})
	before := h.mustApply(command.Command{Op: command.OpPut, Path: "/dir/n-", Sequential: true})

	const index = 1000
	members := []command.Member{{ID: 30, Name: "c"}, {ID: 10, Name: "a"}}
	if err := h.f.Reseed(index, members); err != nil {
		t.Fatal(err)
	}
	if err := checkNodeCache(h.f); err != nil {
		t.Fatalf("after the reseed: %v", err)
	}
	if err := h.f.Reseed(index, members); err == nil {
		t.Fatal("a second reseed at the same index succeeded")
	}
	if h.f.Applied() != index || h.f.SessionCount() != 0 {
		t.Fatalf("applied %d, %d sessions; want %d, 0", h.f.Applied(), h.f.SessionCount(), index)
	}
	if _, err := h.f.Get("/dir/eph"); err == nil {
		t.Fatal("the ephemeral node of an ended session survived the reseed")
	}
	if n, err := h.f.Get("/dir/keep"); err != nil || string(n.Value) != "v" {
		t.Fatalf("a persistent node after the reseed: %+v, %v", n, err)
	}
	got := h.f.Members()
	if len(got) != 2 || got[0].ID != 10 || got[1].ID != 30 || len(h.f.RemovedMembers()) != 0 {
		t.Fatalf("members %+v, removed %+v: want exactly the given ones, sorted, and none removed", got, h.f.RemovedMembers())
	}
	r, _ := h.f.Apply(index+1, &command.Command{Op: command.OpPut, Path: "/dir/n-", Sequential: true})
	if r.Err != nil || r.Node.Path <= before.Node.Path || !strings.HasSuffix(r.Node.Path, "0000001000") {
		t.Fatalf("sequential name after the reseed %q (%v); want above %q, from the reseed index", r.Node.Path, r.Err, before.Node.Path)
	}
	// The state is still valid: it survives its own snapshot round trip.
	if _, err := ReadSnapshot(bytes.NewReader(snapshotBytes(t, h.f))); err != nil {
		t.Fatalf("the reseeded state does not read back: %v", err)
	}
}
