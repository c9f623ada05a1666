package fsm

import (
	"testing"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/command"
)

func createSessionWithID(id, timeoutMs uint64) command.Command {
	return command.Command{Op: command.OpSessionCreate, SessionID: id, TimeoutMs: timeoutMs}
}

func TestSessionCreateIDs(t *testing.T) {
	const random = 0x9e3779b97f4a7c15
	runApplyCases(t, []applyCase{
		{
			name: "the id is the one the proposer drew", cmd: createSessionWithID(random, 5000),
			check: func(t *testing.T, h *harness) {
				if s, err := h.f.Session(random); err != nil || s.TimeoutMs != 5000 {
					t.Errorf("Session(%#x) = %+v, %v", uint64(random), s, err)
				}
				if _, err := h.f.Session(h.index); err == nil {
					t.Errorf("a session also exists under the entry's index %d", h.index)
				}
			},
		},
		{
			name: "an entry without an id keeps the old rule: the id is its index", setup: []command.Command{noop(), noop()}, cmd: createSession(1000),
			check: func(t *testing.T, h *harness) {
				if _, err := h.f.Session(3); err != nil {
					t.Errorf("Session(3): %v", err)
				}
			},
		},
		{
			name: "a live id is refused", setup: []command.Command{createSessionWithID(random, 1000)},
			cmd: createSessionWithID(random, 2000), wantCode: api.CodePreconditionFailed,
		},
		{
			name: "an old-style id is refused when live", setup: []command.Command{createSession(1000)},
			cmd: createSessionWithID(1, 2000), wantCode: api.CodePreconditionFailed,
		},
		{
			name: "a closed session's id may be drawn again", setup: []command.Command{createSessionWithID(random, 1000), closeSession(random)},
			cmd: createSessionWithID(random, 2000),
		},
	})
}

func TestRandomSessionIDsOwnNodesAndSurviveSnapshots(t *testing.T) {
	const id = 0xfedcba9876543210
	h := newHarness(t)
	h.mustApply(createSessionWithID(id, 1000))
	h.mustApply(createSessionWithID(7, 1000))
	lock := h.mustApply(command.Command{Op: command.OpEnqueue, Path: "/locks/R/lock-", SessionID: id})
	h.mustApply(withSeq(put("/a", "v"), id, 1))
	restored := restore(t, snapshotBytes(t, h.f))
	if restored.Hash() != h.f.Hash() {
		t.Fatalf("restored state differs")
	}
	if n, err := restored.Get(lock.Node.Path); err != nil || n.Owner != id {
		t.Fatalf("queue node after restore: %+v, %v", n, err)
	}
	r, events := restored.Apply(h.index+1, ptr(closeSession(id)))
	if r.Err != nil || len(events) != 2 {
		t.Fatalf("closing the session after restore: %v, events %v", r.Err, events)
	}
	if _, err := restored.Get(lock.Node.Path); err == nil {
		t.Errorf("the session's ephemeral node survived its close")
	}
}
